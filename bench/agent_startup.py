"""The node agent's start-up cost: the CPU of ``python -m ddsup agent`` up to its connect.

``ddsup start`` spawns one agent per node with ``python -m ddsup agent --node N …``
(``run/_launcher.py``). Started without the control channel's secret and address, the
agent stops with a usage error right after its imports, so the CPU (user + system, from
``wait4``) of that process is what every agent spends before it can connect: Python's
start-up and the agent's imports. ``python -c pass`` is measured beside it (the floor).

``--baseline REV`` measures ddsup as of that git revision side by side, alternating the
two trees run by run (both with compiled bytecode, as ``pip install`` leaves them), and
prints medians and the ratio. ``--callgrind`` also counts each tree's instructions once
with valgrind (deterministic: what a noisy shared machine cannot blur).

Run: ``.venv/bin/python bench/agent_startup.py [--runs 21] [--baseline main] [--callgrind]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENT = ["-m", "ddsup", "agent", "--node", "bench-node"]
NO_CHANNEL = ("DDSUP_CONTROL_SECRET", "DDSUP_CONTROL_ADDRESS")


def baseline_code(rev: str, directory: Path) -> Path:
    """ddsup's source as of ``rev``, for ``PYTHONPATH``."""
    directory.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "supervisor"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory / "supervisor"


def compile_bytecode(tree: Path) -> None:
    """What ``pip install`` does: without it every process compiles ddsup from source."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], env=env, check=True)


def _env(code: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in NO_CHANNEL}
    return {**env, "PYTHONPATH": str(code)}


def cpu_of(argv: list[str], env: dict[str, str], expect: int) -> float:
    """Seconds of CPU (user + system) ``argv`` took; it must exit ``expect``."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != expect:
        raise SystemExit(f"bench: {argv} exited {proc.returncode}:\n{err.decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def instructions(argv: list[str], env: dict[str, str]) -> int:
    """Instructions ``argv`` executed, counted by callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"bench: no count from callgrind:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="runs per tree")
    parser.add_argument("--baseline", metavar="REV", help="also measure ddsup as of REV")
    parser.add_argument("--callgrind", action="store_true", help="count instructions too")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ddsup-agent-startup-"))
    try:
        trees = {"this tree": ROOT / "supervisor"}
        if args.baseline:
            trees = {args.baseline: baseline_code(args.baseline, work / "baseline"), **trees}
        for tree in trees.values():
            compile_bytecode(tree)
        load_start = os.getloadavg()[0]
        agent: dict[str, list[float]] = {name: [] for name in trees}
        floor: list[float] = []
        for _ in range(args.runs):
            floor.append(cpu_of([sys.executable, "-c", "pass"], _env(ROOT), 0))
            for name, tree in trees.items():
                agent[name].append(cpu_of([sys.executable, *AGENT], _env(tree), 64))
        load_end = os.getloadavg()[0]
        counts = {}
        if args.callgrind:
            counts = {n: instructions([sys.executable, *AGENT], _env(t)) for n, t in trees.items()}
            counts["python -c pass"] = instructions([sys.executable, "-c", "pass"], _env(ROOT))
        report(args.runs, agent, floor, counts, (load_start, load_end))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def report(
    runs: int,
    agent: dict[str, list[float]],
    floor: list[float],
    counts: dict[str, int],
    loads: tuple[float, float],
) -> None:
    print(
        f"{os.cpu_count()} CPUs, load average {loads[0]:.2f} at the start, {loads[1]:.2f} at the end"
    )
    print(f"CPU of `python -m ddsup agent` to its usage error, ms, median (min) of {runs}:")
    base = statistics.median(floor)
    print(f"  {'python -c pass (floor)':<28}{base * 1000:8.1f} ({min(floor) * 1000:.1f})")
    medians = {}
    for name, cpu in agent.items():
        medians[name] = statistics.median(cpu)
        imports = medians[name] - base
        print(
            f"  {name:<28}{medians[name] * 1000:8.1f} ({min(cpu) * 1000:.1f})"
            f"   beyond the floor {imports * 1000:.1f}"
        )
    if len(medians) == 2:
        (old, new) = medians.values()
        print(f"  ratio this tree / baseline: {new / old:.3f} in all, "
              f"{(new - base) / (old - base):.3f} beyond the floor")  # fmt: skip
    if counts:
        print("instructions (callgrind, one run each):")
        for name, count in counts.items():
            print(f"  {name:<28}{count / 1e6:10.1f} M")
        if len(agent) == 2:
            old_i, new_i = (counts[n] for n in agent)
            py = counts["python -c pass"]
            print(
                f"  ratio: {new_i / old_i:.3f} in all, {(new_i - py) / (old_i - py):.3f} beyond the floor"
            )


if __name__ == "__main__":
    raise SystemExit(main())
