"""Small pieces: no module over 400 lines, no function over 60, in the whole package.

A module that size holds one concept a reader can keep in mind; a function that size
fits on a screen. The few exceptions are listed with the reason they are whole, and an
exception that is no longer needed fails too, so the list never hides a new one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# Modules allowed over the limit, each with its reason.
LONG_MODULES: dict[str, str] = {
    # Data, not logic: every `vllm serve` flag and its arity, as vLLM's own parser lists
    # them, kept in one table so that a new vLLM release is one diff.
    "fake_vllm/_vllm_flags.py": "the table of vLLM's command-line flags",
}
# A listed module may not grow unnoticed: each stays at or under its size today (the
# flag table grows by what a new vLLM release adds: scripts/gen-vllm-flags, then here).
LONG_MODULE_CAPS: dict[str, int] = {
    "fake_vllm/_vllm_flags.py": 411,
}


def _modules() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(PACKAGE)), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_module_over_the_limit() -> None:
    long = {name: len(text.splitlines()) for name, text in _modules()}
    over = {name: lines for name, lines in long.items() if lines > MAX_MODULE_LINES}
    assert set(over) - set(LONG_MODULES) == set(), f"split these: {over}"
    assert set(LONG_MODULES) <= set(over), "an exception no longer needed: drop it"
    grown = {name: long[name] for name, cap in LONG_MODULE_CAPS.items() if long[name] > cap}
    assert not grown, f"a listed module grew past its cap: {grown}"


def test_no_function_over_the_limit() -> None:
    over = []
    for name, text in _modules():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    over.append(f"{name}:{node.lineno} {node.name}() has {lines} lines")
    assert not over, "\n".join(over)
