"""What a service is given (its spec) and what it shows (its status), as plain values.

:class:`ServiceSpec` is one instance with its specifiers resolved, built by the node that
runs it; :class:`ServiceStatus` is where the service is now, for in-process callers (the
rest of the run reads its events). :class:`Watch` and :class:`Resume` are what one start
has shown so far, and what the run told a held replica rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ddsup.process import ExitStatus, LogError, LogFile
from ddsup.record import InstanceState
from ddsup.units import Unit

REPLICA_RESTARTS = "the replica restarts as one"  # how a held rank's reason ends


@dataclass(frozen=True)
class ServiceSpec:
    """Everything needed to run one instance, with specifiers already resolved."""

    instance: str
    node: str
    unit: Unit
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: LogFile  # in the held logs/ of the state directory (or a path)
    context: Mapping[str, str]
    start_delay: float = 0.0
    probe: bool = True  # False for ranks > 0 of a multi-node lane: rank 0 serves HTTP
    replica: bool = False  # a rank of a multi-node replica: the run restarts it, not itself
    master_port: int | None = None  # such a rank's rendezvous port in this start
    log_error: LogError | None = None  # a log that cannot be written: said once, run goes on


@dataclass
class ServiceStatus:
    """Where the service is now (in-process callers and tests; others read its events)."""

    state: InstanceState = InstanceState.INACTIVE
    since: float = 0.0
    pid: int | None = None
    restarts: int = 0
    last_exit: ExitStatus | None = None
    probe: str | None = None  # the readiness probe's last answer in the current start
    reason: str | None = None
    readiness_timeout: bool = False  # the latest start was not ready within timeout_start
    attempt: int | None = None  # the current start's attempt at becoming ready


@dataclass
class Watch:
    """What one start of the process has shown so far (shared by its two tasks)."""

    ready_at: float | None = None
    timed_out: bool = False
    exited: bool = False
    unresponsive: str | None = None  # why the liveness probes ended it (None: they did not)


@dataclass
class Resume:
    """What the run said to a held rank: start again (after ``delay``), or fail."""

    delay: float = 0.0
    attempt: int | None = None
    respec: Callable[[], ServiceSpec] | None = None
    failure: tuple[str, bool] | None = None  # (reason, readiness timeout)
