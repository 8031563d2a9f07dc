"""The one vocabulary of a unit instance's state, and the transitions between them.

The service's state machine moves through these; events, the controller, ``status``,
the console and the metrics all name states with this enum (its values are the strings
written to ``events.jsonl`` and ``status --json``)::

    inactive ─▶ waiting ─▶ starting ─▶ ready ◀─▶ unresponsive ─▶ stopping ─▶ exited | failed
                   │          │  ▲        │            │
                   │          ▼  │        ▼            │
                   │        restarting ◀──┴────────────┘   (any live state ─▶ stopping / failed)
                   └─▶ exited   (stopped before it started)

``unresponsive``: a ready lane whose liveness probe failed; it is out of the endpoint's
rotation until a probe passes again (back to ``ready``) or ``liveness_failures`` probes
in a row failed (``restarting``, or ``failed`` by its restart policy).
"""

from __future__ import annotations

import enum


class InstanceState(str, enum.Enum):
    """Where one unit instance is in its life (docs/operating.md lists them)."""

    INACTIVE = "inactive"
    WAITING = "waiting"
    STARTING = "starting"
    READY = "ready"
    UNRESPONSIVE = "unresponsive"
    RESTARTING = "restarting"
    STOPPING = "stopping"
    EXITED = "exited"
    FAILED = "failed"

    @property
    def final(self) -> bool:
        return self in FINAL


LIVE = frozenset(
    {
        InstanceState.WAITING,
        InstanceState.STARTING,
        InstanceState.READY,
        InstanceState.UNRESPONSIVE,
        InstanceState.RESTARTING,
    }
)
"""States from which a stop request moves an instance to ``stopping``."""
FINAL = frozenset({InstanceState.EXITED, InstanceState.FAILED})
"""States an instance never leaves."""
RUNNING = frozenset({InstanceState.STARTING, InstanceState.READY, InstanceState.UNRESPONSIVE})
"""States in which an instance's process runs (a replica peer to take down)."""
LOADING = frozenset(
    {
        InstanceState.INACTIVE,
        InstanceState.WAITING,
        InstanceState.STARTING,
        InstanceState.RESTARTING,
    }
)
"""Not ready yet, and on the way there: what the console's progress line waits on."""
NOTABLE = frozenset(
    {
        InstanceState.READY,
        InstanceState.UNRESPONSIVE,
        InstanceState.FAILED,
        InstanceState.RESTARTING,
        InstanceState.EXITED,
    }
)
"""The transitions the console prints without ``-v``."""
ALLOWED: dict[InstanceState, set[InstanceState]] = {
    InstanceState.INACTIVE: {InstanceState.WAITING, InstanceState.STARTING, InstanceState.EXITED},
    InstanceState.WAITING: {InstanceState.STARTING, InstanceState.STOPPING, InstanceState.EXITED},
    InstanceState.STARTING: {
        InstanceState.READY,
        InstanceState.RESTARTING,
        InstanceState.STOPPING,
        InstanceState.EXITED,
        InstanceState.FAILED,
    },
    InstanceState.READY: {
        InstanceState.UNRESPONSIVE,
        InstanceState.RESTARTING,
        InstanceState.STOPPING,
        InstanceState.EXITED,
        InstanceState.FAILED,
    },
    InstanceState.UNRESPONSIVE: {
        InstanceState.READY,
        InstanceState.RESTARTING,
        InstanceState.STOPPING,
        InstanceState.EXITED,
        InstanceState.FAILED,
    },
    InstanceState.RESTARTING: {
        InstanceState.STARTING,
        InstanceState.STOPPING,
        InstanceState.FAILED,
    },
    InstanceState.STOPPING: {InstanceState.EXITED, InstanceState.FAILED},
    InstanceState.EXITED: set(),
    InstanceState.FAILED: set(),
}


class IllegalTransition(RuntimeError):
    """A bug: the state machine was asked for a transition it does not have."""
