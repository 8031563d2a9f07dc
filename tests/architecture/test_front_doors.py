"""Each package has a front door: other packages use only the names its ``__init__`` exports.

A module whose name starts with an underscore is a package's inside. Code in another
package that imports it directly bypasses the API the package chose and ties itself to a
file layout the package is free to change; this test names each such import. Tests and
benches may reach inside (they test the insides); the product may not.
"""

from __future__ import annotations

import ast
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent


def _package_of(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else None


def _private_imports(source: str, home: str | None) -> list[str]:
    """The ``ddsup.X._y`` modules (or ``_y`` names of ``ddsup.X``) that a module of
    package ``home`` imports from another package X."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
            modules += [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            inside = any(part.startswith("_") for part in parts[2:])
            if parts[0] == "ddsup" and len(parts) >= 3 and parts[1] != home and inside:
                found.append(f"line {node.lineno}: {module}")
                break
    return found


def test_no_package_imports_another_packages_insides() -> None:
    wrong = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if (found := _private_imports(path.read_text(encoding="utf-8"), _package_of(path)))
    }
    assert not wrong, "import these from the package's front door instead:\n" + "\n".join(
        f"{name} {line}" for name, lines in wrong.items() for line in lines
    )


def test_the_check_sees_a_private_import() -> None:
    # the rule must be able to fail: a module of ``agent`` that reaches into ``units``
    source = (
        "from ddsup.units._model import Unit\n"
        "from ddsup.units import Unit, _private_name\n"
        "import ddsup.units._parse\n"
        "from ddsup.units import Unit\n"
        "from ddsup.agent._agent import run_agent\n"
    )
    assert _private_imports(source, "agent") == [
        "line 1: ddsup.units._model",
        "line 2: ddsup.units._private_name",
        "line 3: ddsup.units._parse",
    ]
