"""Everything a run wrote, read back at once, for tools that look at a whole run.

``ddsup report`` and the efficiency summary read the same files: ``run.json``,
``plan.json``, ``events.jsonl``, the endpoint's series and ``result.json``. They may read
a live run, whose files are being written while they read, so reading is tolerant: a
half-written last line is ignored, a malformed line is skipped and named in
``problems``, a missing plan or result is ``None``. Only a directory that is not a state
directory at all (no ``run.json``) is an error.

Each file is read into its typed record once, here: ``run.json`` into
:class:`RunInfo`, each ``events.jsonl`` line into its :data:`EventLine` (told apart by
``event``), ``result.json`` into its :class:`OutcomeJson`, ``plan.json`` into
:class:`PlanFile`. A value of the wrong type reads as missing; a line without what its
kind must have (an ``exit`` line without its ``pid``), or of a kind this ddsup does
not know (a newer one wrote it), is skipped as quietly as ``status`` skips it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import RunStateError
from ddsup._exit import ExitJson
from ddsup._json import Json, JsonObject
from ddsup.record._events import EventLine, RunHead, RunLine
from ddsup.record._node_events import ExitLine, NodeKey, UnitLine
from ddsup.record._outcome import CauseJson, OutcomeJson
from ddsup.record._run_info import RunInfo
from ddsup.record._series import Series, read_jsonl, read_series
from ddsup.record._state_dir import StateDir


@dataclass(frozen=True)
class PlannedInstance:
    """One instance of ``plan.json``, as far as a reader of the run needs it."""

    instance: str
    unit: str
    type: str | None
    node: str | None
    gpus: tuple[int, ...] = ()
    model: str | None = None
    port: int | None = None
    replica: int | None = None
    rank: int | None = None

    @property
    def is_lane(self) -> bool:
        return self.type == "lane"


@dataclass(frozen=True)
class PlannedNode:
    """One node of ``plan.json``: its name, address and GPUs."""

    name: str
    address: str | None
    gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlanFile:
    """``plan.json`` read back: its nodes and instances in plan order."""

    nodes: tuple[PlannedNode, ...] = ()
    instances: tuple[PlannedInstance, ...] = ()

    @classmethod
    def from_json(cls, data: JsonObject) -> PlanFile:
        """Tolerantly: an instance without a name is left out, a wrong value is missing."""
        nodes = [_node(n) for n in _objects(data.get("nodes"))]
        instances = [_instance(i) for i in _objects(data.get("instances"))]
        return cls(tuple(nodes), tuple(i for i in instances if i is not None))


@dataclass(frozen=True)
class RunFiles:
    """A run's files as data; ``problems`` lists what could not be read (file:line: why)."""

    path: Path
    run: RunInfo
    plan: PlanFile | None
    events: tuple[EventLine, ...]
    series: Series
    result: OutcomeJson | None
    problems: tuple[str, ...] = ()
    finished: OutcomeJson | None = None  # the last ``finished`` line's: ``result.json``'s too


def load_run(path: Path) -> RunFiles:
    """Read the state directory ``path``; :class:`RunStateError` when it is not one."""
    state = StateDir(path)
    problems: list[str] = []
    run = _json_file(state.run, path, problems)
    if run is None:
        raise RunStateError(f"{path} is not a ddsup state directory (no readable run.json)")
    events, finished = [], None
    for _where, record in read_jsonl(state.events, path, problems):
        line = event_line(record)
        if line is not None:
            events.append(line)
        if line is not None and line["event"] == "run" and line["reason"] == "finished":
            finished = outcome_json(record)
    plan = _json_file(state.plan, path, problems)
    result = _json_file(state.result, path, problems)
    series = read_series(path)
    return RunFiles(
        path=path,
        run=_run_info(run),
        plan=None if plan is None else PlanFile.from_json(plan),
        events=tuple(events),
        series=series,
        result=None if result is None else outcome_json(result),
        problems=(*problems, *series.problems),
        finished=finished,
    )


def event_line(record: JsonObject) -> EventLine | None:
    """One ``events.jsonl`` object as its typed line; None when it is not one a reader uses.

    ``unit``, ``exit`` and ``run`` lines are what the timeline and the report read; a
    ``run`` line whose own fields are missing still tells its ``reason`` (a
    :class:`RunHead`).
    """
    kind, at = record.get("event"), record.get("time")
    if not isinstance(at, int | float):
        return None
    if kind == "unit":
        return _unit_line(record, float(at))
    if kind == "exit":
        return _exit_line(record, float(at))
    if kind == "run":
        return _run_line(record, float(at))
    return None


