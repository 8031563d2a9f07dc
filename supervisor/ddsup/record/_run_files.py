"""Everything a run wrote, read back at once, for tools that look at a whole run.

``ddsup report`` and the efficiency summary read the same files: ``run.json``,
``plan.json``, ``events.jsonl``, the endpoint's series and ``result.json``. They may read
a live run, whose files are being written while they read, so reading is tolerant: a
half-written last line is ignored, a malformed line is skipped and named in
``problems``, a missing plan or result is ``None``. Only a directory that is not a state
directory at all (no ``run.json``) is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddsup._errors import RunStateError
from ddsup.record._series import Series, read_jsonl, read_series
from ddsup.record._state_dir import StateDir


@dataclass(frozen=True)
class RunFiles:
    """A run's files as data; ``problems`` lists what could not be read (file:line: why)."""

    path: Path
    run: Mapping[str, Any]
    plan: Mapping[str, Any] | None
    events: tuple[Mapping[str, Any], ...]
    series: Series
    result: Mapping[str, Any] | None
    problems: tuple[str, ...] = ()


def load_run(path: Path) -> RunFiles:
    """Read the state directory ``path``; :class:`RunStateError` when it is not one."""
    state = StateDir(path)
    problems: list[str] = []
    run = _json_file(state.run, path, problems)
    if run is None:
        raise RunStateError(f"{path} is not a ddsup state directory (no readable run.json)")
    events = [record for _where, record in read_jsonl(state.events, path, problems)]
    events = [e for e in events if _is_event(e)]
    series = read_series(path)
    return RunFiles(
        path=path,
        run=run,
        plan=_json_file(state.plan, path, problems),
        events=tuple(events),
        series=series,
        result=_json_file(state.result, path, problems),
        problems=(*problems, *series.problems),
    )


def _is_event(record: Mapping[str, Any]) -> bool:
    return isinstance(record.get("event"), str) and isinstance(record.get("time"), int | float)


def _json_file(path: Path, base: Path, problems: list[str]) -> Mapping[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data = json.loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        problems.append(f"{path.relative_to(base)}: cannot read ({err})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.relative_to(base)}: not a JSON object")
        return None
    return data
