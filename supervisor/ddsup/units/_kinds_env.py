"""Kinds of the keys that shape a unit's process and its probe: variables, probe targets.

Split from ``_kinds`` (the general kinds and the ``Kind`` type) to keep each module small;
``_schema`` refers to both through ``_kinds``' names.
"""

from __future__ import annotations

from types import MappingProxyType

from ddsup.units._kinds import (
    TEXT,
    VAR_NAME,
    Invalid,
    Kind,
    each,
    expect,
    matching,
    no_nul,
    nonempty_string,
    string,
    type_name,
)


def _environment(value: object) -> MappingProxyType[str, str]:
    expect(value, dict, 'a table of strings, e.g. { NAME = "value" }')
    assert isinstance(value, dict)
    each({name: (name, item) for name, item in value.items()}, _variable)
    return MappingProxyType(dict(value))


def _variable_name(value: object) -> str:
    name = string(value)
    if not VAR_NAME.fullmatch(name):
        raise Invalid(f"{name!r} is not a valid environment variable name")
    return name


def _variable(pair: object) -> None:
    assert isinstance(pair, tuple)
    name: str = pair[0]
    item: object = pair[1]
    if not VAR_NAME.fullmatch(name):
        raise Invalid(f"{name!r} is not a valid environment variable name", on_key=True)
    if not isinstance(item, str):
        hint = f'; quote it: {name} = "{item}"' if isinstance(item, (int, float)) else ""
        raise Invalid(f"value of {name} must be a string, got {type_name(item)}{hint}")
    try:
        no_nul(item)
    except Invalid as err:
        raise Invalid(f"value of {name} {err.message}") from None


def _http_url(value: object) -> str:
    text = nonempty_string(value)
    if not text.startswith(("http://", "https://", "{")):
        raise Invalid(
            f'expected an http:// or https:// URL, got {text!r}; e.g. "http://{{host}}:{{port}}/health"'
        )
    return text


def _tcp_target(value: object) -> str:
    text = nonempty_string(value)
    host, colon, port = text.rpartition(":")
    if not (host and colon and port):
        raise Invalid(f'expected "host:port", got {text!r}; e.g. "{{host}}:{{port}}"')
    return text


VAR_NAMES = Kind(
    "array of variable names",
    matching(VAR_NAME, "environment variable name"),
    lambda: {"type": "array", "items": {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"}},
)
VARIABLE = Kind(
    "variable name",
    lambda value: _variable_name(value),
    lambda: {"type": "string", "pattern": f"^{VAR_NAME.pattern}$"},
)
ENVIRONMENT = Kind(
    "table of strings",
    _environment,
    lambda: {
        "type": "object",
        "propertyNames": {"pattern": f"^{VAR_NAME.pattern}$"},
        "additionalProperties": dict(TEXT),
    },
)
HTTP_URL = Kind("URL", _http_url, lambda: {"type": "string", "minLength": 1})
TCP_TARGET = Kind('"host:port"', _tcp_target, lambda: {"type": "string", "pattern": ".:."})
