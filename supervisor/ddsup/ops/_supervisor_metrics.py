"""The supervisor's metrics: the run's status rows as Prometheus text.

``ddsup status --metrics`` renders them from the rows ``status`` shows (the live run's
snapshot, or the replay of a finished run's files), so the two cannot drift apart; the
functions here are pure, and tests need no running supervisor.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ddsup.record import InstanceState, InstanceStatus


@dataclass(frozen=True)
class LaneCount:
    """Lane replicas of one model: how many are ready, of how many planned."""

    ready: int
    total: int


def lane_counts(instances: Sequence[InstanceStatus]) -> dict[str, LaneCount]:
    """Per model (sorted by name): ready and planned lane replicas (rows with a model)."""
    ready: dict[str, int] = {}
    total: dict[str, int] = {}
    for item in instances:
        if item.model is None:
            continue
        total[item.model] = total.get(item.model, 0) + 1
        ready[item.model] = ready.get(item.model, 0) + (item.state is InstanceState.READY)
    return {model: LaneCount(ready[model], total[model]) for model in sorted(total)}


def render_supervisor_metrics(instances: Sequence[InstanceStatus], uptime: float | None) -> str:
    """The run's supervisor metrics in the Prometheus text exposition format (0.0.4).

    ``ddsup_unit_state`` has one series per state for every instance, 1 for the state it
    is in and 0 for the others (the systemd exporter's idiom), so that an alert on
    ``ddsup_unit_state{state="failed"} == 1`` never meets a missing series.
    """
    out: list[str] = []
    _family(out, "ddsup_unit_state", "gauge", "1 for the state a unit instance is in, else 0.")
    for item in instances:
        labels = {"instance": item.instance, "node": item.node, "unit": item.unit}
        for state in InstanceState:  # in lifecycle order
            sample = {**labels, "state": state.value}
            out.append(_sample("ddsup_unit_state", sample, item.state is state))
    _family(out, "ddsup_unit_restarts_total", "counter", "Restarts of a unit instance.")
    for item in instances:
        labels = {"instance": item.instance}
        out.append(_sample("ddsup_unit_restarts_total", labels, item.restarts))
    _family(
        out,
        "ddsup_unit_ready_seconds",
        "gauge",
        "Seconds from the latest start of a unit instance to its readiness.",
    )
    for item in instances:
        if item.ready_seconds is not None:
            labels = {"instance": item.instance}
            out.append(_sample("ddsup_unit_ready_seconds", labels, item.ready_seconds))
    counts = lane_counts(instances)
    _family(out, "ddsup_lanes_ready", "gauge", "Lane replicas of a model that are ready.")
    out += [_sample("ddsup_lanes_ready", {"model": m}, c.ready) for m, c in counts.items()]
    _family(out, "ddsup_lanes", "gauge", "Lane replicas of a model in the plan.")
    out += [_sample("ddsup_lanes", {"model": m}, c.total) for m, c in counts.items()]
    if uptime is not None:
        _family(out, "ddsup_run_uptime_seconds", "gauge", "Seconds since ddsup start began.")
        out.append(_sample("ddsup_run_uptime_seconds", {}, round(uptime, 3)))
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
