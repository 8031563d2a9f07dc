"""The validated, immutable model of unit files.

Everything a user authors ends up in these frozen dataclasses; nothing downstream ever
sees raw TOML. Durations are seconds (float), signals are :class:`signal.Signals`,
argv lists are tuples of strings that may still contain ``{specifiers}`` (they are
resolved per instance by :mod:`ddsup.units._specifiers` once the plan is known).
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ddsup.units._unit_type import UnitType as UnitType


class Restart(str, enum.Enum):
    """systemd's ``Restart=`` subset."""

    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


class OnFailure(str, enum.Enum):
    """What a unit failing for good does to the rest of the run."""

    STOP_ALL = "stop-all"
    CONTINUE = "continue"


class BusyGpus(str, enum.Enum):
    """``[lane] busy_gpus``: what preflight does about GPUs other processes hold memory on."""

    FAIL = "fail"
    WARN = "warn"


class Routing(str, enum.Enum):
    """``[endpoint] routing``: how the endpoint picks a lane of the model a request names."""

    LEAST_LOAD = "least-load"
    PREFIX = "prefix"


class Placement(str, enum.Enum):
    """Where a service/oneshot unit runs (``[unit] on``)."""

    CLIENT = "client"
    EACH_NODE = "each-node"


def _frozen_env() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True)
class ServiceSection:
    """``[service]``: how to run, restart and stop the process."""

    exec: tuple[str, ...]
    exec_follower: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=_frozen_env)
    unset_environment: tuple[str, ...] = ()
    working_directory: str = "."
    restart: Restart = Restart.NO
    restart_sec: float = 0.1
    restart_max_sec: float = 120.0
    start_limit_burst: int = 5
    start_limit_interval: float = 10.0
    success_exit_status: frozenset[int] = frozenset({0})
    timeout_start: float = 90.0
    timeout_stop: float = 30.0
    timeout_stop_loading: float = 2.0  # lanes not ready in their current start
    kill_signal: signal.Signals = signal.SIGTERM
    forward_signals: tuple[signal.Signals, ...] = ()
    on_failure: OnFailure = OnFailure.STOP_ALL
    log_max_size: int = 64 << 20  # bytes of logs/<instance>.log before it is rotated
    log_max_files: int = 2  # rotated files kept (<instance>.log.1 …)


class ProbeKind(str, enum.Enum):
    """How readiness is probed."""

    HTTP = "http"
    TCP = "tcp"
    EXEC = "exec"


@dataclass(frozen=True)
class ReadySection:
    """``[ready]``: one probe. ``target`` is a URL (http), ``host:port`` (tcp) or argv (exec).

    Lanes keep running the probe once ready (liveness): every ``liveness_interval``,
    each attempt answered within that interval; ``liveness_failures`` failed attempts in
    a row restart the lane (0: no liveness probing).
    """

    kind: ProbeKind
    target: str | tuple[str, ...]
    interval: float = 0.5
    liveness_interval: float = 5.0
    liveness_failures: int = 3


@dataclass(frozen=True)
class LaneSection:
    """``[lane]``: a model-serving lane (one vLLM server, possibly spanning nodes)."""

    model: str
    model_path: str | None = None
    gpus: int = 1
    nodes: int = 1
    replicas: int | None = None  # None = "auto": fill what the other lanes leave
    port: int | None = 8000  # None = "auto": the agent picks free ports at preflight
    stagger: float = 5.0
    lead_standoff: float = 0.0
    max_loading: int | None = None  # None: no bound across the allocation
    busy_gpus: BusyGpus = BusyGpus.FAIL
    api_key_env: str | None = None  # the variable holding this lane's own API key
    served_model_names: tuple[str, ...] | None = None  # None: read from exec's vllm flags


@dataclass(frozen=True)
class SlurmSection:
    """``[slurm]``: extra srun options for the step that runs this unit's lanes."""

    srun_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class MinReady:
    """``min_ready``: a count of lanes, or a percentage of each model's lanes."""

    count: int | None = None
    percent: float | None = 100.0

    def required(self, total: int) -> int:
        """Lanes of a model with ``total`` replicas that must be ready (at least 1 if any)."""
        if self.count is not None:
            return min(self.count, total)
        pct = 100.0 if self.percent is None else self.percent
        needed = -(-int(total * pct) // 100)  # ceiling without float surprises
        return max(1, min(total, needed)) if total else 0


@dataclass(frozen=True)
class EndpointSection:
    """``[endpoint]``: the logical endpoint (router) in front of the lanes."""

    port: int = 9000
    bind: str = "127.0.0.1"
    max_queue_per_lane: int = 128
    max_in_flight_per_lane: int = 0  # more wait in the endpoint for a free slot; 0: no bound
    retry_after: float = 1.0
    retries: int = 2
    api_key_env: str | None = None
    open_routes: tuple[str, ...] = ("/health", "/metrics")  # answered without the key
    min_ready: MinReady = MinReady()
    max_body_bytes: int = 32 * 1024 * 1024
    max_buffered_bytes: int = 512 * 1024 * 1024  # request bodies in memory, per worker
    max_concurrent: int = 4096
    max_connections: int = 8192  # per worker
    upstream_timeout: float = 600.0
    workers: int | None = 1  # None = "auto": one per CPU the endpoint may run on
    eject_after: int = 5  # connect errors or 5xx of a lane in a row; 0: never eject
    eject_for: float = 10.0
    routing: Routing = Routing.LEAST_LOAD
    prefix_min_match: float = 0.3  # share of a prompt's blocks a lane must hold
    prefix_balance_requests: int = 64  # least-load wins past this many more in flight ...
    prefix_balance_ratio: float = 1.5  # ... and this many times as many


@dataclass(frozen=True)
class SourceLocation:
    """Where a unit came from, for error messages at run time.

    ``path`` is the file's path as printed: control characters escaped
    (:func:`ddsup.units._printable.printable`), so any message may quote it as it is.
    """

    path: str
    line: int = 1
    col: int = 1


@dataclass(frozen=True)
class Unit:
    """One unit file, validated. ``name`` is the file name without ``.toml``.

    A template (``NAME@.toml``) has ``template = True`` and ``name == "NAME@"``; its
    instances are named ``NAME@0``, ``NAME@1``, … (lanes: one per replica).
    """

    name: str
    type: UnitType
    service: ServiceSection
    source: SourceLocation
    description: str = ""
    after: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    on: Placement = Placement.CLIENT
    template: bool = False
    ready: ReadySection | None = None
    lane: LaneSection | None = None
    slurm: SlurmSection = SlurmSection()
    endpoint: EndpointSection | None = None
    stop_before_end: float | None = None  # stop it this long before the job's end time

    @property
    def base_name(self) -> str:
        """The name instances are built from: ``lane@`` → ``lane``."""
        return self.name[:-1] if self.template else self.name


@dataclass(frozen=True)
class UnitSet:
    """All units of a directory, validated together (dependencies, one endpoint/worker)."""

    directory: str
    units: tuple[Unit, ...]

    def by_name(self, name: str) -> Unit:
        for unit in self.units:
            if unit.name == name or unit.base_name == name:
                return unit
        raise KeyError(name)

    @property
    def lanes(self) -> tuple[Unit, ...]:
        return tuple(u for u in self.units if u.type is UnitType.LANE)

    @property
    def endpoint(self) -> Unit | None:
        return next((u for u in self.units if u.type is UnitType.ENDPOINT), None)

    @property
    def worker(self) -> Unit | None:
        return next((u for u in self.units if u.type is UnitType.WORKER), None)
