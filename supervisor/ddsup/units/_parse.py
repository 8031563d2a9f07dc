"""One unit file: bytes → TOML (``_toml``) → checked against :data:`SECTIONS` → a frozen
:class:`Unit`.

Every problem of the file is collected (not just the first) as a key path and a message;
positions are looked up afterwards, and only when there is a problem to report, by
:class:`~ddsup.units._locate.Locator`. Nothing a file contains may raise anything but a
problem: undecodable bytes, syntax errors, absurd sizes, deep nesting, wrong types.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

from ddsup.units import _schema as schema
from ddsup.units._builtin import closed_health, endpoint_exec, endpoint_ready
from ddsup.units._kinds import UNIT_NAME, Invalid
from ddsup.units._locate import KeyPath
from ddsup.units._model import (
    EndpointSection,
    LaneSection,
    Placement,
    ProbeKind,
    ReadySection,
    ServiceSection,
    SlurmSection,
    SourceLocation,
    Unit,
    UnitType,
)
from ddsup.units._printable import printable
from ddsup.units._specifiers import specifier_problems
from ddsup.units._toml import ParsedFile, read_toml


def parse_bytes(path: str, data: bytes) -> ParsedFile:
    """Check one unit file whose contents are ``data``; ``path`` names it in problems."""
    parsed = read_toml(path, data)
    if not parsed.problems:
        _check(parsed)
    return parsed


def _check(parsed: ParsedFile) -> None:
    parsed.unit_type = _declared_type(parsed.doc)
    values: dict[str, dict[str, Any]] = {}
    for name, table in parsed.doc.items():
        spec = schema.section(name)
        if spec is None:
            parsed.problem((name,), _unknown_section(name))
        elif not isinstance(table, dict):
            parsed.problem((name,), f"[{name}] must be a table, written as a [{name}] header")
        else:
            _check_placement(parsed, spec)
            values[name] = check_section(parsed, spec, table)
    _check_required(parsed)
    _check_ready(parsed)
    _check_restart_delays(parsed, values.get("service", {}))
    if problem := closed_health(values.get("endpoint"), has_ready="ready" in parsed.doc):
        parsed.problem(("endpoint", "open_routes"), problem, at_value=True)
    _check_name(parsed)
    if not parsed.problems and parsed.unit_type is not None:
        parsed.unit = _build(parsed, parsed.unit_type, values)


def _declared_type(doc: Mapping[str, Any]) -> UnitType | None:
    unit = doc.get("unit")
    raw = unit.get("type") if isinstance(unit, dict) else None
    try:
        return UnitType(raw) if isinstance(raw, str) else None
    except ValueError:
        return None


def _unknown_section(name: str) -> str:
    close = difflib.get_close_matches(name, schema.SECTION_NAMES, n=1)
    if close:
        return f"unknown section [{name}]; did you mean [{close[0]}]?"
    known = ", ".join(f"[{s}]" for s in schema.SECTION_NAMES)
    return f"unknown section [{name}]; sections are {known}"


def _check_placement(parsed: ParsedFile, spec: schema.SectionSpec) -> None:
    kind = parsed.unit_type
    if kind is not None and kind not in spec.only:
        allowed = " and ".join(sorted(t.value for t in spec.only))
        parsed.problem(
            (spec.name,),
            f"[{spec.name}] is only allowed in {allowed} units; this unit is of type '{kind.value}'",
        )


def check_section(
    parsed: ParsedFile, spec: schema.SectionSpec, table: dict[str, Any]
) -> dict[str, Any]:
    converted: dict[str, Any] = {}
    for key, raw in table.items():
        key_spec = spec.key(key)
        if key_spec is None:
            parsed.problem((spec.name, key), _unknown_key(spec, key))
            continue
        if parsed.unit_type is not None and parsed.unit_type not in key_spec.only:
            allowed = " and ".join(sorted(t.value for t in key_spec.only))
            parsed.problem(
                (spec.name, key),
                f"[{spec.name}] {key} is only allowed in {allowed} units; "
                f"this unit is of type '{parsed.unit_type.value}'",
            )
        try:
            converted[key] = key_spec.kind.convert(raw)
        except Invalid as err:
            for each in err.all():
                where = (spec.name, key, *each.at)
                message = f"{_label(where)}: {each.message}"
                parsed.problem(where, message, at_value=not each.on_key)
            continue
        if key_spec.specifiers:
            _check_specifiers(parsed, (spec.name, key), raw)
    return converted


def _unknown_key(spec: schema.SectionSpec, key: str) -> str:
    names = [k.name for k in spec.keys]
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"unknown key '{key}' in [{spec.name}]; did you mean '{close[0]}'?"
    if key in schema.SECTION_NAMES:
        return f"'{key}' is a section, not a key of [{spec.name}]; put it under a [{key}] header"
    home = next((s.name for s in schema.SECTIONS if s.key(key) is not None), None)
    if home is not None:
        return f"unknown key '{key}' in [{spec.name}]; it belongs in [{home}]"
    return f"unknown key '{key}' in [{spec.name}]; keys are {', '.join(names)}"


def _label(path: KeyPath) -> str:
    """``("service", "exec", 2)`` → ``[service] exec[2]``."""
    out = f"[{path[0]}] {path[1]}"
    for part in path[2:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _texts(raw: Any, path: KeyPath) -> Iterator[tuple[KeyPath, str]]:
    if isinstance(raw, str):
        yield path, raw
    elif isinstance(raw, list):
        for index, item in enumerate(raw):
            yield (*path, index), item
    elif isinstance(raw, dict):
        for name, item in raw.items():
            yield (*path, name), item


def _check_specifiers(parsed: ParsedFile, path: KeyPath, raw: Any) -> None:
    for where, text in _texts(raw, path):
        for message in specifier_problems(text, schema.SPECIFIERS):
            parsed.problem(where, f"{_label(where)}: {message}", at_value=True)


def _check_required(parsed: ParsedFile) -> None:
    kind = parsed.unit_type
    for spec in schema.SECTIONS:
        table = parsed.doc.get(spec.name)
        if table is None and _needed(spec.required_for, kind):
            parsed.problem((), _missing_section(spec.name, kind))
        elif isinstance(table, dict):
            for key in spec.keys:
                if _needed(key.required_for, kind) and key.name not in table:
                    parsed.problem((spec.name,), _missing_key(spec, key.name, kind))


def _needed(required_for: frozenset[UnitType], kind: UnitType | None) -> bool:
    """Whether a unit of ``kind`` must have it; of an unknown kind, what every unit must."""
    return kind in required_for if kind is not None else required_for == frozenset(UnitType)


# What to write, per type, when [service] or its exec is missing (the endpoint has both
# built in, see ddsup.units._builtin).
_EXEC_EXAMPLES = {
    UnitType.LANE: '["vllm", "serve", "{model_path}", "--port", "{port}"]',
    UnitType.WORKER: '["python3", "{unit_dir}/client.py"]',
    UnitType.SERVICE: '["my-server", "--port", "9100"]',
    UnitType.ONESHOT: '["python3", "{unit_dir}/prepare.py"]',
}


def _missing_section(name: str, kind: UnitType | None) -> str:
    if name == "unit":
        return f"missing section [unit] with type = one of {_types()}"
    if name == "service" and kind in _EXEC_EXAMPLES:
        return (
            f"missing section [service]: a {kind.value} unit says what to run, "
            f"e.g. [service] exec = {_EXEC_EXAMPLES[kind]}"
        )
    if name == "lane":
        return 'missing section [lane]: a lane unit says what it serves, e.g. [lane] model = "llama-8b"'
    return f"missing section [{name}] (required in {kind.value if kind else 'every'} units)"


def _missing_key(spec: schema.SectionSpec, key: str, kind: UnitType | None) -> str:
    if spec is schema.UNIT:
        return f"[unit] is missing '{key}' = one of {_types()}"
    if key == "exec" and kind in _EXEC_EXAMPLES:
        return (
            f"[service] is missing 'exec', the program to run: e.g. exec = {_EXEC_EXAMPLES[kind]}"
        )
    return f"[{spec.name}] is missing '{key}'"


def _types() -> str:
    return ", ".join(f'"{t.value}"' for t in UnitType)


def _check_ready(parsed: ParsedFile) -> None:
    table = parsed.doc.get("ready")
    if not isinstance(table, dict):
        return
    probes = [key for key in table if key in schema.READY_PROBES]
    if not probes:
        parsed.problem(("ready",), "[ready] needs exactly one of http, tcp, exec")
    for extra in probes[1:]:
        parsed.problem(
            ("ready", extra),
            f"[ready] has both {probes[0]} and {extra}; give exactly one probe",
        )


def _check_restart_delays(parsed: ParsedFile, service: Mapping[str, Any]) -> None:
    low, high = service.get("restart_sec"), service.get("restart_max_sec")
    if low is None or high is None or high >= low:
        return
    parsed.problem(
        ("service", "restart_max_sec"),
        "[service] restart_max_sec must not be shorter than restart_sec",
        at_value=True,
    )


def _check_name(parsed: ParsedFile) -> None:
    name, kind = parsed.name, parsed.unit_type
    if not UNIT_NAME.fullmatch(name):
        parsed.problem(
            (),
            f"invalid unit name '{name}': use letters, digits, '_', '.', '-' "
            "(and a final '@' for a template, as in lane@.toml)",
        )
        return
    template = name.endswith("@")
    on = parsed.doc.get("unit", {}).get("on") if isinstance(parsed.doc.get("unit"), dict) else None
    if kind is UnitType.LANE and not template:
        parsed.problem(
            ("unit", "type"),
            f"a lane unit is a template: rename {name}.toml to {name}@.toml "
            f"(its instances are {name}@0, {name}@1, …)",
        )
    elif template and kind is not None and kind is not UnitType.LANE and on != "each-node":
        parsed.problem(
            ("unit", "type"),
            f'only lanes and on = "each-node" services/oneshots are templates; '
            f"rename {name}.toml to {name[:-1]}.toml",
        )
    elif kind is not UnitType.LANE and on == "each-node" and not template:
        parsed.problem(
            ("unit", "on"),
            f"an each-node unit is a template: rename {name}.toml to {name}@.toml "
            f"(its instances are {name}@<node>)",
        )


def _build(parsed: ParsedFile, kind: UnitType, values: dict[str, dict[str, Any]]) -> Unit:
    unit = values.get("unit", {})
    service = values.get("service", {})
    ready = _build_ready(values.get("ready"))
    endpoint = None
    if kind is UnitType.ENDPOINT:
        endpoint = EndpointSection(**values.get("endpoint", {}))
        service = {"exec": endpoint_exec(), **service}
        ready = ready or endpoint_ready(endpoint)
    return Unit(
        name=parsed.name,
        type=kind,
        service=ServiceSection(**service),
        source=SourceLocation(printable(parsed.path)),
        description=unit.get("description", ""),
        after=unit.get("after", ()),
        requires=unit.get("requires", ()),
        on=unit.get("on", Placement.CLIENT),
        template=parsed.name.endswith("@"),
        ready=ready,
        lane=LaneSection(**values["lane"]) if "lane" in values else None,
        slurm=SlurmSection(**values.get("slurm", {})),
        endpoint=endpoint,
        stop_before_end=unit.get("stop_before_end"),
    )


def _build_ready(values: dict[str, Any] | None) -> ReadySection | None:
    if values is None:
        return None
    probe = next(p for p in schema.READY_PROBES if p in values)
    timing = ("interval", "liveness_interval", "liveness_failures")
    extra = {key: values[key] for key in timing if key in values}
    return ReadySection(kind=ProbeKind(probe), target=values[probe], **extra)
