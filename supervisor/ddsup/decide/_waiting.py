"""What an instance the run has not started yet is waiting for, as ``status`` shows it.

An instance is told to start once the run's rules allow it (``_run_state``): preflight
is over on every node, each unit it starts ``after`` is ready (the worker: the
endpoint), the endpoint's ``min_ready`` lanes are ready, and ``max_loading`` lets a lane
load. Until then it has no event of its own; ``status`` shows it ``waiting``, with the
first rule that holds it (:func:`waiting_reasons`). An instance waiting for its stagger
turn on its node says so itself (its ``waiting`` event, with when the turn comes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from ddsup.plan import PlannedInstance
from ddsup.units import UnitType

PREFLIGHT = "for preflight on every node"  # each reason reads on from the instance's name


def waiting_reasons(
    pending: Sequence[PlannedInstance],
    *,
    may_start: bool,
    after: Mapping[str, tuple[str, ...]],
    ready_once: Collection[str],
    quorum: str | None,
    holds: Callable[[str], str | None],
) -> dict[str, str]:
    """Each of ``pending`` (not told to start yet) → the rule that holds it.

    ``quorum`` says which ``min_ready`` is not met yet (None: all are); ``holds``, of a
    unit, whether ``max_loading`` holds its lanes (``LoadingGate.holds``). What holds an
    instance depends on its unit alone, so it is worked out once per unit: a status of
    8,000 lanes held by ``max_loading`` counts the loading lanes once.
    """
    if not may_start:
        return {p.instance: PREFLIGHT for p in pending}
    by_unit: dict[str, str | None] = {}
    out: dict[str, str] = {}
    for planned in pending:
        if planned.unit not in by_unit:
            held = _held(planned, after, ready_once, quorum)
            by_unit[planned.unit] = held or holds(planned.unit)
        reason = by_unit[planned.unit]
        if reason is not None:
            out[planned.instance] = reason
    return out


def _held(
    planned: PlannedInstance,
    after: Mapping[str, tuple[str, ...]],
    ready_once: Collection[str],
    quorum: str | None,
) -> str | None:
    waits = after[planned.instance]
    missing = [name for name in waits if name not in ready_once]
    if missing:
        return f"after {_units(waits, missing)}"
    if planned.type is UnitType.ENDPOINT:
        return quorum
    return None


def _units(waits: Sequence[str], missing: Sequence[str]) -> str:
    """``endpoint (not ready yet)``, ``lane (3 of 8 ready)``: each unit still waited for."""
    totals: dict[str, int] = {}
    for name in waits:
        unit = name.split("@", 1)[0]
        totals[unit] = totals.get(unit, 0) + 1
    short: dict[str, int] = {}
    for name in missing:
        unit = name.split("@", 1)[0]
        short[unit] = short.get(unit, 0) + 1
    parts = []
    for unit, total in totals.items():
        if unit not in short:
            continue
        ready = total - short[unit]
        parts.append(
            f"{unit} (not ready yet)" if total == 1 else f"{unit} ({ready} of {total} ready)"
        )
    return ", ".join(parts)