def outcome_json(data: JsonObject) -> OutcomeJson | None:
    """``result.json`` (or a ``finished`` line) as an outcome; None without its status
    and exit code. The cause's values are shown as text, whatever their type."""
    status, code, cause = data.get("status"), data.get("exit_code"), data.get("cause")
    if not isinstance(status, str) or not isinstance(code, int) or isinstance(code, bool):
        return None
    out: CauseJson = {"reason": ""}
    if isinstance(cause, dict):
        out["reason"] = str(cause.get("reason", ""))
        if cause.get("unit"):
            out["unit"] = str(cause["unit"])
        exit_json = _exit_json(cause.get("exit"))
        if exit_json is not None:
            out["exit"] = exit_json
    return {"status": status, "exit_code": code, "cause": out}


def _unit_line(record: JsonObject, at: float) -> UnitLine | None:
    instance, to = record.get("instance"), record.get("to")
    if not isinstance(instance, str) or not isinstance(to, str):
        return None
    before, restarts = record.get("from"), record.get("restarts")
    line: UnitLine = {
        "time": at,
        "event": "unit",
        "instance": instance,
        "from": before if isinstance(before, str) else "inactive",
        "to": to,
        "reason": str(record.get("reason") or ""),
        "restarts": restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0,
    }
    node, exit_json = record.get("node"), _exit_json(record.get("exit"))
    if isinstance(node, str):
        line["node"] = node
    if exit_json is not None:
        line["exit"] = exit_json
    return line


def _exit_line(record: JsonObject, at: float) -> ExitLine | None:
    instance, pid = record.get("instance"), record.get("pid")
    exit_json = _exit_json(record.get("exit"))
    if not isinstance(instance, str) or not isinstance(pid, int) or exit_json is None:
        return None
    return {
        "time": at,
        "event": "exit",
        "instance": instance,
        **_node_key(record),
        "reason": str(record.get("reason") or "exited"),
        "pid": pid,
        "exit": exit_json,
    }


def _run_line(record: JsonObject, at: float) -> RunLine | None:
    reason = record.get("reason")
    if not isinstance(reason, str):
        return None
    head: RunHead = {"time": at, "event": "run", "reason": reason}
    outcome = outcome_json(record) if reason in ("ending", "finished") else None
    if outcome is None:
        return head
    return {**head, **outcome}


def _exit_json(data: Json) -> ExitJson | None:
    """``{"code": N}`` or ``{"signal": name}``; None for anything else."""
    if not isinstance(data, dict):
        return None
    code = data.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return {"code": code}
    if "signal" in data:
        return {"signal": str(data["signal"])}
    return None


def _node_key(record: JsonObject) -> NodeKey:
    node = record.get("node")
    return {"node": node} if isinstance(node, str) else {}


def _run_info(data: JsonObject) -> RunInfo:
    """``run.json`` as far as it can be read: an id that is not text reads as empty, a
    control address that is not one as none (a report needs neither)."""
    invocation = data.get("invocation_id")
    known = {**data, "invocation_id": invocation if isinstance(invocation, str) else ""}
    try:
        return RunInfo.from_json(known)
    except (KeyError, TypeError, ValueError):
        return RunInfo.from_json({**known, "control": None})


def _objects(value: Json) -> list[JsonObject]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _integers(value: Json) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))


def _text(value: Json) -> str | None:
    return value if isinstance(value, str) else None


def _integer(value: Json) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _node(data: JsonObject) -> PlannedNode:
    return PlannedNode(
        str(data.get("name")), _text(data.get("address")), _integers(data.get("gpus"))
    )


def _instance(data: JsonObject) -> PlannedInstance | None:
    name = data.get("instance")
    if not isinstance(name, str):
        return None
    return PlannedInstance(
        instance=name,
        unit=_text(data.get("unit")) or "",
        type=_text(data.get("type")),
        node=_text(data.get("node")),
        gpus=_integers(data.get("gpus")),
        model=_text(data.get("model")),
        port=_integer(data.get("port")),
        replica=_integer(data.get("replica")),
        rank=_integer(data.get("rank")),
    )


def _json_file(path: Path, base: Path, problems: list[str]) -> JsonObject | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data: Json = json.loads(handle.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        problems.append(f"{path.relative_to(base)}: cannot read ({err})")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path.relative_to(base)}: not a JSON object")
        return None
    return data
