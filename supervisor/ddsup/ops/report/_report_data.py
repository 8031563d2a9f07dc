"""What the report shows, computed once from a run's files: rows by node, lives, totals.

The drawing modules only lay this out; every number they print comes from here or from
:mod:`ddsup.record._efficiency`, so the page and ``efficiency_json`` never disagree.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ddsup.record import (
    FAILED,
    FINISHED,
    Efficiency,
    LaneSamples,
    Life,
    PlanFile,
    PlannedInstance,
    RunFiles,
    RunSpan,
    efficiency_of,
    replay,
    run_span,
)

AGGREGATE_ABOVE = 128  # lane instances; above this, one timeline row per node


class Rows(str, enum.Enum):
    """``--rows``: one timeline row per instance, per node, or chosen by size."""

    AUTO = "auto"
    INSTANCE = "instance"
    NODE = "node"


@dataclass(frozen=True)
class Row:
    """One instance on the timeline; ``samples`` are its replica's series (lanes only)."""

    planned: PlannedInstance
    life: Life
    model: str | None
    samples: LaneSamples | None

    @property
    def instance(self) -> str:
        return self.planned.instance

    @property
    def is_lane(self) -> bool:
        return self.planned.is_lane

    @property
    def gpus(self) -> int:
        return len(self.planned.gpus)


@dataclass(frozen=True)
class NodeGroup:
    """The rows of one node, lanes first in plan order."""

    name: str
    address: str | None
    gpus: tuple[int, ...]
    rows: tuple[Row, ...]

    @property
    def lanes(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.is_lane)

    @property
    def others(self) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if not r.is_lane)


@dataclass(frozen=True)
class Totals:
    """Requests through the endpoint over the whole run, and the prompt tokens the lanes
    looked up in their prefix caches and found there (their own counters)."""

    answered: int
    failed: int  # lane attempts that failed: the lane's doing
    refused_429: int
    refused_other: int
    cut: int = 0  # attempts cut short by their client or the endpoint's stop: nobody's fault
    cache_queries: int = 0
    cache_hits: int = 0


@dataclass(frozen=True)
class Report:
    """Everything ``ddsup report`` renders, read once from the run's files."""

    files: RunFiles
    now: float
    span: RunSpan
    efficiency: Efficiency
    groups: tuple[NodeGroup, ...]
    aggregate: bool
    totals: Totals

    @property
    def lane_count(self) -> int:
        return sum(len(g.lanes) for g in self.groups)


def build_report(files: RunFiles, now: float, rows: Rows = Rows.AUTO) -> Report:
    """Everything the page needs, from the run's files as of ``now``."""
    plan = files.plan or PlanFile()
    planned = plan.instances
    span = run_span(files.events, files.run, now)
    lives = replay(files.events, [i.instance for i in planned], span)
    models = {i.instance: i.model or i.unit.rstrip("@") for i in planned}
    samples = files.series.by_lane
    all_rows = []
    for item in planned:
        replica = item.instance.split(":")[0]
        lane = item.is_lane
        all_rows.append(
            Row(
                item,
                lives[item.instance],
                models.get(replica) if lane else None,
                samples.get(replica) if lane else None,
            )
        )
    groups = _groups(plan, all_rows)
    lanes = sum(1 for r in all_rows if r.is_lane)
    aggregate = rows is Rows.NODE or (rows is Rows.AUTO and lanes > AGGREGATE_ABOVE)
    return Report(files, now, span, efficiency_of(files, now), groups, aggregate, _totals(files))


def _groups(plan: PlanFile, rows: list[Row]) -> tuple[NodeGroup, ...]:
    nodes = {n.name: n for n in plan.nodes}
    order = list(nodes) + sorted({str(r.planned.node) for r in rows} - set(nodes))
    groups = []
    for name in order:
        mine = [r for r in rows if str(r.planned.node) == name]
        mine.sort(key=lambda r: not r.is_lane)  # stable: plan order within each kind
        node = nodes.get(name)
        address, gpus = (node.address, node.gpus) if node else (None, ())
        groups.append(NodeGroup(name, address, gpus, tuple(mine)))
    return tuple(groups)


def _totals(files: RunFiles) -> Totals:
    answered = failed = too_many = other = cut = 0
    for line in files.series.lines:
        answered += int(line.total(FINISHED))
        failed += int(line.total(FAILED))
        cut += sum(line.cut.values())
        for by_status in line.refused.values():
            for status, n in by_status.items():
                if status == "429":
                    too_many += n
                else:
                    other += n
    return Totals(answered, failed, too_many, other, cut, *files.series.prefix_cache())
