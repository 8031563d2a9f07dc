"""Bugs the chaos schedules found and the engine still has: which schedules hit them.

A schedule that hits a known bug runs as ``xfail(strict=True)``: it must keep failing
until the engine is fixed, and then its XPASS fails the suite, as a reminder to delete the
entry here. Each entry says what goes wrong and where the cause is.
"""

from __future__ import annotations

import signal

from chaos_schedule import Cause, Phase, Schedule, lane_nodes

STOP_BEFORE_AGENTS_CONNECT = (
    "a stop while node agents are still starting (before they connect back) takes "
    "AGENT_SHUTDOWN_GRACE = 10 s: Controller._shutdown_agents tells only connected agents "
    "to shut down, then waits for every agent process; a second stop signal does not cut "
    "that wait (_kill_everything signals connected agents only)"
)

SIGNAL_AFTER_WATCHER_CLOSED = (
    "a stop signal that arrives after Controller._supervise has closed its signal receiver "
    "(during the final sweep_until_gone, Sentinel.close, writing result.json, interpreter "
    "exit) meets the default disposition: SIGTERM kills ddsup start (exit -15, no "
    "result.json); SIGINT raises KeyboardInterrupt past _cli.main (exit -2, while "
    "result.json says 130/143)"
)

# (seed, index) of schedules kept as regression tests whatever --chaos-seed says
REGRESSIONS = ((1, 8), (1, 15), (1, 3), (1, 37))


def known_bug(schedule: Schedule) -> str | None:
    """The known bug this schedule runs into, if any."""
    if any(i.role == "storm" for i in schedule.injections):
        return SIGNAL_AFTER_WATCHER_CLOSED
    primary = next((i for i in schedule.injections if i.role == "primary"), None)
    if primary is None or primary.phase is not Phase.PREFLIGHT:
        return None
    if schedule.cause not in (Cause.STOP_SIGNAL, Cause.AGENT_LOST):
        return None
    # the wait is for agents that are still alive: one we SIGKILL ends its share at once
    killed = {
        i.target
        for i in schedule.injections
        if i.target.startswith("agent:") and i.signum is signal.SIGKILL
    }
    if schedule.cause is Cause.AGENT_LOST:
        killed.add(primary.target)
    return STOP_BEFORE_AGENTS_CONNECT if lane_nodes(schedule) > len(killed) else None
