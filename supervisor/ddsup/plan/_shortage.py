"""Why lanes do not fit: the message of a placement shortage, with the fixes that apply.

The same message reaches the user from ``ddsup plan`` and from ``ddsup start`` (exit 69),
so it carries everything needed to act on it where it arises:

- what was asked (replicas and GPUs per lane) and what the allocation has;
- only the fixes that apply: never "use replicas = \\"auto\\"" to a unit that already
  says it, never "lower replicas" to one that has no number to lower;
- how to go on without GPUs: an allocation with none at all (a laptop, CI, a CPU node
  where GPU detection finds nothing) is told to simulate them with ``--gpus-per-node``,
  and every other shortage mentions it for rehearsals.
"""

from __future__ import annotations

from collections.abc import Sequence

from ddsup.units import LaneSection, Unit, printable

_NAMED = 6  # nodes named when their GPU counts differ (fewest first)

# How to plan or run without GPUs; both `ddsup plan` and `ddsup start` take it.
SIMULATE_GPUS = "--gpus-per-node G"


def shortage(
    unit: Unit,
    lane: LaneSection,
    fit: int,
    gpus_per_node: Sequence[tuple[str, int]],
    free: int,
    before: Sequence[str],
) -> str:
    """The message for ``unit`` of which only ``fit`` replicas fit, after ``before``."""
    asked = (
        'replicas = "auto" (at least 1)'
        if lane.replicas is None
        else f"{lane.replicas} replica{'s' if lane.replicas != 1 else ''}"
    )
    shape = f"{lane.gpus} GPU{'s' if lane.gpus != 1 else ''}"
    if lane.nodes > 1:
        shape += f" on each of {lane.nodes} consecutive nodes"
    has = _describe(gpus_per_node)
    if not any(count for _node, count in gpus_per_node):
        return (
            f"lane unit {unit.name!r} asks for {asked} of {shape}, but the allocation has "
            f"{has}. Without GPUs (a laptop, CI, a CPU node), simulate them with "
            f"{SIMULATE_GPUS} (e.g. --gpus-per-node 2) and let `ddsup fake-vllm` lanes "
            "stand in for vLLM"
        )
    fixes = ["lower replicas", 'use replicas = "auto"'] if lane.replicas is not None else []
    if lane.gpus > 1 or lane.nodes > 1:
        fixes.append("fewer GPUs or nodes per lane")
    fixes.append(f"ask for more nodes or GPUs (in a rehearsal, simulate them: {SIMULATE_GPUS})")
    earlier = f" after {', '.join(repr(n) for n in before)}" if before else ""
    return (
        f"lane unit {unit.name!r} asks for {asked} of {shape}, but only {fit} fit: "
        f"the allocation has {has}, {free} of them free{earlier}. {_either(fixes)}"
    )


def _either(fixes: list[str]) -> str:
    """``A, B, or C`` with the first letter capitalised: the fixes, as one sentence."""
    text = fixes[0] if len(fixes) == 1 else ", ".join(fixes[:-1]) + ", or " + fixes[-1]
    return text[0].upper() + text[1:]


def _describe(gpus_per_node: Sequence[tuple[str, int]]) -> str:
    """``2 nodes x 4 GPUs = 8 GPUs``; nodes that differ are named, fewest GPUs first."""
    counts = sorted({count for _node, count in gpus_per_node})
    n = len(gpus_per_node)
    total = sum(count for _node, count in gpus_per_node)
    nodes = f"{n} node{'s' if n != 1 else ''}"
    if len(counts) == 1:
        return f"{nodes} x {counts[0]} GPUs = {total} GPUs"
    fewest = sorted(gpus_per_node, key=lambda item: item[1])
    shown = ", ".join(f"{printable(name)}: {count}" for name, count in fewest[:_NAMED])
    more = ", …" if n > _NAMED else ""
    return f"{nodes} with {counts[0]}-{counts[-1]} GPUs each ({shown}{more}), {total} GPUs"
