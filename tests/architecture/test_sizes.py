"""Whole concepts: no module over 800 lines, no function over 60, in the whole package.

A module holds one concept, all of it, so that a reader opens one file for it; past 800
lines it is two. A function that size fits on a screen. The flag table of vLLM
(``fake_vllm/_vllm_flags.py``) is data, not logic, and fits too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 60


def _modules() -> list[tuple[str, str]]:
    return [
        (str(path.relative_to(PACKAGE)), path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def test_no_module_over_the_limit() -> None:
    over = {
        name: len(text.splitlines())
        for name, text in _modules()
        if len(text.splitlines()) > MAX_MODULE_LINES
    }
    assert not over, f"two concepts in one module? {over}"


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
