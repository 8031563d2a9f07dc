"""Specifiers: load-time checks and run-time resolution, with ``{{``/``}}`` escapes."""

from __future__ import annotations

import pytest

from ddsup._errors import DdsupError
from ddsup.units import SPECIFIERS, SpecifierError, resolve_argv, resolve_specifiers
from ddsup.units._specifiers import specifier_problems

CONTEXT = {"host": "gpu01", "port": "8001", "model": "llama", "unit_dir": "/u"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://{host}:{port}/health", "http://gpu01:8001/health"),
        ("{{port}}", "{port}"),
        ("{{{port}}}", "{8001}"),
        ('{{"a": "{model}"}}', '{"a": "llama"}'),
        ("no braces", "no braces"),
        ("", ""),
        ("{unit_dir}/generate.py", "/u/generate.py"),
    ],
)
def test_resolve(text: str, expected: str) -> None:
    assert resolve_specifiers(text, CONTEXT) == expected


def test_a_value_is_never_reparsed() -> None:
    assert resolve_specifiers("{model}", {"model": "{port}"}) == "{port}"


def test_missing_value_names_the_specifier() -> None:
    with pytest.raises(SpecifierError) as info:
        resolve_specifiers("--rank={rank}", CONTEXT)
    assert info.value.name == "rank"
    assert "{rank}" in str(info.value)
    assert isinstance(info.value, DdsupError)


@pytest.mark.parametrize("text", ["{port", "port}", "{port.real}", "{0}", "{}", "{a b}", "{po{rt}"])
def test_malformed_text_is_a_typed_error(text: str) -> None:
    with pytest.raises(DdsupError):
        resolve_specifiers(text, {"port": "1", "a b": "x", "0": "y", "": "z"})


def test_resolve_argv_keeps_argument_boundaries() -> None:
    argv = resolve_argv(
        ["vllm", "--port", "{port}", "--name", "{model}"], {**CONTEXT, "model": "a b"}
    )
    assert argv == ("vllm", "--port", "8001", "--name", "a b")


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        ("{port}{{literal}}", []),
        ("{model_path} {stagger} {gpus} {unit_dir}", []),
        ("{prot}", ["unknown specifier {prot}; did you mean {port}?"]),
        ("{zzzzzz}", ["unknown specifier {zzzzzz}"]),
        ("{a}{b}", ["unknown specifier {a}", "unknown specifier {b}"]),
        ("}", ["unbalanced '}'; write '}}' for a literal brace"]),
        ("{", ["unclosed '{'; write '{{' for a literal brace"]),
        ("{port:>5}", ["invalid specifier {port:>5}: a specifier is a plain name like {port}"]),
    ],
)
def test_load_time_problems(text: str, problems: list[str]) -> None:
    assert specifier_problems(text, SPECIFIERS) == problems


def test_every_scalar_lane_key_is_a_specifier() -> None:
    from ddsup.units._kinds import STRINGS
    from ddsup.units._schema import LANE

    scalars = {key.name for key in LANE.keys if key.kind is not STRINGS}
    assert scalars <= SPECIFIERS
    assert "served_model_names" in {key.name for key in LANE.keys} - SPECIFIERS  # an array
    assert {"unit", "instance", "endpoint_url", "job_id", "master_addr", "unit_dir"} <= SPECIFIERS
