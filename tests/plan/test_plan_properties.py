"""Properties of any placement: random allocations and random lane sets."""

from __future__ import annotations

import json
import time
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from plan_units import endpoint, lane, nodes, unit_set

from ddsup._errors import PlacementError
from ddsup.plan import Node, Plan, make_plan
from ddsup.units._model import Unit, UnitSet, UnitType


@st.composite
def lane_sets(draw: st.DrawFn) -> UnitSet:
    count = draw(st.integers(1, 4))
    auto_at = draw(st.one_of(st.none(), st.integers(0, count - 1)))
    units: list[Unit] = []
    for i in range(count):
        units.append(
            lane(
                f"m{draw(st.integers(0, 99)):02d}x{i}@",
                gpus=draw(st.sampled_from([1, 1, 2, 3, 4, 8])),
                nodes=draw(st.sampled_from([1, 1, 1, 2, 3])),
                replicas=None if i == auto_at else draw(st.integers(0, 6)),
                port=draw(st.sampled_from([None, 8000, 8000, 8500, 65530])),
                stagger=draw(st.sampled_from([0.0, 1.5, 5.0])),
                lead_standoff=draw(st.sampled_from([0.0, 10.0])),
            )
        )
    if draw(st.booleans()):
        units.append(endpoint(port=draw(st.sampled_from([8001, 9000]))))
    return unit_set(*units)


@st.composite
def allocations(draw: st.DrawFn) -> list[Node]:
    count = draw(st.integers(1, 6))
    gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
    return nodes(count, gpus)


def _check(plan: Plan, units: UnitSet) -> None:
    lanes = [i for i in plan.instances if i.type is UnitType.LANE]
    gpu_owners = Counter((i.node, g) for i in lanes for g in i.gpus)
    assert all(n == 1 for n in gpu_owners.values()), "a GPU is shared on a node"
    for inst in lanes:
        node = plan.node(inst.node)
        assert set(inst.gpus) <= set(node.gpus)
        start = node.gpus.index(inst.gpus[0])
        assert node.gpus[start : start + len(inst.gpus)] == inst.gpus, "GPUs not contiguous"
    domain = (lambda node: "") if plan.shared_address else (lambda node: node)
    ports = Counter((domain(i.node), i.port) for i in plan.instances if i.port is not None)
    masters = {(domain(i.node), i.master_port) for i in lanes if i.master_port is not None}
    assert all(n == 1 for n in ports.values()), "a port is shared"
    assert not masters & set(ports), "a master port clashes with a planned port"
    for unit in units.lanes:
        assert unit.lane is not None
        replicas = {i.replica for i in lanes if i.unit == unit.name and i.rank == 0}
        ranks = [i for i in lanes if i.unit == unit.name]
        if unit.lane.replicas is not None:
            assert replicas == set(range(unit.lane.replicas)), "not every replica placed"
        else:
            assert replicas, "auto placed nothing"
        assert len(ranks) == len(replicas) * unit.lane.nodes
        assert all(len(i.gpus) == unit.lane.gpus for i in ranks)


@settings(max_examples=150, deadline=None)
@given(units=lane_sets(), alloc=allocations(), shared=st.booleans())
def test_any_placement_is_valid_or_refused(units: UnitSet, alloc: list[Node], shared: bool) -> None:
    try:
        plan = make_plan(units, alloc, client=alloc[0].name, shared_address=shared)
    except PlacementError as err:
        message = str(err)
    else:
        message = ""
    if message:
        assert "lane unit" in message or "port" in message
        return
    _check(plan, units)
    again = make_plan(units, list(alloc), client=alloc[0].name, shared_address=shared)
    assert again.to_json() == plan.to_json()
    assert Plan.from_dict(plan.to_dict()) == plan
    assert json.loads(plan.to_json()) == plan.to_dict()  # JSON's types: lists, names
    # one line of plan.json per instance and per node: `grep lane@3` finds its placement
    entries = [line.strip().rstrip(",") for line in plan.to_json().splitlines()]
    data = plan.to_dict()
    wanted = [*data["instances"], *data["nodes"]]
    assert [json.loads(e) for e in entries if e.startswith('{"')] == wanted


def _fits_again(plan: Plan, gpus: int, span: int) -> bool:
    """Whether ``span`` consecutive nodes still have the same ``gpus`` contiguous indices free."""
    taken = {(i.node, g) for i in plan.instances for g in i.gpus}
    free_runs = []
    for node in plan.nodes:
        runs = set()
        for start in range(len(node.gpus) - gpus + 1):
            run = node.gpus[start : start + gpus]
            if all((node.name, g) not in taken for g in run):
                runs.add(run)
        free_runs.append(runs)
    return any(
        set.intersection(*free_runs[first : first + span])
        for first in range(len(plan.nodes) - span + 1)
    )


@settings(max_examples=75, deadline=None)
@given(units=lane_sets(), alloc=allocations())
def test_auto_leaves_no_slot_unused(units: UnitSet, alloc: list[Node]) -> None:
    """After an auto unit, not one more replica of it would fit anywhere."""
    try:
        plan = make_plan(units, alloc, client=alloc[0].name)
    except PlacementError:
        return
    for unit in units.lanes:
        assert unit.lane is not None
        if unit.lane.replicas is None:
            assert not _fits_again(plan, unit.lane.gpus, unit.lane.nodes)


def test_scale_1024_lanes_on_128_nodes() -> None:
    units = unit_set(lane("llama@", gpus=1, replicas=None))
    alloc = nodes(128, 8)
    start = time.perf_counter()
    plan = make_plan(units, alloc, client=alloc[0].name)
    took = time.perf_counter() - start
    assert sum(1 for i in plan.instances if i.rank == 0) == 1024
    assert took < 1.0, f"make_plan took {took:.3f} s"
