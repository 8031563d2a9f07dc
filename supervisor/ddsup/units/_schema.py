"""The one table of unit-file sections and keys, and the JSON Schema made from it.

Validation (:mod:`ddsup.units._parse`), ``ddsup schema`` and the tests that keep
``docs/units.md`` honest all read :data:`SECTIONS`; a key exists in exactly one place.
Defaults are written as a user would write them; a test checks that each one converts to
the default of the matching field in :mod:`ddsup.units._model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddsup.units import _kinds as k
from ddsup.units._model import OnFailure, Placement, Restart, UnitType
from ddsup.units._specifiers import BASE_SPECIFIERS

_ALL_TYPES = frozenset(UnitType)
_LANE = frozenset({UnitType.LANE})


@dataclass(frozen=True)
class KeySpec:
    """One key: its kind, documentation, default (as written in TOML) and restrictions."""

    name: str
    kind: k.Kind
    doc: str
    default: object = None
    example: object = None
    required: bool = False
    specifiers: bool = False
    only: frozenset[UnitType] = _ALL_TYPES


@dataclass(frozen=True)
class SectionSpec:
    """One ``[section]``: its keys and which unit types may (or must) have it."""

    name: str
    doc: str
    keys: tuple[KeySpec, ...]
    only: frozenset[UnitType] = _ALL_TYPES
    required_for: frozenset[UnitType] = frozenset()

    def key(self, name: str) -> KeySpec | None:
        return next((key for key in self.keys if key.name == name), None)


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
            required=True,
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
            "The argument vector to run; never a shell string.",
            example=["vllm", "serve", "{model_path}", "--port", "{port}"],
            required=True,
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
        KeySpec(
            "restart_sec",
            k.DURATION,
            "First restart delay; doubles per consecutive failure up to restart_max_sec.",
            "100ms",
            "2s",
        ),
        KeySpec("restart_max_sec", k.DURATION, "Upper bound of the restart delay.", "2m", "5m"),
        KeySpec(
            "start_limit_burst",
            k.integer(1),
            "More than this many starts inside start_limit_interval: the unit has failed.",
            5,
            3,
        ),
        KeySpec(
            "start_limit_interval",
            k.POSITIVE_DURATION,
            "The window of start_limit_burst.",
            "10s",
            "10m",
        ),
        KeySpec(
            "success_exit_status",
            k.EXIT_STATUSES,
            "Exit statuses that count as success (replaces the default).",
            [0],
            [0, 143],
        ),
        KeySpec(
            "timeout_start",
            k.POSITIVE_DURATION,
            "Ready within this after starting, or the unit has failed.",
            "90s",
            "20m",
        ),
        KeySpec(
            "timeout_stop",
            k.POSITIVE_DURATION,
            "After kill_signal, wait this long, then SIGKILL the process group.",
            "30s",
            "10s",
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
    ),
    required_for=_ALL_TYPES,
)

READY = SectionSpec(
    "ready",
    "How to tell that the unit is ready: exactly one of http, tcp, exec. Without this "
    "section a unit is ready once started (a oneshot: once it exited successfully).",
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
        KeySpec("interval", k.POSITIVE_DURATION, "Time between probes.", "500ms", "1s"),
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
            required=True,
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
            'Base port of lanes on a node; "auto": free ports picked at preflight.',
            8000,
            "auto",
        ),
        KeySpec(
            "stagger", k.DURATION, "Wait between successive lane starts on a node.", "5s", "200ms"
        ),
        KeySpec(
            "lead_standoff",
            k.DURATION,
            "Extra wait before any lane but the first starts.",
            "0s",
            "30s",
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
        KeySpec("retry_after", k.DURATION, "Retry-After sent with 429 answers.", "1s", "2s"),
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
            "max_body_bytes",
            k.integer(1),
            "Largest request body accepted (413 above).",
            104857600,
            1048576,
        ),
        KeySpec("max_concurrent", k.integer(1), "Most requests served at once.", 4096, 1024),
        KeySpec(
            "upstream_timeout",
            k.POSITIVE_DURATION,
            "Longest wait for a lane's answer before trying another.",
            "10m",
            "5m",
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

# Every specifier a unit file may use: the runtime ones plus each key of [lane].
SPECIFIERS: frozenset[str] = BASE_SPECIFIERS | {key.name for key in LANE.keys}


def section(name: str) -> SectionSpec | None:
    """The section called ``name``, or None."""
    return next((spec for spec in SECTIONS if spec.name == name), None)


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of one unit file, for editors."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ddsup.invalid/schema/unit.json",
        "title": "ddsup unit file",
        "type": "object",
        "additionalProperties": False,
        "required": ["unit", "service"],
        "properties": {spec.name: _section_schema(spec) for spec in SECTIONS},
        "allOf": _type_rules(),
    }


def _section_schema(spec: SectionSpec) -> dict[str, Any]:
    properties = {key.name: _key_schema(key) for key in spec.keys}
    schema: dict[str, Any] = {
        "type": "object",
        "description": spec.doc,
        "additionalProperties": False,
        "properties": properties,
    }
    required = [key.name for key in spec.keys if key.required]
    if required:
        schema["required"] = required
    if spec is READY:
        schema["oneOf"] = [{"required": [probe]} for probe in READY_PROBES]
    return schema


def _key_schema(key: KeySpec) -> dict[str, Any]:
    schema = key.kind.json()
    schema["description"] = key.doc
    if key.default is not None:
        schema["default"] = key.default
    if key.example is not None:
        schema["examples"] = [key.example]
    return schema


def _type_is(types: frozenset[UnitType]) -> dict[str, Any]:
    values = sorted(t.value for t in types)
    unit_type = {"required": ["type"], "properties": {"type": {"enum": values}}}
    return {"required": ["unit"], "properties": {"unit": unit_type}}


def _type_rules() -> list[dict[str, Any]]:
    """``[lane]`` only (and always) on lanes, ``[endpoint]`` only on endpoints, and so on."""
    rules: list[dict[str, Any]] = []
    for spec in SECTIONS:
        if spec.required_for and spec.required_for != _ALL_TYPES:
            rules.append({"if": _type_is(spec.required_for), "then": {"required": [spec.name]}})
        if spec.only != _ALL_TYPES:
            rules.append({"if": {"required": [spec.name]}, "then": _type_is(spec.only)})
        for key in spec.keys:
            if key.only != _ALL_TYPES:
                has_key = {
                    "properties": {spec.name: {"required": [key.name]}},
                    "required": [spec.name],
                }
                rules.append({"if": has_key, "then": _type_is(key.only)})
    return rules
