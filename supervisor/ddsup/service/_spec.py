"""What a service is given (:class:`ServiceSpec`) and what it shows (:class:`ServiceStatus`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ddsup.process import ExitStatus, LogError
from ddsup.record._states import InstanceState
from ddsup.units._model import Unit


@dataclass(frozen=True)
class ServiceSpec:
    """Everything needed to run one instance, with specifiers already resolved."""

    instance: str
    node: str
    unit: Unit
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: Path
    context: Mapping[str, str]
    start_delay: float = 0.0
    probe: bool = True  # False for ranks > 0 of a multi-node lane: rank 0 serves HTTP
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
