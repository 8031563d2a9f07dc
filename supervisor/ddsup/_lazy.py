"""Names of a package imported when first used (PEP 562's module ``__getattr__``).

``ddsup.channel`` and ``ddsup.process`` re-export names whose modules import trio and
psutil; a command that only reads a run's files (``ddsup status``) must not pay for
those imports. Each package lists which module holds which name, and gets its
``__getattr__`` from :func:`lazy_names` (as ``concurrent.futures`` does for its pool).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, where: Mapping[str, str], space: dict[str, Any]
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: imports ``where[name]`` on first use and
    keeps the value in the package's namespace ``space`` (so it is looked up once)."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        space[name] = value
        return value

    return __getattr__
