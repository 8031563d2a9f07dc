"""``bench/sched_waits.py`` reads the controller's waits for a CPU from the kernel's trace.

Its figures (each wait's start and length, who ran meanwhile) decide where BENCHMARKS
says a late lane's time went, so the reading is held to hand-made traces in both formats
the kernel writes (with and without thread-group ids): a preemption is a wait until the
switch back in, a wake-up from sleep is one too, a wake-up of a task that is running or
already queued starts none, and a sleep ends a wait that never got the CPU.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
CTL, AGENT, LANE = 100, 200, 300


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sched_waits", ROOT / "bench" / "sched_waits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sched_waits"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sched_waits = _load_script()


def _switch(at: float, cpu: int, before: int, state: str, after: int, tgid: bool) -> str:
    names = {CTL: "python", AGENT: "python", LANE: "busybox", 0: "swapper/0"}
    group = f" ({before:>7}) " if tgid else " "
    return (
        f"  {names[before]}-{before}{group}[{cpu:03d}] d..2. {at:.6f}: sched_switch: "
        f"prev_comm={names[before]} prev_pid={before} prev_prio=120 prev_state={state} ==> "
        f"next_comm={names[after]} next_pid={after} next_prio=120"
    )


def _wakeup(at: float, cpu: int, waker: int, woken: int, tgid: bool) -> str:
    group = f" ({waker:>7}) " if tgid else " "
    return (
        f"  python-{waker}{group}[{cpu:03d}] d..2. {at:.6f}: sched_wakeup: "
        f"comm=python pid={woken} prio=120 target_cpu={cpu:03d}"
    )


def _trace(tgid: bool) -> list[str]:
    return [
        "# tracer: nop",
        _switch(1.000, 0, 0, "R", CTL, tgid),  # the controller runs
        _switch(1.020, 0, CTL, "R", AGENT, tgid),  # preempted: runnable from here
        _switch(1.120, 0, AGENT, "S", CTL, tgid),  # back after 100 ms, the agent ran
        _wakeup(1.125, 0, AGENT, CTL, tgid),  # a wake-up while it runs …
        _switch(1.130, 0, CTL, "S", LANE, tgid),  # … then asleep: no wait
        _wakeup(1.200, 1, AGENT, CTL, tgid),  # woken from sleep: runnable from here
        _wakeup(1.201, 1, AGENT, CTL, tgid),  # queued already: the wait began at 1.200
        _switch(1.205, 0, LANE, "S", CTL, tgid),  # on a CPU 5 ms later
        _switch(1.300, 0, CTL, "R", AGENT, tgid),  # preempted again …
        _switch(1.310, 0, AGENT, "R", CTL, tgid),  # … 10 ms
    ]


@pytest.mark.parametrize("tgid", [True, False], ids=["with tgid", "without tgid"])
def test_waits_are_read_from_switches_and_wakeups(tmp_path: Path, tgid: bool) -> None:
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(_trace(tgid)) + "\n")
    roles = sched_waits.Roles(
        controller=CTL, kinds={CTL: "controller", AGENT: "agent", LANE: "lane"}
    )
    trace = sched_waits.Trace.read(path, 0.0, roles)
    waits = [(round(start, 3), round(end - start, 3)) for start, end in trace.waits]
    assert waits == [(1.020, 0.100), (1.200, 0.005), (1.300, 0.010)]
    during = trace.cpu_by_kind(1.020, 1.120)
    assert during == pytest.approx({"agent": 0.100})
    assert trace.cpu_by_kind(1.130, 1.205) == pytest.approx({"lane": 0.075})


def test_a_thread_counts_as_its_process(tmp_path: Path) -> None:
    """A worker thread of an agent is the agent's CPU, though the switch that ran it
    names only the thread (its process is known from its own lines, read later)."""
    thread = AGENT + 1
    lines = [
        f"  swapper/0-0 (      0) [000] d..2. 1.000000: sched_switch: prev_comm=swapper/0 "
        f"prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=Trio thread 0 "
        f"next_pid={thread} next_prio=120",
        f"  Trio thread 0-{thread} ({AGENT:>7}) [000] d..2. 1.010000: sched_switch: "
        f"prev_comm=Trio thread 0 prev_pid={thread} prev_prio=120 prev_state=S ==> "
        f"next_comm=busybox next_pid={LANE} next_prio=120",
        _switch(1.020, 0, LANE, "S", CTL, True),
    ]
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(lines) + "\n")
    roles = sched_waits.Roles(
        controller=CTL, kinds={CTL: "controller", AGENT: "agent", LANE: "lane"}
    )
    trace = sched_waits.Trace.read(path, 0.0, roles)
    assert trace.cpu_by_kind(1.0, 1.02) == pytest.approx({"agent": 0.010, "lane": 0.010})
