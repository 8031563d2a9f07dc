"""The one table of unit-file sections and keys.

Validation (:mod:`ddsup.units._parse`), ``ddsup schema`` (:mod:`ddsup.units._jsonschema`)
and the tests that keep ``docs/units.md`` honest all read :data:`SECTIONS`; a key exists
in exactly one place.
Defaults are written as a user would write them; a test checks that each one converts to
the default of the matching field in :mod:`ddsup.units._model`.
"""

from __future__ import annotations

from ddsup.units import _kinds as k
from ddsup.units import _kinds_env as ke
from ddsup.units._keyspec import ALL_TYPES as _ALL_TYPES
from ddsup.units._keyspec import KeySpec as KeySpec
from ddsup.units._keyspec import SectionSpec as SectionSpec
from ddsup.units._keyspec import duration_key
from ddsup.units._model import BusyGpus, OnFailure, Placement, Restart, UnitType
from ddsup.units._schema_endpoint import ENDPOINT as ENDPOINT
from ddsup.units._specifiers import BASE_SPECIFIERS

_LANE = frozenset({UnitType.LANE})
# Kinds whose program is ddsup itself: [service] exec and [ready] have built-in defaults
# (see ddsup.units._builtin), so a unit of such a type needs neither.
BUILT_IN = frozenset({UnitType.ENDPOINT})
_NOT_BUILT_IN = _ALL_TYPES - BUILT_IN


_duration_key = duration_key


UNIT = SectionSpec(
    "unit",
    "What the unit is and how it is ordered against other units.",
    (
        KeySpec("description", k.STRING, "Free text shown by `ddsup status`.", "", "Llama 8B lane"),
        KeySpec(
            "type",
            k.choice(UnitType),
            "What the unit is for; decides where it runs and when it starts.",
            example="lane",
            required_for=_ALL_TYPES,
        ),
        KeySpec(
            "after",
            k.UNIT_NAMES,
            "Units that must be started (and ready) before this one starts.",
            [],
            ["preflight"],
        ),
        KeySpec(
            "requires",
            k.UNIT_NAMES,
            "Units this one needs: when one of them fails for good, this unit is stopped too.",
            [],
            ["preflight"],
        ),
        KeySpec(
            "on",
            k.choice(Placement),
            "service/oneshot only: run once where `ddsup start` runs, or once on every node.",
            "client",
            "each-node",
            only=frozenset({UnitType.SERVICE, UnitType.ONESHOT}),
        ),
        KeySpec(
            "stop_before_end",
            k.duration(positive=True, typical=600.0),
            "In a Slurm job with a time limit: stop this unit gracefully (kill_signal, "
            "timeout_stop) this long before the job's end time. Absent: no early stop.",
            example="10m",
        ),
    ),
    required_for=_ALL_TYPES,
)

SERVICE = SectionSpec(
    "service",
    "How to run, restart and stop the unit's process.",
    (
        KeySpec(
            "exec",
            k.ARGV,
            "The argument vector to run; never a shell string. Endpoint units: the "
            "running ddsup's endpoint when absent.",
            example=["vllm", "serve", "{model_path}", "--port", "{port}"],
            required_for=_NOT_BUILT_IN,
            specifiers=True,
        ),
        KeySpec(
            "exec_follower",
            k.ARGV,
            "Lane with nodes > 1: argv of ranks > 0 (headless followers); absent: they run `exec`.",
            example=["vllm", "serve", "{model_path}", "--headless"],
            specifiers=True,
            only=_LANE,
        ),
        KeySpec(
            "environment",
            ke.ENVIRONMENT,
            "Variables added to the inherited environment.",
            {},
            {"VLLM_LOGGING_LEVEL": "INFO"},
            specifiers=True,
        ),
        KeySpec(
            "unset_environment",
            ke.VAR_NAMES,
            "Variables removed from the inherited environment.",
            [],
            ["http_proxy"],
        ),
        KeySpec(
            "working_directory",
            k.NONEMPTY_STRING,
            "Directory the process starts in, relative to the unit files' directory.",
            ".",
            "/scratch/run",
        ),
        KeySpec("restart", k.choice(Restart), "When to restart the process.", "no", "on-failure"),
        _duration_key(
            "restart_sec",
            "First restart delay; doubles per consecutive failure up to restart_max_sec.",
            "100ms",
            "2s",
        ),
        _duration_key("restart_max_sec", "Upper bound of the restart delay.", "2m", "5m"),
        KeySpec(
            "start_limit_burst",
            k.integer(1),
            "More than this many starts inside start_limit_interval: the unit has failed.",
            5,
            3,
        ),
        _duration_key(
            "start_limit_interval", "The window of start_limit_burst.", "10s", "10m", positive=True
        ),
        KeySpec(
            "success_exit_status",
            k.EXIT_STATUSES,
            "Exit statuses that count as success (replaces the default).",
            [0],
            [0, 143],
        ),
        _duration_key(
            "timeout_start",
            "Ready within this after starting, or the unit has failed.",
            "90s",
            "20m",
            positive=True,
        ),
        _duration_key(
            "timeout_stop",
            "After kill_signal, wait this long, then SIGKILL the process group.",
            "30s",
            "10s",
            positive=True,
        ),
        KeySpec(
            "timeout_stop_loading",
            k.duration(positive=True, typical=2.0),
            "Lanes not ready in their current start (loading): after kill_signal, wait "
            "this long instead of timeout_stop (the shorter of the two), then SIGKILL.",
            "2s",
            "5s",
            only=_LANE,
        ),
        KeySpec(
            "kill_signal", k.SIGNAL, "Signal that asks the process to stop.", "SIGTERM", "SIGINT"
        ),
        KeySpec(
            "forward_signals",
            k.FORWARD_SIGNALS,
            "Signals that ddsup receives and passes on to this unit.",
            [],
            ["SIGUSR1"],
        ),
        KeySpec(
            "on_failure",
            k.choice(OnFailure),
            "When the unit fails for good: stop the whole run, or carry on without it.",
            "stop-all",
            "continue",
        ),
        KeySpec(
            "log_max_size",
            k.size(64 << 10),
            "Size of logs/<instance>.log at which it is rotated (renamed .log.1, …).",
            "64M",
            "1G",
        ),
        KeySpec(
            "log_max_files",
            k.integer(0, 100),
            "Rotated log files kept per instance; the oldest beyond them is deleted.",
            2,
            5,
        ),
    ),
    required_for=_NOT_BUILT_IN,
)

