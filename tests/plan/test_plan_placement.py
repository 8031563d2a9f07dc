"""Placement rules, case by case: where each lane instance lands, its port and delay."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from plan_units import endpoint, lane, nodes, service, unit_set, worker

from ddsup._errors import PlacementError, UsageError
from ddsup.plan import Node, Plan, PlannedInstance, make_plan
from ddsup.units._model import Placement, Unit, UnitType


def _where(inst: PlannedInstance) -> str:
    """``node gpus port`` in one short string, for readable expectations."""
    gpus = ",".join(map(str, inst.gpus)) or "-"
    return f"{inst.node} {gpus} {'auto' if inst.port is None else inst.port}"


def _lanes(plan: Plan) -> dict[str, str]:
    return {i.instance: _where(i) for i in plan.instances if i.type is UnitType.LANE}


@dataclass
class Case:
    id: str
    units: list[Unit]
    expected: dict[str, str]
    node_count: int = 2
    gpus: int = 4
    shared: bool = False
    extra: dict[str, object] = field(default_factory=dict)


CASES = [
    Case(
        "fills-first-node-first",
        [lane("a@", gpus=1, replicas=3)],
        {"a@0": "gpu01 0 8000", "a@1": "gpu01 1 8001", "a@2": "gpu01 2 8002"},
    ),
    Case(
        "contiguous-gpus-and-spill-to-next-node",
        [lane("a@", gpus=3, replicas=2)],
        {"a@0": "gpu01 0,1,2 8000", "a@1": "gpu02 0,1,2 8000"},
    ),
    Case(
        "units-in-name-order-later-unit-fills-holes",
        [lane("zz@", gpus=1, replicas=1), lane("aa@", gpus=3, replicas=2)],
        {"aa@0": "gpu01 0,1,2 8000", "aa@1": "gpu02 0,1,2 8000", "zz@0": "gpu01 3 8001"},
    ),
    Case(
        "auto-goes-last-even-if-it-sorts-first",
        [lane("a@", gpus=2, replicas=None), lane("b@", gpus=1, replicas=3)],
        {
            "b@0": "gpu01 0 8000",
            "b@1": "gpu01 1 8001",
            "b@2": "gpu01 2 8002",
            "a@0": "gpu02 0,1 8000",
            "a@1": "gpu02 2,3 8001",
        },
    ),
    Case(
        "auto-takes-every-remaining-slot",
        [lane("a@", gpus=1, replicas=None)],
        {f"a@{r}": f"gpu0{1 + r // 4} {r % 4} {8000 + r % 4}" for r in range(8)},
    ),
    Case(
        "ports-unique-across-nodes-with-shared-address",
        [lane("a@", gpus=2, replicas=4)],
        {
            "a@0": "gpu01 0,1 8000",
            "a@1": "gpu01 2,3 8001",
            "a@2": "gpu02 0,1 8002",
            "a@3": "gpu02 2,3 8003",
        },
        shared=True,
    ),
    Case(
        "two-units-same-base-port-do-not-clash",
        [lane("a@", gpus=2, replicas=1), lane("b@", gpus=2, replicas=1)],
        {"a@0": "gpu01 0,1 8000", "b@0": "gpu01 2,3 8001"},
    ),
    Case(
        "auto-port-stays-none",
        [lane("a@", gpus=2, replicas=2, port=None)],
        {"a@0": "gpu01 0,1 auto", "a@1": "gpu01 2,3 auto"},
    ),
    Case(
        "multi-node-lane-spans-consecutive-nodes-same-gpus",
        [lane("big@", gpus=2, nodes=2, replicas=2)],
        {
            "big@0": "gpu01 0,1 8000",
            "big@0:1": "gpu02 0,1 8000",
            "big@1": "gpu01 2,3 8001",
            "big@1:1": "gpu02 2,3 8001",
        },
    ),
    Case(
        "multi-node-lane-skips-a-partly-used-node",
        [lane("a@", gpus=2, replicas=1), lane("big@", gpus=4, nodes=2, replicas=1)],
        {"a@0": "gpu01 0,1 8000", "big@0": "gpu02 0,1,2,3 8000", "big@0:1": "gpu03 0,1,2,3 8000"},
        node_count=3,
    ),
    Case(
        "non-template-lane-still-numbers-replicas",
        [lane("solo", gpus=4, replicas=1)],
        {"solo@0": "gpu01 0,1,2,3 8000"},
    ),
    Case(
        "endpoint-port-is-never-given-to-a-lane",
        [lane("a@", gpus=1, replicas=3, port=8999), endpoint(port=9000)],
        {"a@0": "gpu01 0 8999", "a@1": "gpu01 1 9001", "a@2": "gpu01 2 9002"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_placement(case: Case) -> None:
    plan = make_plan(
        unit_set(*case.units),
        nodes(case.node_count, case.gpus),
        client="gpu01",
        shared_address=case.shared,
    )
    assert _lanes(plan) == case.expected


def test_lane_instances_come_in_placement_order() -> None:
    units = unit_set(lane("a@", replicas=None), lane("b@", replicas=2))
    plan = make_plan(units, nodes(1, 4), client="gpu01")
    assert [i.instance for i in plan.instances] == ["b@0", "b@1", "a@0", "a@1"]
    assert [i.replica for i in plan.instances] == [0, 1, 0, 1]


def test_multi_node_ranks_share_master_addr_port_and_delay() -> None:
    units = unit_set(lane("a@", gpus=4, replicas=1), lane("big@", gpus=4, nodes=3, replicas=1))
    plan = make_plan(units, nodes(3, 8), client="gpu01")
    ranks = [i for i in plan.instances if i.unit == "big@"]
    assert [(i.instance, i.node, i.rank, i.nnodes) for i in ranks] == [
        ("big@0", "gpu01", 0, 3),
        ("big@0:1", "gpu02", 1, 3),
        ("big@0:2", "gpu03", 2, 3),
    ]
    assert {i.master_addr for i in ranks} == {"10.0.0.1"}
    assert {i.master_port for i in ranks} == {9000}  # port 8000 + 1000 + replica 0
    # big@0 is the second lane on gpu01 (after a@0): every rank waits as long as rank 0.
    assert {i.start_delay for i in ranks} == {5.0}
    assert all(i.replica == 0 for i in ranks)


def test_master_port_avoids_planned_ports() -> None:
    """Lane ports reach into the master range: the master port moves past them."""
    units = unit_set(
        lane("a@", gpus=1, replicas=2, port=8999), lane("big@", gpus=2, nodes=2, replicas=1)
    )
    plan = make_plan(units, nodes(2, 4), client="gpu01")
    used = {(i.node, i.port) for i in plan.instances}
    big = next(i for i in plan.instances if i.instance == "big@0")
    assert big.master_port is not None
    assert big.master_port >= 9000
    assert all((n, big.master_port) not in used for n in ("gpu01", "gpu02"))


def test_single_node_lanes_have_no_master() -> None:
    plan = make_plan(unit_set(lane("a@", replicas=1)), nodes(1), client="gpu01")
    (inst,) = plan.instances
    assert (inst.master_addr, inst.master_port, inst.rank, inst.nnodes) == (None, None, 0, 1)


@pytest.mark.parametrize(
    ("stagger", "standoff", "expected"),
    [
        (5.0, 0.0, [0.0, 5.0, 10.0, 15.0]),
        (5.0, 30.0, [0.0, 35.0, 40.0, 45.0]),
        (0.0, 0.0, [0.0, 0.0, 0.0, 0.0]),
        (2.5, 1.0, [0.0, 3.5, 6.0, 8.5]),
    ],
)
def test_stagger_delays_per_node(stagger: float, standoff: float, expected: list[float]) -> None:
    units = unit_set(lane("a@", replicas=8, stagger=stagger, lead_standoff=standoff))
    plan = make_plan(units, nodes(2, 4), client="gpu01")
    for node in ("gpu01", "gpu02"):
        assert [i.start_delay for i in plan.on_node(node)] == expected


def test_stagger_counts_across_lane_units() -> None:
    units = unit_set(
        lane("a@", replicas=2, stagger=10.0, lead_standoff=1.0), lane("b@", replicas=2, stagger=2.0)
    )
    plan = make_plan(units, nodes(1, 4), client="gpu01")
    assert [(i.instance, i.start_delay) for i in plan.instances] == [
        ("a@0", 0.0),
        ("a@1", 11.0),
        ("b@0", 13.0),
        ("b@1", 15.0),
    ]


def test_client_units() -> None:
    units = unit_set(
        lane("a@", replicas=2),
        endpoint(port=9100),
        worker("bench"),
        service("prep"),
        service("tmpl@", oneshot=True),
        service("sweep", on=Placement.EACH_NODE),
    )
    plan = make_plan(units, nodes(3, 1), client="gpu02", endpoint_host="login.example")
    others = [
        (i.instance, i.unit, i.type.value, i.node, i.port, i.gpus)
        for i in plan.instances
        if i.type is not UnitType.LANE
    ]
    assert others == [
        ("prep", "prep", "service", "gpu02", None, ()),
        ("sweep@gpu01", "sweep", "service", "gpu01", None, ()),
        ("sweep@gpu02", "sweep", "service", "gpu02", None, ()),
        ("tmpl@0", "tmpl@", "oneshot", "gpu02", None, ()),
        ("endpoint", "endpoint", "endpoint", "gpu02", 9100, ()),
        ("bench", "bench", "worker", "gpu02", None, ()),
    ]
    assert plan.endpoint_url == "http://login.example:9100"
    assert plan.client == "gpu02"


def test_endpoint_url_defaults_to_client_address() -> None:
    plan = make_plan(unit_set(endpoint()), nodes(2), client="gpu02")
    assert plan.endpoint_url == "http://10.0.0.2:9000"
    ipv6 = [Node("n0", "::1", (0,))]
    assert make_plan(unit_set(endpoint()), ipv6, client="n0").endpoint_url == "http://[::1]:9000"


def test_no_endpoint_no_url() -> None:
    assert make_plan(unit_set(lane("a@")), nodes(1), client="gpu01").endpoint_url is None


@pytest.mark.parametrize(
    ("units", "node_count", "gpus", "fragments"),
    [
        (
            [lane("llama@", gpus=2, replicas=5)],
            2,
            4,
            [
                "'llama@'",
                "5 replicas",
                "2 GPUs",
                "only 4 fit",
                "2 nodes x 4 GPUs = 8 GPUs",
                "8 of them free",
            ],
        ),
        (
            [lane("a@", gpus=4, replicas=1), lane("b@", gpus=2, replicas=3)],
            2,
            4,
            ["'b@'", "3 replicas", "only 2 fit", "4 of them free after 'a@'"],
        ),
        (
            [lane("big@", gpus=1, nodes=3, replicas=1)],
            2,
            8,
            ["'big@'", "1 replica ", "3 consecutive nodes", "only 0 fit"],
        ),
        (
            [lane("a@", gpus=8, replicas=1), lane("rest@", gpus=1, replicas=None)],
            1,
            8,
            [
                "'rest@'",
                'replicas = "auto" (at least 1)',
                "only 0 fit",
                "0 of them free after 'a@'",
            ],
        ),
        (
            [lane("a@", gpus=16, replicas=1)],
            4,
            8,
            ["'a@'", "16 GPUs", "only 0 fit"],
        ),
    ],
)
def test_does_not_fit(units: list[Unit], node_count: int, gpus: int, fragments: list[str]) -> None:
    with pytest.raises(PlacementError) as info:
        make_plan(unit_set(*units), nodes(node_count, gpus), client="gpu01")
    assert info.value.exit_status == 69
    for fragment in fragments:
        assert fragment in str(info.value)


NO_GPUS = (
    "Without GPUs (a laptop, CI, a CPU node), simulate them with --gpus-per-node G "
    "(e.g. --gpus-per-node 2) and let `ddsup fake-vllm` lanes stand in for vLLM"
)


@pytest.mark.parametrize(
    ("replicas", "asked"),
    [(None, 'replicas = "auto" (at least 1)'), (2, "2 replicas")],
)
def test_no_gpus_says_how_to_simulate_them(replicas: int | None, asked: str) -> None:
    with pytest.raises(PlacementError) as info:
        make_plan(unit_set(lane("a@", replicas=replicas)), nodes(2, 0), client="gpu01")
    assert str(info.value) == (
        f"lane unit 'a@' asks for {asked} of 1 GPU, but the allocation has "
        f"2 nodes x 0 GPUs = 0 GPUs. {NO_GPUS}"
    )


def test_an_auto_unit_is_not_told_to_use_auto() -> None:
    with pytest.raises(PlacementError) as info:
        make_plan(unit_set(lane("a@", gpus=4, replicas=None)), nodes(2, 2), client="gpu01")
    assert str(info.value).endswith(
        "the allocation has 2 nodes x 2 GPUs = 4 GPUs, 4 of them free. Fewer GPUs or nodes "
        "per lane, or ask for more nodes or GPUs (in a rehearsal, simulate them: "
        "--gpus-per-node G)"
    )


def test_a_fixed_unit_is_offered_every_fix() -> None:
    with pytest.raises(PlacementError) as info:
        make_plan(unit_set(lane("a@", replicas=3)), nodes(1, 2), client="gpu01")
    assert str(info.value).endswith(
        'Lower replicas, use replicas = "auto", or ask for more nodes or GPUs '
        "(in a rehearsal, simulate them: --gpus-per-node G)"
    )


def test_two_auto_units_are_refused() -> None:
    units = unit_set(lane("a@", replicas=None), lane("b@", replicas=None))
    with pytest.raises(PlacementError, match=r"at most one lane unit.*'a@', 'b@'"):
        make_plan(units, nodes(1), client="gpu01")


def test_ports_run_out() -> None:
    with pytest.raises(PlacementError, match="no free port from 65535"):
        make_plan(unit_set(lane("a@", replicas=2, port=65535)), nodes(1), client="gpu01")


def test_client_must_be_a_node() -> None:
    with pytest.raises(UsageError, match="client node 'login' is not in the allocation"):
        make_plan(unit_set(lane("a@")), nodes(2), client="login")


def test_node_names_must_be_unique() -> None:
    twice = [*nodes(2), *nodes(1)]
    with pytest.raises(UsageError, match="repeated: gpu01"):
        make_plan(unit_set(lane("a@")), twice, client="gpu01")


def test_uneven_gpu_indices_multi_node_needs_same_indices() -> None:
    odd = [Node("n1", "a1", (0, 1, 2, 3)), Node("n2", "a2", (2, 3, 4, 5))]
    units = unit_set(lane("big@", gpus=2, nodes=2, replicas=1))
    plan = make_plan(units, odd, client="n1")
    assert {(i.node, i.gpus) for i in plan.instances} == {("n1", (2, 3)), ("n2", (2, 3))}
