"""What one supervisor has seen of its units' processes, as kept in its registry file.

Apart from ``_unit_scope`` (which ends a unit's share with trio) because opening a
containment fills it (``_opening``), and ``ddsup start`` opens its containment before it
imports trio (``controller._head_start``): so this module imports the standard library only.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ddsup.process import _registry

log = logging.getLogger(__name__)


@dataclass
class Records:
    """What one supervisor has seen: PID → entry (the newest process with that PID),
    appended to its registry file as it is seen."""

    file: _registry.RegistryFile | None
    seen: dict[int, _registry.Entry] = field(default_factory=dict)

    def add(self, entries: list[_registry.Entry]) -> None:
        new = [e for e in entries if self.seen.get(e.pid) != e]
        for entry in new:
            self.seen[entry.pid] = entry
        if new and self.file is not None:
            try:
                self.file.add(new)
            except OSError as err:  # a full or vanished disk must not end the run
                log.warning("cannot write the registry %s: %s", self.file.path, err)

    def of(self, unit: str | None) -> list[_registry.Entry]:
        """The entries of ``unit`` (None: every entry)."""
        return [e for e in self.seen.values() if unit is None or e.unit == unit]

    def forget(self, unit: str, *, but: frozenset[_registry.Entry] = frozenset()) -> None:
        """Drop ``unit``'s entries from memory (the file keeps them), except ``but``."""
        self.seen = {p: e for p, e in self.seen.items() if e.unit != unit or e in but}
