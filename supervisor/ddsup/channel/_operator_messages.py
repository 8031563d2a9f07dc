"""What an operator (``ddsup status``, ``ddsup stop``, ``ddsup restart``) and the
controller say to each other on the control channel.

Apart from the run's own messages (``_messages``) because no agent or endpoint ever sends
or receives them: the operator's side needs only these, the snapshot and the codec.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

from ddsup.record import RunSnapshot


class RestartStep(str, enum.Enum):
    """Where one instance of a ``ddsup restart`` is."""

    QUEUED = "queued"  # --rolling: waiting for the one before it
    DRAINING = "draining"  # out of the endpoint's rotation, its requests finishing
    RESTARTING = "restarting"  # stopped and started again, not ready yet
    READY = "ready"  # ready again (back in the rotation)
    FAILED = "failed"  # it did not come back (it failed, or the run stopped)
    SKIPPED = "skipped"  # --rolling: not restarted, since one before it failed

    @property
    def over(self) -> bool:
        return self in (RestartStep.READY, RestartStep.FAILED, RestartStep.SKIPPED)


@dataclass(frozen=True)
class RestartRequest:
    """``ddsup restart``: instances or units (``lane``: all its instances)."""

    op: ClassVar[str] = "restart"
    names: tuple[str, ...]
    rolling: bool = False


@dataclass(frozen=True)
class RestartAnswer:
    """The instances the restart covers, in order; or why it was refused (``error``)."""

    op: ClassVar[str] = "restart_answer"
    instances: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class RestartProgress:
    """One instance of a ``ddsup restart`` reached ``step`` (draining, restarting, ready, …)."""

    op: ClassVar[str] = "restart_progress"
    instance: str
    step: RestartStep


@dataclass(frozen=True)
class RestartOver:
    """Every instance of the restart is ready again (``ok``), or some are not."""

    op: ClassVar[str] = "restart_over"
    ok: bool


@dataclass(frozen=True)
class StatusRequest:
    """``ddsup status``: the run's snapshot, please."""

    op: ClassVar[str] = "status"


@dataclass(frozen=True)
class StatusReply:
    """The run's snapshot, the answer to a :class:`StatusRequest`."""

    op: ClassVar[str] = "status_reply"
    snapshot: RunSnapshot


@dataclass(frozen=True)
class StopRequest:
    """``ddsup stop``: like SIGTERM to ``ddsup start``."""

    op: ClassVar[str] = "stop_run"


@dataclass(frozen=True)
class StopAnswer:
    """The controller took a :class:`StopRequest`: the run is stopping."""

    op: ClassVar[str] = "stopping"


OperatorMessage = (
    StatusRequest
    | StatusReply
    | StopRequest
    | StopAnswer
    | RestartRequest
    | RestartAnswer
    | RestartProgress
    | RestartOver
)
OPERATOR_MESSAGES: tuple[type[Any], ...] = (
    StatusRequest, StatusReply, StopRequest, StopAnswer, RestartRequest, RestartAnswer,
    RestartProgress, RestartOver,
)  # fmt: skip
"""What an operator and the controller say to each other (``_messages.MESSAGES`` has them too)."""
