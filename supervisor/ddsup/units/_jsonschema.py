"""The JSON Schema (draft 2020-12) of a unit file, made from the one table of keys.

Everything comes from :data:`ddsup.units._schema.SECTIONS`: each key's type (from its
:class:`~ddsup.units._kinds.Kind`), default, example and description, which sections
and keys each unit type may or must have. What a schema cannot say (specifier names,
dependencies, durations' sums beyond the pattern) is left to ``ddsup verify``.
"""

from __future__ import annotations

from ddsup._json import Json, JsonObject
from ddsup.units._model import UnitType
from ddsup.units._schema import READY, READY_PROBES, SECTIONS, KeySpec, SectionSpec

_ALL_TYPES = frozenset(UnitType)


def json_schema() -> JsonObject:
    """A JSON Schema (draft 2020-12) of one unit file, for editors."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://ddsup.invalid/schema/unit.json",
        "title": "ddsup unit file",
        "type": "object",
        "additionalProperties": False,
        "required": [spec.name for spec in SECTIONS if spec.required_for == _ALL_TYPES],
        "properties": {spec.name: _section_schema(spec) for spec in SECTIONS},
        "allOf": list[Json](_type_rules()),
    }


def _section_schema(spec: SectionSpec) -> JsonObject:
    properties: JsonObject = {key.name: _key_schema(key) for key in spec.keys}
    schema: JsonObject = {
        "type": "object",
        "description": spec.doc,
        "additionalProperties": False,
        "properties": properties,
    }
    required: list[Json] = [key.name for key in spec.keys if key.required_for >= spec.only]
    if required:
        schema["required"] = required
    if spec is READY:
        schema["oneOf"] = [{"required": [probe]} for probe in READY_PROBES]
    return schema


def _key_schema(key: KeySpec) -> JsonObject:
    schema = key.kind.json()
    schema["description"] = key.doc
    if key.default is not None:
        schema["default"] = key.default
    if key.example is not None:
        schema["examples"] = [key.example]
    return schema


def _type_is(types: frozenset[UnitType]) -> JsonObject:
    values: list[Json] = [*sorted(t.value for t in types)]
    unit_type: JsonObject = {"required": ["type"], "properties": {"type": {"enum": values}}}
    return {"required": ["unit"], "properties": {"unit": unit_type}}


def _type_rules() -> list[JsonObject]:
    """``[lane]`` only (and always) on lanes, ``[endpoint]`` only on endpoints, and so on."""
    rules: list[JsonObject] = []
    for spec in SECTIONS:
        if spec.required_for and spec.required_for != _ALL_TYPES:
            rules.append({"if": _type_is(spec.required_for), "then": {"required": [spec.name]}})
        if spec.only != _ALL_TYPES:
            rules.append({"if": {"required": [spec.name]}, "then": _type_is(spec.only)})
        for key in spec.keys:
            if key.required_for and not key.required_for >= spec.only:
                needs_key: JsonObject = {"properties": {spec.name: {"required": [key.name]}}}
                rules.append({"if": _type_is(key.required_for), "then": needs_key})
            if key.only != _ALL_TYPES:
                has_key: JsonObject = {
                    "properties": {spec.name: {"required": [key.name]}},
                    "required": [spec.name],
                }
                rules.append({"if": has_key, "then": _type_is(key.only)})
    return rules
