"""How long planning takes for a large allocation: 1,024 lanes on 128 nodes × 8 GPUs.

Two measurements, median of ``--runs`` each:

- **end to end**: ``ddsup plan DIR --nodelist 'gpu[001-128]' --gpus-per-node 8`` as a
  command, for one lane unit with ``replicas = "auto"`` (1,024 one-GPU lanes), its table
  and ``--json``, beside the floor of any ``ddsup`` command (``import ddsup._cli``). The
  goal is ≤ 1 s;
- **in-process**: ``make_plan`` for a few shapes of the same size (one auto unit of
  1-GPU lanes; several fixed units; 2-node lanes), and ``Plan.to_json()``, which
  ``ddsup start`` also pays once.

    .venv/bin/python bench/plan_scale.py [--runs 5]

It takes a few seconds.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ddsup.plan import Node, make_plan
from ddsup.units._model import LaneSection, ServiceSection, SourceLocation, Unit, UnitSet, UnitType

NODES = 128
GPUS = 8
GOAL_S = 1.0
LANE_UNIT = """\
[unit]
type = "lane"
[service]
exec = ["vllm", "serve", "--port", "{port}"]
[lane]
model = "llama"
gpus = 1
replicas = "auto"
"""


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
        "1 auto unit, 1,024 × 1 GPU": UnitSet("u", (_lane("llama@", gpus=1, replicas=None),)),
        "16 units × 64 lanes × 1 GPU": UnitSet(
            "u", tuple(_lane(f"m{i:02d}@", gpus=1, replicas=64) for i in range(16))
        ),
        "shared address, 1,024 × 1 GPU": UnitSet("u", (_lane("llama@", gpus=1, replicas=1024),)),
        "64 × (4 GPUs × 2 nodes) + auto 2-GPU lanes": UnitSet(
            "u",
            (
                _lane("big@", gpus=4, nodes=2, replicas=64),
                _lane("small@", gpus=2, replicas=None),
            ),
        ),
    }


def _median(runs: int, func: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _command(argv: list[str]) -> Callable[[], object]:
    return lambda: subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def end_to_end(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ddsup-plan-") as tmp:
        (Path(tmp) / "lane@.toml").write_text(LANE_UNIT)
        plan = [sys.executable, "-m", "ddsup", "plan", tmp, "--nodelist"]
        plan += [f"gpu[001-{NODES:03d}]", "--gpus-per-node", str(GPUS)]
        answer = subprocess.run([*plan, "--json"], capture_output=True, check=True).stdout
        lanes = len(json.loads(answer)["instances"])
        table = _median(runs, _command(plan))
        as_json = _median(runs, _command([*plan, "--json"]))
        floor = _median(runs, _command([sys.executable, "-c", "import ddsup._cli"]))
    print(f"ddsup plan of {lanes:,} lanes on {NODES} nodes × {GPUS} GPUs, median of {runs}:")
    print(
        f"  table {table:.3f} s, --json {as_json:.3f} s; the floor (import ddsup._cli) {floor:.3f} s"
    )
    verdict = "met" if table <= GOAL_S else "MISSED"
    print(f"  plan of {lanes:,} lanes end to end ≤ {GOAL_S:g} s: {verdict}")


def in_process(runs: int) -> None:
    nodes = [
        Node(f"gpu{i:03d}", f"10.0.{i // 256}.{i % 256}", tuple(range(GPUS))) for i in range(NODES)
    ]
    print(f"make_plan on {NODES} nodes × {GPUS} GPUs, median of {runs}:")
    for label, units in _shapes().items():
        shared = label.startswith("shared")
        plan = make_plan(units, nodes, client=nodes[0].name, shared_address=shared)
        lanes = sum(1 for i in plan.instances if i.rank == 0)
        took = _median(
            runs,
            functools.partial(make_plan, units, nodes, client=nodes[0].name, shared_address=shared),
        )
        to_json = _median(runs, plan.to_json)
        print(
            f"  {label:44s} {lanes:5d} lanes  make_plan {took * 1e3:7.1f} ms  to_json {to_json * 1e3:7.1f} ms"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per median")
    args = parser.parse_args()
    end_to_end(args.runs)
    in_process(args.runs)


if __name__ == "__main__":
    main()
