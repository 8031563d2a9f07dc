"""The one table of unit-file sections and keys, and its shapes: one key
(:class:`KeySpec`), one section (:class:`SectionSpec`).

Validation (:mod:`ddsup.units._parse`), ``ddsup schema`` (:mod:`ddsup.units._jsonschema`)
and the tests that keep ``docs/units.md`` honest all read :data:`SECTIONS`; a key exists
in exactly one place.
Defaults are written as a user would write them; a test checks that each one converts to
the default of the matching field in :mod:`ddsup.units._model`. The ``[endpoint]``
section lists the endpoint's own routes too (``ENDPOINT_ROUTES``, for ``open_routes``):
the units layer cannot import the endpoint's table, and a test holds the two equal.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from ddsup._json import Json, JsonObject
from ddsup.units import _kinds as k
from ddsup.units._durations import parse_duration
from ddsup.units._model import BusyGpus, OnFailure, Placement, Restart, Routing, UnitType
from ddsup.units._specifiers import BASE_SPECIFIERS

ALL_TYPES = frozenset(UnitType)


@dataclass(frozen=True)
class KeySpec:
    """One key: its kind, documentation, default (as written in TOML) and restrictions.

    ``required_for``: the unit types whose files must give this key (when they have its
    section at all; whether they must is :attr:`SectionSpec.required_for`).
    """

    name: str
    kind: k.Kind
    doc: str
    default: Json = None
    example: Json = None
    required_for: frozenset[UnitType] = frozenset()
    specifiers: bool = False
    only: frozenset[UnitType] = ALL_TYPES


@dataclass(frozen=True)
class SectionSpec:
    """One ``[section]``: its keys and which unit types may (or must) have it."""

    name: str
    doc: str
    keys: tuple[KeySpec, ...]
    only: frozenset[UnitType] = ALL_TYPES
    required_for: frozenset[UnitType] = frozenset()

    def key(self, name: str) -> KeySpec | None:
        return next((key for key in self.keys if key.name == name), None)


def duration_key(
    name: str, doc: str, default: str, example: str, *, positive: bool = False
) -> KeySpec:
    """A duration key; its default (or example, when the default is 0) is the typical
    value that steers the hint for a bare number (``interval = 250`` → ``"250ms"``)."""
    typical = parse_duration(default) or parse_duration(example)
    kind = k.duration(positive=positive, typical=typical)
    return KeySpec(name, kind, doc, default, example)


_LANE = frozenset({UnitType.LANE})
# Kinds whose program is ddsup itself: [service] exec and [ready] have built-in defaults
# (see ddsup.units._builtin), so a unit of such a type needs neither.
BUILT_IN = frozenset({UnitType.ENDPOINT})
_NOT_BUILT_IN = ALL_TYPES - BUILT_IN


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
            required_for=ALL_TYPES,
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
    required_for=ALL_TYPES,
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
            k.ENVIRONMENT,
            "Variables added to the inherited environment.",
            {},
            {"VLLM_LOGGING_LEVEL": "INFO"},
            specifiers=True,
        ),
        KeySpec(
            "unset_environment",
            k.VAR_NAMES,
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
            k.HTTP_URL,
            "Ready when a GET of this URL answers 200.",
            example="http://{host}:{port}/health",
            specifiers=True,
        ),
        KeySpec(
            "tcp",
            k.TCP_TARGET,
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
            k.VARIABLE,
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

# The endpoint's routes (ddsup.endpoint._route_table.ROUTES, which a test holds equal).
ENDPOINT_ROUTES = (
    "/health",
    "/metrics",
    "/v1/models",
    "/ping",
    "/version",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/chat/completions/batch",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/inference/v1/generate",
    "/v1/systemone",
    "/generative_scoring",
    "/tokenize",
    "/detokenize",
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/v1/messages/render",
    "/v1/responses/render",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
    "/v1/embeddings",
    "/pooling",
    "/classify",
    "/score",
    "/v1/score",
    "/rerank",
    "/v1/rerank",
    "/v2/rerank",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
)


def _routes(value: object) -> tuple[str, ...]:
    routes = k.STRINGS.convert(value)
    assert isinstance(routes, tuple)

    def check(item: object) -> None:
        if item not in ENDPOINT_ROUTES:
            near = difflib.get_close_matches(str(item), ENDPOINT_ROUTES, n=1)
            hint = (
                f"; did you mean {near[0]!r}?" if near else f"; one of {', '.join(ENDPOINT_ROUTES)}"
            )
            raise k.Invalid(f"{item!r} is not a route of the endpoint{hint}")

    k.each(routes, check)
    return routes


def _number(low: float, high: float | None = None) -> k.Kind:
    """A finite number (integer or float) in ``[low, high]`` (``high`` may be open)."""
    bounds = f"{low:g}..{high:g}" if high is not None else f">= {low:g}"

    def convert(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise k.Invalid(f"expected a number {bounds}, got {k.type_name(value)}")
        number = float(value)
        if not math.isfinite(number) or number < low or (high is not None and number > high):
            raise k.Invalid(f"must be a number {bounds}, got {value}")
        return number

    def json() -> JsonObject:
        schema: JsonObject = {"type": "number", "minimum": low}
        if high is not None:
            schema["maximum"] = high
        return schema

    return k.Kind(f"number {bounds}", convert, json)


OPEN_ROUTES = k.Kind(
    "array of endpoint routes",
    _routes,
    lambda: {"type": "array", "items": {"enum": list(ENDPOINT_ROUTES)}},
)

ENDPOINT = SectionSpec(
    "endpoint",
    "The logical endpoint (router) in front of the lanes. Endpoint units only; optional there.",
    (
        KeySpec("port", k.PORT, "Port the endpoint listens on.", 9000, 8080),
        KeySpec(
            "bind", k.NONEMPTY_STRING, "Address the endpoint listens on.", "127.0.0.1", "0.0.0.0"
        ),
        KeySpec(
            "max_queue_per_lane",
            k.integer(1),
            "Admission limit: outstanding requests per lane before answering 429.",
            128,
            64,
        ),
        KeySpec(
            "max_in_flight_per_lane",
            k.integer(0),
            "Requests sent to one lane at once; more wait in the endpoint until a lane has a "
            "free slot (0: no bound, each request goes to a lane when it arrives).",
            0,
            16,
        ),
        duration_key(
            "retry_after",
            "Retry-After sent with 429 and 503 answers (a lane's own 429 may ask for longer).",
            "1s",
            "2s",
        ),
        KeySpec(
            "retries",
            k.integer(0),
            "Further distinct lanes tried before any response byte went out.",
            2,
            1,
        ),
        KeySpec(
            "api_key_env",
            k.VARIABLE,
            "Require this variable's value as bearer token (absent: no key needed).",
            example="DDSUP_API_KEY",
        ),
        KeySpec(
            "min_ready",
            k.MIN_READY,
            "Lanes per model that must be ready before the endpoint starts: a count or a percentage.",
            "100%",
            "50%",
        ),
        KeySpec(
            "open_routes",
            OPEN_ROUTES,
            "Routes answered without the key when api_key_env is set (the built-in readiness "
            "probe needs /health).",
            ["/health", "/metrics"],
            ["/health"],
        ),
        KeySpec(
            "max_body_bytes",
            k.integer(1),
            "Largest request body accepted (413 above).",
            33554432,
            1048576,
        ),
        KeySpec(
            "max_buffered_bytes",
            k.integer(1),
            "Bytes of request bodies one worker holds, counted as they arrive (429 above; at "
            "least max_body_bytes).",
            536870912,
            134217728,
        ),
        KeySpec("max_concurrent", k.integer(1), "Most requests served at once.", 4096, 1024),
        KeySpec(
            "max_connections",
            k.integer(1),
            "Client connections one worker holds open; more wait in the listen queue.",
            8192,
            1024,
        ),
        KeySpec(
            "eject_after",
            k.integer(0),
            "Connect errors or 5xx answers of a lane in a row that take it out of the "
            "rotation (0: never).",
            5,
            3,
        ),
        duration_key(
            "eject_for",
            "How long an ejected lane stays out before it is tried again.",
            "10s",
            "30s",
        ),
        duration_key(
            "upstream_timeout",
            "Longest wait for a lane's answer before trying another.",
            "10m",
            "5m",
            positive=True,
        ),
        KeySpec(
            "routing",
            k.choice(Routing),
            'How a lane of the model is picked: "prefix" sends a prompt to the lane that was '
            'sent its longest prefix (its KV cache holds it), "least-load" to the lane with '
            "the fewest requests in flight.",
            "least-load",
            "prefix",
        ),
        KeySpec(
            "prefix_min_match",
            _number(0, 1),
            "Share of a prompt a lane must have been sent before it for prefix routing to "
            "pick that lane (below it: the least loaded).",
            0.3,
            0.5,
        ),
        KeySpec(
            "prefix_balance_requests",
            k.integer(0),
            "Prefix routing gives way to least-load when the lane it would pick has this "
            "many more requests in flight than the least loaded ...",
            64,
            16,
        ),
        KeySpec(
            "prefix_balance_ratio",
            _number(1),
            "... and this many times as many.",
            1.5,
            2.0,
        ),
        KeySpec(
            "workers",
            k.WORKERS,
            'Processes that serve the endpoint\'s port; "auto": one per CPU it may run on.',
            1,
            "auto",
        ),
    ),
    only=frozenset({UnitType.ENDPOINT}),
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
