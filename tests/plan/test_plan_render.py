"""The human view of a plan: stable text, one row per instance, a GPU map per node."""

from __future__ import annotations

import pytest
from plan_units import endpoint, lane, nodes, unit_set, worker

from ddsup.plan import make_plan, render_plan
from ddsup.plan._render import format_gpus, format_seconds


def test_render_table_and_gpu_map() -> None:
    units = unit_set(
        lane("llama@", gpus=2, replicas=2),
        lane("zbig@", gpus=2, nodes=2, replicas=1, port=None),
        endpoint(),
        worker(),
    )
    text = render_plan(make_plan(units, nodes(2, 8), client="gpu01"))
    assert text == (
        "client gpu01, endpoint http://10.0.0.1:9000, 3 lane(s) on 2 node(s), ports unique per node\n"
        "\n"
        "INSTANCE  TYPE      NODE   GPUS  PORT  REPLICA  RANK  DELAY\n"
        "llama@0   lane      gpu01  0 1   8000  0        0/1   0s\n"
        "llama@1   lane      gpu01  2 3   8001  1        0/1   5s\n"
        "zbig@0    lane      gpu01  4 5   auto  0        0/2   10s\n"
        "zbig@0:1  lane      gpu02  4 5   auto  0        1/2   10s\n"
        "endpoint  endpoint  gpu01  -     9000  -        -     -\n"
        "worker    worker    gpu01  -     -     -        -     -\n"
        "\n"
        "gpu01  [0 1]=llama@0 [2 3]=llama@1 [4 5]=zbig@0 [6 7] free\n"
        "gpu02  [0-3] free [4 5]=zbig@0:1 [6 7] free\n"
    )


def test_render_is_stable() -> None:
    units = unit_set(lane("a@", replicas=None), endpoint())
    first = render_plan(make_plan(units, nodes(3, 4), client="gpu02"))
    assert render_plan(make_plan(units, nodes(3, 4), client="gpu02")) == first


@pytest.mark.parametrize(
    ("gpus", "text"),
    [((), ""), ((3,), "3"), ((0, 1), "0 1"), ((4, 5, 6, 7), "4-7"), ((0, 1, 4, 5, 6), "0 1 4-6")],
)
def test_format_gpus(gpus: tuple[int, ...], text: str) -> None:
    assert format_gpus(gpus) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.0, "0s"), (12.5, "12.5s"), (0.25, "0.25s")])
def test_format_seconds(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text
