"""The package layout is the architecture: each layer imports only the layers below it.

The order is the one ``ddsup/__init__.py`` documents. A test rather than a convention, so
that an import which would bend the picture (or hide a cycle behind a function-level
import) fails here, with the module that did it, instead of being found by a reader.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent
# Bottom up. A layer may import any layer before it in this list, never one after it.
LAYERS = (
    "_json",
    "_errors",
    "_exit",
    "_lazy",
    "_install",
    "units",
    "plan",
    "process",
    "record",
    "channel",
    "service",
    "decide",
    "agent",
    "controller",
    "endpoint",
    "fake_vllm",
    "jobs",
    "ops",
    "_cli",
    "__main__",
)
# Function-level imports are allowed for third-party modules that only one rarely used
# path needs (start-up time of agents matters), never for ddsup's own modules.
LAZY_THIRD_PARTY = {"httpx", "psutil", "difflib", "ctypes"}  # ctypes: the spawner program only


def _modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        yield parts[0].removesuffix(".py"), path, ast.parse(path.read_text(encoding="utf-8"))


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return []


def test_every_layer_is_listed() -> None:
    found = {layer for layer, _path, _tree in _modules()} - {"__init__"}
    assert found <= set(LAYERS), f"add {sorted(found - set(LAYERS))} to LAYERS"


def test_layers_import_only_layers_below_them() -> None:
    wrong = []
    for layer, path, tree in _modules():
        if layer == "__init__":
            continue
        for node in ast.walk(tree):
            for module in _imported(node):
                if not module.startswith("ddsup."):
                    continue
                target = module.split(".")[1]
                if target != layer and LAYERS.index(target) > LAYERS.index(layer):
                    wrong.append(f"{path.relative_to(PACKAGE)}: {layer} imports {module}")
    assert not wrong, "\n".join(wrong)


def test_no_function_level_imports_of_ddsup() -> None:
    found = []
    for _layer, path, tree in _modules():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                for module in _imported(node):
                    if module.split(".")[0] not in LAZY_THIRD_PARTY:
                        found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {module}")
    assert not found, "\n".join(found)