READY = SectionSpec(
    "ready",
    "How to tell that the unit is ready: exactly one of http, tcp, exec. Without this "
    "section a unit is ready once started (a oneshot: once it exited successfully; an "
    "endpoint: once its /health answers 200).",
    (
        KeySpec(
            "http",
            ke.HTTP_URL,
            "Ready when a GET of this URL answers 200.",
            example="http://{host}:{port}/health",
            specifiers=True,
        ),
        KeySpec(
            "tcp",
            ke.TCP_TARGET,
            "Ready when a TCP connection to host:port succeeds.",
            example="{host}:{port}",
            specifiers=True,
        ),
        KeySpec(
            "exec",
            k.ARGV,
            "Ready when this command exits 0.",
            example=["test", "-e", "{state_dir}/ready"],
            specifiers=True,
        ),
        _duration_key("interval", "Time between probes.", "500ms", "1s", positive=True),
        KeySpec(
            "liveness_interval",
            k.duration(positive=True, typical=5.0),
            "Lanes, once ready: time between liveness probes (the same probe); each must "
            "answer within it.",
            "5s",
            "10s",
            only=_LANE,
        ),
        KeySpec(
            "liveness_failures",
            k.integer(0),
            "Lanes: liveness probes failed in a row that restart the lane; the first one "
            "takes it out of the endpoint's rotation. 0: no liveness probing.",
            3,
            5,
            only=_LANE,
        ),
    ),
)

LANE = SectionSpec(
    "lane",
    "A model-serving lane (one vLLM server, possibly spanning nodes). Lane units only; required there.",
    (
        KeySpec(
            "model",
            k.NONEMPTY_STRING,
            "The name clients send as `model`; the endpoint routes by it.",
            example="llama-8b",
            required_for=_LANE,
        ),
        KeySpec(
            "model_path",
            k.NONEMPTY_STRING,
            "Weights; preflight checks it is readable on each node.",
            example="/models/llama-3.1-8b",
        ),
        KeySpec("gpus", k.integer(1), "GPUs per lane on each node it spans.", 1, 2),
        KeySpec("nodes", k.integer(1), "Nodes per lane; > 1: one process per node.", 1, 2),
        KeySpec(
            "replicas",
            k.REPLICAS,
            'Number of lanes; "auto" fills what the other lane units leave.',
            "auto",
            4,
        ),
        KeySpec(
            "port",
            k.PORT_OR_AUTO,
            'Base port of lanes on a node; "auto": free ports picked at preflight, from'
            " 20000 up and below the kernel's ephemeral range (ip_local_port_range), which"
            " outgoing connections take their ports from.",
            8000,
            "auto",
        ),
        _duration_key("stagger", "Wait between successive lane starts on a node.", "5s", "200ms"),
        _duration_key(
            "lead_standoff", "Extra wait before any lane but the first starts.", "0s", "30s"
        ),
        KeySpec(
            "max_loading",
            k.integer(1),
            "Most lanes of this unit loading at once across the allocation (absent: no bound).",
            example=8,
        ),
        KeySpec(
            "busy_gpus",
            k.choice(BusyGpus),
            "Preflight finds other processes holding memory on a lane's GPUs: fail (69) or warn.",
            "fail",
            "warn",
        ),
        KeySpec(
            "api_key_env",
            ke.VARIABLE,
            "The variable holding this lane's own API key: the endpoint sends it to the "
            "lane; only the lane and the endpoint get the variable.",
            example="VLLM_API_KEY",
        ),
        KeySpec(
            "served_model_names",
            k.STRINGS,
            "Other names the lane answers to (aliases, LoRA adapters); absent: read from "
            "exec's --served-model-name and --lora-modules.",
            example=["llama", "sql-lora"],
        ),
    ),
    only=_LANE,
    required_for=_LANE,
)

SLURM = SectionSpec(
    "slurm",
    "Slurm options for the job step that runs this unit's lanes. Lane units only.",
    (
        KeySpec(
            "srun_args",
            k.STRINGS,
            "Extra srun options (pyxis containers, …).",
            [],
            ["--container-image=/images/vllm.sqsh"],
        ),
    ),
    only=_LANE,
)

SECTIONS: tuple[SectionSpec, ...] = (UNIT, SERVICE, READY, LANE, SLURM, ENDPOINT)
SECTION_NAMES: tuple[str, ...] = tuple(section.name for section in SECTIONS)
READY_PROBES: tuple[str, ...] = ("http", "tcp", "exec")

# Every specifier a unit file may use: the runtime ones plus each scalar key of [lane].
SPECIFIERS: frozenset[str] = BASE_SPECIFIERS | {
    key.name for key in LANE.keys if key.kind is not k.STRINGS
}


def section(name: str) -> SectionSpec | None:
    """The section called ``name``, or None."""
    return next((spec for spec in SECTIONS if spec.name == name), None)
