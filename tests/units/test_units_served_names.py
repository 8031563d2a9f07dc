"""The model names a lane answers to: ``[lane] served_model_names``, else its vllm argv."""

from __future__ import annotations

import pytest

from ddsup.units import parse_unit_set
from ddsup.units._vllm_argv import lora_name, served_names, vllm_command_span, vllm_option_values

LANE = """
[unit]
type = "lane"
[service]
exec = {exec}
[lane]
model = "llama-8b"
model_path = "/models/llama"
{extra}
"""


def _names(exec: str, extra: str = "") -> tuple[str, ...]:
    units = parse_unit_set("units", {"lane@.toml": LANE.format(exec=exec, extra=extra)})
    return served_names(units.by_name("lane@"))


def test_aliases_and_adapters_are_read_from_the_vllm_argv() -> None:
    exec = (
        '["vllm", "serve", "{model_path}", "--served-model-name", "{model}", "llama",'
        ' "--port", "{port}", "--enable-lora", "--lora-modules", "sql-lora=/a/sql",'
        ' \'{{"name": "chat-lora", "path": "/a/chat"}}\', "--max-model-len", "32k"]'
    )
    assert _names(exec) == ("llama-8b", "llama", "sql-lora", "chat-lora")


@pytest.mark.parametrize(
    ("exec", "names"),
    [
        ('["vllm", "serve", "{model_path}", "--port", "{port}"]', ("llama-8b",)),
        ('["vllm", "serve", "m", "--served_model_name=alias"]', ("llama-8b", "alias")),
        ('["vllm", "serve", "m", "--served-model-name", "r{replica}"]', ("llama-8b",)),
        ('["python3", "serve.py", "--served-model-name", "x"]', ("llama-8b",)),
        (
            '["apptainer", "exec", "--nv", "v.sif", "vllm", "serve", "m", '
            '"--served-model-name", "a", "b"]',
            ("llama-8b", "a", "b"),
        ),
    ],
    ids=["none", "underscores-and-equals", "per-instance-name-left-out", "not-vllm", "wrapped"],
)
def test_names_from_other_argv_shapes(exec: str, names: tuple[str, ...]) -> None:
    assert _names(exec) == names


def test_the_unit_key_wins_over_the_argv() -> None:
    exec = '["vllm", "serve", "m", "--served-model-name", "from-argv"]'
    assert _names(exec, 'served_model_names = ["x", "llama-8b", "y"]') == ("llama-8b", "x", "y")


def test_the_vllm_command_is_found_where_it_starts() -> None:
    assert vllm_command_span(["vllm", "serve", "m"]) == (0, 2)
    assert vllm_command_span(["/opt/v/bin/vllm", "serve"]) == (0, 2)
    assert vllm_command_span(["env", "/opt/v/bin/vllm", "serve", "m"]) == (1, 3)
    legacy = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    assert vllm_command_span(legacy) == (0, 3)
    assert vllm_command_span(["vllm", "bench"]) is None
    assert vllm_option_values(
        ["--x", "--served-model-name", "a", "b", "--y"], "--served-model-name"
    ) == ["a", "b"]
    assert lora_name("{not json") is None and lora_name("path-only") is None
