"""Unit directories written by a test, and the little programs their units run.

Units prove *when* they started with ``stamp.py`` (``NAME MONOTONIC_NS`` lines, the clock
every process shares, then exec the rest of the argv), dump their environment, ignore
SIGTERM, or wait for an event of their own run; :class:`UnitDir` writes them beside
the unit files.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from support.runs import PY

# Appends "NAME MONOTONIC_NS" to FILE (one write, O_APPEND), then execs the rest of argv
# (if any): units prove *when* they started with the clock every process shares.
STAMP_PY = """\
import os, sys, time
name, path, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
os.write(fd, f"{name} {time.monotonic_ns()}\\n".encode())
os.close(fd)
if rest:
    os.execvp(rest[0], rest)
"""

# Writes its environment as JSON to FILE atomically (readiness probes test for FILE).
ENV_DUMP_PY = """\
import json, os, sys
path = sys.argv[1]
tmp = path + ".tmp"
with open(tmp, "w") as handle:
    json.dump(dict(os.environ), handle)
os.replace(tmp, path)
if sys.argv[2:]:
    os.execvp(sys.argv[2], sys.argv[2:])
"""

# Ignores SIGTERM, says so in FILE (readiness is "FILE exists"), then sleeps forever.
TERM_IGNORER_PY = """\
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").close()
while True:
    time.sleep(60)
"""

# Waits (bounded) until events.jsonl of its own run holds a matching unit transition,
# then exits 0: a worker that ends the run only after something has happened.
WAIT_EVENT_PY = """\
import json, os, sys, time
instance, to = sys.argv[1], sys.argv[2]
path = os.path.join(os.environ["DDSUP_STATE_DIR"], "events.jsonl")
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    with open(path) as handle:
        for line in handle:
            event = json.loads(line)
            if event.get("instance") == instance and event.get("to") == to:
                sys.exit(0)
    time.sleep(0.02)
sys.exit(99)
"""

HELPERS = {
    "stamp.py": STAMP_PY,
    "env_dump.py": ENV_DUMP_PY,
    "term_ignorer.py": TERM_IGNORER_PY,
    "wait_event.py": WAIT_EVENT_PY,
}


def toml_value(value: Any) -> str:
    """A TOML literal for str/int/list/dict (JSON strings are valid TOML basic strings)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def unit_text(sections: Mapping[str, Mapping[str, Any]]) -> str:
    lines = []
    for section, keys in sections.items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    return "\n".join(lines) + "\n"


class UnitDir:
    """A directory of unit files plus the helper scripts units run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        for name, text in HELPERS.items():
            (path / name).write_text(text)

    def __fspath__(self) -> str:
        return str(self.path)

    def script(self, name: str) -> str:
        return str(self.path / name)

    def stamp(self, name: str, file: Path, *then: str) -> list[str]:
        """argv: append ``name monotonic_ns`` to ``file``, then exec ``then``."""
        return [PY, self.script("stamp.py"), name, str(file), *then]

    def add(self, name: str, type: str, exec: Sequence[str], **sections: Mapping[str, Any]) -> None:
        """Write ``name.toml``; ``unit``/``service`` keys merge with type and exec."""
        unit = {"type": type, **sections.pop("unit", {})}
        service = {"exec": list(exec), **sections.pop("service", {})}
        body = {"unit": unit, "service": service, **sections}
        (self.path / f"{name}.toml").write_text(unit_text(body))


def stamps(path: Path) -> list[tuple[str, int]]:
    """The ``NAME MONOTONIC_NS`` lines units appended to ``path``, in file order."""
    if not path.exists():
        return []
    rows = [line.split() for line in path.read_text().splitlines()]
    return [(name, int(ns)) for name, ns in rows]


def first_stamp(path: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, ns in stamps(path):
        out.setdefault(name, ns)
    return out


def monotonic_ns() -> int:
    return time.monotonic_ns()
