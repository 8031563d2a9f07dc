"""How long ``make_plan`` takes for a large allocation: 1,024 lanes on 128 nodes x 8 GPUs.

Run: ``.venv/bin/python bench/plan_scale.py``. Prints the median of 5 runs for a few
shapes of the same size (one auto unit of 1-GPU lanes; several fixed units; 2-node
lanes) and for ``Plan.to_json()``, which ``ddsup start`` also pays once.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable

from ddsup.plan import Node, make_plan
from ddsup.units._model import LaneSection, ServiceSection, SourceLocation, Unit, UnitSet, UnitType

NODES = 128
GPUS = 8
RUNS = 5


def _lane(name: str, **lane: object) -> Unit:
    return Unit(
        name=name,
        type=UnitType.LANE,
        service=ServiceSection(exec=("vllm", "serve")),
        source=SourceLocation(path=f"{name}.toml"),
        template=True,
        lane=LaneSection(model=name.rstrip("@"), **lane),  # type: ignore[arg-type]
    )


def _shapes() -> dict[str, UnitSet]:
    return {
        "1 auto unit, 1,024 x 1 GPU": UnitSet("u", (_lane("llama@", gpus=1, replicas=None),)),
        "16 units x 64 lanes x 1 GPU": UnitSet(
            "u", tuple(_lane(f"m{i:02d}@", gpus=1, replicas=64) for i in range(16))
        ),
        "shared address, 1,024 x 1 GPU": UnitSet("u", (_lane("llama@", gpus=1, replicas=1024),)),
        "64 x (4 GPUs x 2 nodes) + auto 2-GPU lanes": UnitSet(
            "u",
            (
                _lane("big@", gpus=4, nodes=2, replicas=64),
                _lane("small@", gpus=2, replicas=None),
            ),
        ),
    }


def _median(func: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    nodes = [
        Node(f"gpu{i:03d}", f"10.0.{i // 256}.{i % 256}", tuple(range(GPUS))) for i in range(NODES)
    ]
    print(f"make_plan on {NODES} nodes x {GPUS} GPUs, median of {RUNS}:")
    for label, units in _shapes().items():
        shared = label.startswith("shared")
        plan = make_plan(units, nodes, client=nodes[0].name, shared_address=shared)
        lanes = sum(1 for i in plan.instances if i.rank == 0)
        took = _median(
            functools.partial(make_plan, units, nodes, client=nodes[0].name, shared_address=shared)
        )
        to_json = _median(plan.to_json)
        print(
            f"  {label:44s} {lanes:5d} lanes  make_plan {took * 1e3:7.1f} ms  to_json {to_json * 1e3:7.1f} ms"
        )


if __name__ == "__main__":
    main()
