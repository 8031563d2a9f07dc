"""No import circle between the product's modules, type-only imports included.

Two modules that import each other can be read only together, and a circle hidden behind
``if TYPE_CHECKING`` is still one: the types say each needs the other. A name imported
from a package's front door (``from ddsup.decide import RunState``) counts as an import
of the module that holds it (the ``_LAZY`` table of the package's ``__init__``), since
that module is what the importer needs and what Python loads on first use. A package's
``__init__`` re-exports its lazy names under ``if TYPE_CHECKING`` only to tell the type
checker what the table says; those lines are the table, not imports of its own.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _lazy_table(tree: ast.Module) -> dict[str, str]:
    """A package ``__init__``'s ``_LAZY``: name → the module that holds it."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "_LAZY" for target in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, dict)
            return {str(name): str(module) for name, module in value.items()}
    return {}


def import_graph(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module → the modules of ``sources`` it imports, anywhere in its text."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    lazy = {name: _lazy_table(tree) for name, tree in trees.items()}
    graph: dict[str, set[str]] = {name: set() for name in sources}
    for name, tree in trees.items():
        table = set(lazy[name].values())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module in table:  # the front door's table, for the type checker
                    continue
                targets = [_holder(node.module, alias.name, sources, lazy) for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in sources and t != name)
    return graph


def _holder(
    module: str, name: str, sources: Mapping[str, str], lazy: Mapping[str, Mapping[str, str]]
) -> str:
    """The module that ``from module import name`` needs: a lazy name's holder, a
    submodule, or the module itself."""
    if name in lazy.get(module, {}):
        return lazy[module][name]
    return f"{module}.{name}" if f"{module}.{name}" in sources else module


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_between_modules() -> None:
    sources = {
        _module_name(path): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }
    found = circles(import_graph(sources))
    assert not found, "these modules import each other:\n" + "\n".join(
        " ↔ ".join(group) for group in found
    )


def test_the_check_sees_a_type_only_circle_through_a_front_door() -> None:
    sources = {
        "ddsup.a": 'from ddsup._lazy import lazy_names\n_LAZY = {"Shell": "ddsup.a._shell"}\n',
        "ddsup.a._shell": "from ddsup.a._over import TakenOver\n",
        "ddsup.a._over": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ddsup.a import Shell\n"
        ),
        "ddsup.b": "from ddsup.a import Shell\n",
    }
    assert circles(import_graph(sources)) == [["ddsup.a._over", "ddsup.a._shell"]]
