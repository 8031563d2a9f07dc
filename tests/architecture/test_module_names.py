"""No two modules of the product share a name.

A module is named for what it holds. Two ``_server.py`` (or ``_commands.py``) in
different packages make a reader, a traceback and a search all ask "which one?"; a name
that says what the module holds answers it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import ddsup

PACKAGE = Path(ddsup.__file__).parent


def repeated_names(paths: Iterable[Path]) -> dict[str, list[str]]:
    """Each module name (package ``__init__`` aside) held by more than one file."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        if path.name != "__init__.py":
            where[path.name].append(str(path))
    return {name: sorted(found) for name, found in where.items() if len(found) > 1}


def test_no_two_modules_share_a_name() -> None:
    paths = [path.relative_to(PACKAGE) for path in PACKAGE.rglob("*.py")]
    repeated = repeated_names(paths)
    assert not repeated, "name each for what it holds:\n" + "\n".join(
        f"{name}: {', '.join(found)}" for name, found in sorted(repeated.items())
    )


def test_the_check_sees_a_repeated_name() -> None:
    paths = [Path("a/_server.py"), Path("b/_server.py"), Path("a/__init__.py")]
    paths += [Path("b/__init__.py"), Path("b/_client.py")]
    assert repeated_names(paths) == {"_server.py": ["a/_server.py", "b/_server.py"]}
