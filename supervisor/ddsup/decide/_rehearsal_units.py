"""A rehearsal's unit files: each lane's vLLM server command made fake-vllm's.

Apart from the rest of a rehearsal (``controller._prepare``: the allocation it simulates) because
a node agent applies only this, to the unit files it loads (its ``Setup`` says whether),
and need not import the allocation's rules before its first lane starts.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence

from ddsup.units import Unit, UnitSet, UnitType, vllm_command_span

FAKE_VLLM = (sys.executable, "-m", "ddsup", "fake-vllm")


def rehearsal_units(units: UnitSet) -> UnitSet:
    """``units`` with each lane's vLLM server command replaced by fake-vllm."""
    return dataclasses.replace(units, units=tuple(_rehearse(u) for u in units.units))


def _rehearse(unit: Unit) -> Unit:
    if unit.type is not UnitType.LANE:
        return unit
    service = unit.service
    follower = service.exec_follower
    return dataclasses.replace(
        unit,
        service=dataclasses.replace(
            service,
            exec=_fake(service.exec),
            exec_follower=None if follower is None else _fake(follower),
        ),
    )


def _fake(argv: Sequence[str]) -> tuple[str, ...]:
    span = vllm_command_span(argv)
    if span is None:
        return tuple(argv)
    return (*FAKE_VLLM, *_local_host(argv[span[1] :]))


def _local_host(args: Sequence[str]) -> list[str]:
    """``--host X`` / ``--host=X`` → the address ddsup reaches the lane at."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            out.append("{host}")
        elif arg == "--host":
            skip = True
            out.append(arg)
        elif arg.startswith("--host="):
            out.append("--host={host}")
        else:
            out.append(arg)
    return out
