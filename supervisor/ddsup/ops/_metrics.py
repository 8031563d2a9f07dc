"""What the supervisor knows about its units, as facts and as Prometheus text.

Both ``ddsup status`` and the control channel's ``metrics`` op describe a run from the
same two sources: the controller's status snapshot (or its reconstruction from the state
directory of a finished run) and ``events.jsonl``. The snapshot says where each instance
is now; the events say how it got there (how long it took to become ready, which PID it
has while its probe is still failing). The functions here are pure, so the two callers
cannot drift apart and tests need no running supervisor.

Lane models: an instance of the snapshot may carry ``model``; when it does not, the model
is read from the run's unit files (``run.json`` names their directory), and when those are
gone, the unit's base name stands in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ddsup._errors import DdsupError
from ddsup.record._states import InstanceState
from ddsup.units import load_unit_set

UNIT_STATES = tuple(state.value for state in InstanceState)  # in lifecycle order
_GONE = {"restarting", "exited", "failed", "waiting", "inactive"}


def is_lane_replica(instance: Mapping[str, Any]) -> bool:
    """A lane replica's rank 0 (``llama@3``); ranks > 0 (``llama@3:1``) serve no HTTP."""
    return instance.get("type") == "lane" and ":" not in str(instance.get("instance", ""))


def ready_seconds(events: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per instance: seconds from its latest ``starting`` to the ``ready`` that followed."""
    started: dict[str, float] = {}
    durations: dict[str, float] = {}
    for event in events:
        instance = event.get("instance")
        if event.get("event") != "unit" or not isinstance(instance, str):
            continue
        if event.get("to") == "starting":
            started[instance] = float(event["time"])
        elif event.get("to") == "ready" and instance in started:
            durations[instance] = round(float(event["time"]) - started[instance], 3)
    return durations


def current_pids(events: Iterable[Mapping[str, Any]]) -> dict[str, int | None]:
    """Per instance: the PID of its live process, None once it has gone.

    The ``starting`` transition comes before the process exists, so the PID of a unit
    whose probe has not passed yet is only in the ``process`` event that follows it.
    """
    pids: dict[str, int | None] = {}
    for event in events:
        instance = event.get("instance")
        if not isinstance(instance, str):
            continue
        if event.get("event") == "process" and isinstance(event.get("pid"), int):
            pids[instance] = int(event["pid"])
        elif event.get("event") == "unit":
            if isinstance(event.get("pid"), int):
                pids[instance] = int(event["pid"])
            elif event.get("to") in _GONE or event.get("to") == "starting":
                pids[instance] = None
    return pids


def probe_result(instance: Mapping[str, Any]) -> str | None:
    """The readiness probe's verdict as far as the state and its reason tell it."""
    if instance.get("probe") is not None:
        return str(instance["probe"])
    state, reason = instance.get("state"), str(instance.get("reason") or "")
    if state == "ready":
        return "ok" if reason == "probe passed" else "none"
    if state == "starting":
        return "pending"
    if "not ready within" in reason:
        last = reason.partition("(last probe: ")[2].rstrip(")")
        return f"timed out ({last})" if last else "timed out"
    return None


def lane_models(snapshot: Mapping[str, Any]) -> dict[str, str]:
    """Instance → model of every lane replica in the snapshot."""
    lanes = [i for i in snapshot.get("instances", []) if is_lane_replica(i)]
    if all(i.get("model") for i in lanes):
        return {i["instance"]: str(i["model"]) for i in lanes}
    by_unit = _models_from_unit_files(snapshot)
    return {
        i["instance"]: str(i.get("model") or by_unit.get(i["unit"]) or str(i["unit"]).rstrip("@"))
        for i in lanes
    }


def _models_from_unit_files(snapshot: Mapping[str, Any]) -> dict[str, str]:
    """Unit name → model, from the unit files the run was started with (if still there)."""
    try:
        run = json.loads((Path(str(snapshot.get("state_dir"))) / "run.json").read_text())
        units = load_unit_set(run["unit_dir"])
    except (OSError, ValueError, KeyError, TypeError, DdsupError):
        return {}
    return {u.name: u.lane.model for u in units.lanes if u.lane is not None}


def lane_counts(
    instances: Sequence[Mapping[str, Any]], models: Mapping[str, str]
) -> dict[str, dict[str, int]]:
    """Per model: ``{"ready": n, "total": m}`` over lane replicas, models sorted by name."""
    counts: dict[str, dict[str, int]] = {}
    for instance in instances:
        model = models.get(str(instance.get("instance")))
        if model is None:
            continue
        entry = counts.setdefault(model, {"ready": 0, "total": 0})
        entry["total"] += 1
        entry["ready"] += instance.get("state") == "ready"
    return dict(sorted(counts.items()))


# --- Prometheus text ---------------------------------------------------------------------
def render_supervisor_metrics(snapshot: dict[str, Any], events: list[dict[str, Any]]) -> str:
    """The run's supervisor metrics in the Prometheus text exposition format (0.0.4).

    ``ddsup_unit_state`` has one series per state for every instance, 1 for the state it
    is in and 0 for the others (the systemd exporter's idiom), so that an alert on
    ``ddsup_unit_state{state="failed"} == 1`` never meets a missing series.
    """
    instances = list(snapshot.get("instances", []))
    out: list[str] = []
    _family(out, "ddsup_unit_state", "gauge", "1 for the state a unit instance is in, else 0.")
    for item in instances:
        labels = {
            "instance": item["instance"],
            "node": item.get("node") or "",
            "unit": item.get("unit") or "",
        }
        for state in UNIT_STATES:
            out.append(
                _sample("ddsup_unit_state", {**labels, "state": state}, item["state"] == state)
            )
    _family(out, "ddsup_unit_restarts_total", "counter", "Restarts of a unit instance.")
    for item in instances:
        out.append(
            _sample(
                "ddsup_unit_restarts_total",
                {"instance": item["instance"]},
                item.get("restarts") or 0,
            )
        )
    _family(
        out,
        "ddsup_unit_ready_seconds",
        "gauge",
        "Seconds from the latest start of a unit instance to its readiness.",
    )
    for instance, seconds in ready_seconds(events).items():
        out.append(_sample("ddsup_unit_ready_seconds", {"instance": instance}, seconds))
    counts = lane_counts(instances, lane_models(snapshot))
    _family(out, "ddsup_lanes_ready", "gauge", "Lane replicas of a model that are ready.")
    out += [_sample("ddsup_lanes_ready", {"model": m}, c["ready"]) for m, c in counts.items()]
    _family(out, "ddsup_lanes", "gauge", "Lane replicas of a model in the plan.")
    out += [_sample("ddsup_lanes", {"model": m}, c["total"]) for m, c in counts.items()]
    if snapshot.get("uptime") is not None:
        _family(out, "ddsup_run_uptime_seconds", "gauge", "Seconds since ddsup start began.")
        out.append(_sample("ddsup_run_uptime_seconds", {}, round(float(snapshot["uptime"]), 3)))
    return "\n".join(out) + "\n"


def _family(out: list[str], name: str, kind: str, help_text: str) -> None:
    out.append(f"# HELP {name} {help_text}")
    out.append(f"# TYPE {name} {kind}")


def _sample(name: str, labels: Mapping[str, str], value: float | bool) -> str:
    number = int(value) if isinstance(value, bool) else value
    if not labels:
        return f"{name} {number}"
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    return f"{name}{{{body}}} {number}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
