"""A directory (or list) of unit files → a validated :class:`UnitSet`.

Each file is checked on its own first (:mod:`ddsup.units._parse`), then the set:
dependencies name existing units, there are no dependency cycles, at most one endpoint,
one worker and one lane unit with ``replicas = "auto"``. Every problem of every file is
raised together in one :class:`~ddsup._errors.UnitFileError`.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddsup._errors import UnitFileError
from ddsup.units._job import JOB_FILE
from ddsup.units._model import UnitSet, UnitType
from ddsup.units._parse import parse_bytes
from ddsup.units._toml import MAX_FILE_BYTES, ParsedFile, new_problem, too_large

StrPath = str | os.PathLike[str]


def load_unit_set(path: StrPath) -> UnitSet:
    """Every ``*.toml`` in directory ``path`` (dot files and ``job.toml``, how the
    directory is submitted, skipped), validated as one set."""
    shown = os.fspath(path)
    directory = Path(path)
    if not directory.is_dir():
        why = "is not a directory" if directory.exists() else "no such directory"
        raise UnitFileError([new_problem(shown, 1, 1, f"{why}: give a directory of unit files")])
    files = sorted(p for p in directory.glob("*.toml") if is_unit_file(p.name))
    if not files:
        raise UnitFileError([new_problem(shown, 1, 1, "no unit files (*.toml) in this directory")])
    contents = [_read_unit_bytes(os.path.join(shown, p.name)) for p in files]
    readable = tuple(c for c in contents if isinstance(c, tuple))
    all_read = len(readable) == len(contents)
    loaded = _LAST_LOADED.get(shown)
    if loaded is not None and all_read and loaded[0] == readable:
        return loaded[1]
    parsed = [c if isinstance(c, ParsedFile) else parse_bytes(*c) for c in contents]
    units = _validate(shown, parsed, siblings=frozenset())
    if all_read:
        _LAST_LOADED.clear()
        _LAST_LOADED[shown] = (readable, units)
    return units


# The last set :func:`load_unit_set` validated, with the bytes it was made of: the same
# directory with the same bytes is the same set, taken without parsing again. The
# agents' forker (``agent._agent_forker``) loads the run's units once before it forks,
# and each of its agents finds them here instead of parsing the same files again. One
# entry: a process loads one run's units.
_LAST_LOADED: dict[str, tuple[tuple[tuple[str, bytes], ...], UnitSet]] = {}


def is_unit_file(name: str) -> bool:
    """Whether a file of a unit directory is a unit: ``*.toml``, not a dot file, not
    ``job.toml`` (``_job``: how the directory is submitted)."""
    return name.endswith(".toml") and not name.startswith(".") and name != JOB_FILE


def parse_unit_set(directory: str, files: Mapping[str, bytes | str]) -> UnitSet:
    """Units from memory: ``{file name: contents}`` checked exactly like a directory.

    For tests and tools that hold unit files as text; names are shown as
    ``directory/name`` in problems. No file system access.
    """
    parsed = [
        parse_bytes(os.path.join(directory, name), data.encode() if isinstance(data, str) else data)
        for name, data in sorted(files.items())
    ]
    if not parsed:
        raise UnitFileError([new_problem(directory, 1, 1, "no unit files given")])
    return _validate(directory, parsed, siblings=frozenset())


def load_unit_files(paths: Sequence[StrPath]) -> UnitSet:
    """The given files validated as one set.

    A dependency may also name a unit that is not among ``paths`` but has a file next to
    one of them (``DIR/NAME.toml`` or ``DIR/NAME@.toml``): verifying one file of a
    directory does not fail for its siblings. Cycles and the one-endpoint, one-worker and
    one-auto-lane rules only see the given files. The set's directory is the first file's.
    """
    if not paths:
        raise UnitFileError([new_problem(".", 1, 1, "no unit files given")])
    shown = [os.fspath(p) for p in paths]
    unique = list(dict.fromkeys(shown))
    parsed = [read_unit_file(p) for p in unique]
    directories = {os.path.dirname(p) or "." for p in unique}
    return _validate(os.path.dirname(unique[0]) or ".", parsed, _sibling_names(directories))


def read_unit_file(path: str) -> ParsedFile:
    """Read and check one file; an unreadable file is a problem, never an exception."""
    contents = _read_unit_bytes(path)
    return contents if isinstance(contents, ParsedFile) else parse_bytes(*contents)


def _read_unit_bytes(path: str) -> tuple[str, bytes] | ParsedFile:
    """(path, the file's bytes), or the problem that kept them from being read."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            return _unreadable(path, "not a regular file")
        if info.st_size > MAX_FILE_BYTES:
            return too_large(path, info.st_size)
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        return _unreadable(path, (err.strerror or str(err)).lower())
    return path, data


def _unreadable(path: str, why: str) -> ParsedFile:
    parsed = ParsedFile(path, os.path.basename(path))
    parsed.problems.append(new_problem(path, 1, 1, f"cannot read unit file: {why}"))
    return parsed


def _sibling_names(directories: Iterable[str]) -> frozenset[str]:
    names: set[str] = set()
    for directory in directories:
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        names.update(e[: -len(".toml")].rstrip("@") for e in entries if is_unit_file(e))
    return frozenset(names)


def _validate(directory: str, parsed: list[ParsedFile], siblings: frozenset[str]) -> UnitSet:
    by_base = _index(parsed)
    for item in parsed:
        _check_dependencies(item, by_base, siblings)
    _check_cycles(by_base)
    for kind in (UnitType.ENDPOINT, UnitType.WORKER):
        _check_single(parsed, kind)
    _check_auto_replicas(parsed)
    problems = [p for item in parsed for p in item.problems]
    if problems:
        raise UnitFileError(problems)
    units = tuple(item.unit for item in parsed if item.unit is not None)
    return UnitSet(directory, tuple(sorted(units, key=lambda u: u.name)))


def _index(parsed: list[ParsedFile]) -> dict[str, ParsedFile]:
    by_base: dict[str, ParsedFile] = {}
    for item in parsed:
        base = item.name.rstrip("@")
        if base in by_base:
            other = by_base[base].path
            item.problem((), f"unit name {base!r} is already used by {other}")
        else:
            by_base[base] = item
    return by_base


def _dependencies(item: ParsedFile) -> list[tuple[str, int, str]]:
    """(key, index, name) of each well-formed entry of ``after`` and ``requires``."""
    unit = item.doc.get("unit")
    out: list[tuple[str, int, str]] = []
    for key in ("after", "requires"):
        names: Any = unit.get(key) if isinstance(unit, dict) else None
        if isinstance(names, list):
            out += [(key, i, n.rstrip("@")) for i, n in enumerate(names) if isinstance(n, str)]
    return out


def _check_dependencies(
    item: ParsedFile, by_base: dict[str, ParsedFile], siblings: frozenset[str]
) -> None:
    own = item.name.rstrip("@")
    for key, index, name in _dependencies(item):
        where = ("unit", key, index)
        if name == own:
            item.problem(
                where, f"[unit] {key}[{index}]: a unit cannot depend on itself", at_value=True
            )
        elif name not in by_base and name not in siblings:
            close = difflib.get_close_matches(name, sorted(by_base), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            message = f"[unit] {key}[{index}]: no unit named '{name}'{hint}"
            item.problem(where, message, at_value=True)


def _check_cycles(by_base: dict[str, ParsedFile]) -> None:
    """Report each dependency cycle once, at the edge that closes it (iterative DFS)."""
    edges = {
        base: [(k, i, n) for k, i, n in _dependencies(item) if n in by_base and n != base]
        for base, item in by_base.items()
    }
    done: set[str] = set()
    seen_cycles: set[frozenset[str]] = set()
    for root in sorted(edges):
        if root in done:
            continue
        path: list[str] = [root]
        stack = [iter(edges[root])]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                done.add(path.pop())
                stack.pop()
                continue
            key, index, target = step
            if target in path:
                cycle = path[path.index(target) :]
                if frozenset(cycle) not in seen_cycles:
                    seen_cycles.add(frozenset(cycle))
                    shown = " → ".join([*cycle, target])
                    by_base[path[-1]].problem(
                        ("unit", key, index), f"dependency cycle: {shown}", at_value=True
                    )
            elif target not in done:
                path.append(target)
                stack.append(iter(edges[target]))


def _check_single(parsed: list[ParsedFile], kind: UnitType) -> None:
    found = [item for item in parsed if item.unit_type is kind]
    names = ", ".join(item.name for item in found)
    for item in found[1:]:
        item.problem(
            ("unit", "type"),
            f"more than one {kind.value} unit ({names}); a run has at most one",
            at_value=True,
        )


def _check_auto_replicas(parsed: list[ParsedFile]) -> None:
    auto = [item for item in parsed if item.unit is not None and _is_auto_lane(item)]
    names = ", ".join(item.name for item in auto)
    for item in auto[1:]:
        lane = item.doc.get("lane", {})
        where = ("lane", "replicas") if "replicas" in lane else ("lane",)
        item.problem(
            where,
            f'more than one lane unit with replicas = "auto" ({names}); '
            "give all but one an integer (the auto one fills what the others leave)",
            at_value=True,
        )


def _is_auto_lane(item: ParsedFile) -> bool:
    unit = item.unit
    return unit is not None and unit.lane is not None and unit.lane.replicas is None
