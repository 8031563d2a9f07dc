"""The controller's work on the plan at each start, as the allocation grows.

Before its first lane starts the controller plans, indexes the plan (what each instance
waits for, which nodes need an agent, whether a node may be lost: ``RunLayout``, twice:
again once preflight has given ``port = "auto"`` lanes their ports), writes
``plan.json`` and encodes each agent's Setup (its node's part of the plan). Each of
those once walked the whole plan per instance or per node: quadratic in the allocation.
This bench times each step in-process, on this checkout and on ``--baseline REV`` side
by side (alternating, each in a fresh interpreter), at 128 × 8 (the scale bench's size)
and 1,000 × 8 (issue 19's paper row), and prints the medians and their ratio.

    .venv/bin/python bench/plan_cost.py --baseline bb3da8f
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from side_by_side import Runs, alternate, step_medians

ROOT = Path(__file__).resolve().parent.parent

PROGRAM = """
import json, sys, time
from ddsup.channel._agent_codec import encode_agent
from ddsup.channel._agent_messages import Setup
from ddsup.plan import Node, make_plan
from ddsup.run._ordering import survives_node_loss
from ddsup.run._run_layout import RunLayout
from ddsup.units import parse_unit_set

LANE = '''[unit]
type = "lane"
[service]
exec = ["vllm", "serve", "{model}", "--port", "{port}"]
[ready]
http = "http://{host}:{port}/health"
[lane]
model = "m"
gpus = 1
replicas = "auto"
port = "auto"
'''
ENDPOINT = '[unit]\\ntype = "endpoint"\\n[endpoint]\\nport = 9000\\n'
WORKER = '[unit]\\ntype = "worker"\\nafter = ["endpoint"]\\n[service]\\nexec = ["w"]\\n'

def timed(steps, name, work):
    before = time.process_time()
    result = work()
    steps[name] = time.process_time() - before
    return result

count = int(sys.argv[1])
units = parse_unit_set("units", {"lane@.toml": LANE, "endpoint.toml": ENDPOINT, "worker.toml": WORKER})
nodes = [Node(f"node{i}", f"10.{i // 250}.{i % 250}.1", tuple(range(8))) for i in range(count)]
nodes.append(Node("client", "10.255.0.1", ()))
steps = {}
plan = timed(steps, "make_plan", lambda: make_plan(units, nodes, client="client"))
timed(steps, "survives_node_loss (head start)", lambda: survives_node_loss(units, plan))
layout = timed(steps, "RunLayout", lambda: RunLayout(units, plan))
ports = {p.instance: 30000 + n for n, p in enumerate(plan.instances)}
layout = timed(steps, "RunLayout.with_ports", lambda: layout.with_ports(ports))
timed(steps, "plan.json", lambda: layout.plan.to_json())
timed(steps, "every agent's Setup encoded", lambda: [
    encode_agent(Setup(layout.node_plan(n.name), "inv", "/s", "/u", "7")) for n in nodes[:-1]
])
timed(steps, "every agent's instances", lambda: [layout.agent_instances(n.name) for n in nodes])
print(json.dumps(steps))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", metavar="REV", help="also time ddsup as of this revision")
    parser.add_argument("--nodes", default="128,1000", help="allocation sizes (× 8 GPUs)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = (int(n) for n in args.nodes.split(","))
    for count, runs in alternate(PROGRAM, counts, args.rounds, args.baseline):
        report(count, runs)
    print(f"load {os.getloadavg()[0]:.1f} at the end; CPU seconds, medians of {args.rounds}")


def report(count: int, runs: Runs) -> None:
    names = list(runs)
    print(f"\n{count} nodes × 8 GPUs ({count * 8} lanes), CPU ms per step")
    print(f"  {'step':<34}" + "".join(f"{n[:14]:>16}" for n in names) + "   ratio")
    for step, medians, ratio in step_medians(runs):
        print(f"  {step:<34}" + "".join(f"{1e3 * m:16.2f}" for m in medians) + ratio)


if __name__ == "__main__":
    main()
