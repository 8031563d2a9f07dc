"""A supervisor stand-in for the containment tests: ``python containment_program.py CONFIG``.

It runs in its own process so that the test process never becomes a subreaper or moves
into a cgroup. CONFIG (JSON) says which layers to open and what the unit is; the program
opens ``open_containment``, spawns the unit with ``unit="u1"``, waits for the engine's
PID file, and prints one JSON line per step on stdout:

1. ``{"step": "started", ...}`` once the engine runs (PIDs, layers, cgroups);
2. with ``then = "stop"``: the unit's process ends by itself (``--exit-after``), is
   stopped, and ``{"step": "unit-ended", "engine_alive": …}``; with ``await_record``,
   it then waits (at most 10 s) until the containment has recorded the engine, which
   the unit's end asked for (``scan_interval`` sets the periodic scan's, so that a test
   can rule that one out); then the containment closes and
   ``{"step": "closed", "engine_alive": …, "run_cgroup_exists": …}``;
3. with ``then = "hang"``: it sleeps until the test SIGKILLs it.

With ``slow_moves`` (seconds), every move into or out of a cgroup first waits that long
(the kernel's cgroup mutex held elsewhere); ``started`` then also tells ``loop_gap``, the
longest the event loop went without a turn while the unit was forked.

With ``unit_cgroup_at``, the unit's cgroup is that directory (a test's way to give it one
the kernel refuses: a plain directory is no cgroup); when the spawn fails (an ``argv``
that cannot be executed), ``{"step": "spawn-failed", ...}`` with where we are, and the
containment closes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import trio

from ddsup.process import ChildProcess, SpawnError, _containment, open_containment, spawn
from ddsup.process._cgroup import Cgroup
from ddsup.process._proc import is_dead, read_cgroups


def say(data: dict[str, Any]) -> None:
    print(json.dumps(data), flush=True)


async def engine_pid(path: Path) -> int:
    file = trio.Path(path)
    with trio.fail_after(20):
        while not await file.exists():  # noqa: ASYNC110 (a file another process writes; bounded)
            await trio.sleep(0.01)
    return int(await file.read_text())


async def main(config: dict[str, Any]) -> None:
    env = {**os.environ, "DDSUP_INVOCATION_ID": config["invocation"], **config.get("env", {})}
    _containment.SCAN_INTERVAL = config.get("scan_interval", _containment.SCAN_INTERVAL)
    async with open_containment(
        config["invocation"],
        state_dir=config.get("state_dir"),
        name=config.get("name", "controller"),
        root=config.get("root", True),
        cgroup=config.get("cgroup", "auto"),
        covered_by=config.get("covered_by"),
    ) as containment:
        assert containment.layers is not None
        scope = containment.scope("u1")
        if config.get("unit_cgroup_at") and scope.cgroup is not None:
            scope.cgroup = Cgroup(scope.cgroup.kind, config["unit_cgroup_at"])
        if config.get("slow_moves"):
            _slow_moves(config["slow_moves"])
        gaps: list[float] = []
        child: ChildProcess | SpawnError
        async with trio.open_nursery() as nursery:
            await nursery.start(_tick, gaps)
            try:
                child = await spawn(
                    config["argv"], env=env, cwd="/", log_path=config["log"], unit="u1"
                )
            except SpawnError as err:
                child = err
            nursery.cancel_scope.cancel()
        if isinstance(child, SpawnError):
            say({"step": "spawn-failed", "error": str(child), "supervisor_cgroups": read_cgroups()})
            engine = 0
        else:
            config["loop_gap"] = max(gaps, default=0.0)
            engine = await started(containment, child, config)
    run = containment.layers.run_cgroup
    say(
        {
            "step": "closed",
            "engine_alive": bool(engine) and not is_dead(engine),
            "run_cgroup_exists": run is not None and await trio.Path(run.path).exists(),
            "survivors": containment.survivors,
        }
    )


def _slow_moves(seconds: float) -> None:
    """Every move into or out of a cgroup waits ``seconds`` first, in whatever thread
    makes it: the kernel's cgroup mutex held by other processes' moves, as it is when
    128 agents start lanes on one kernel."""
    move = Cgroup.move

    def slow(self: Cgroup, pid: int) -> None:
        time.sleep(seconds)
        move(self, pid)

    Cgroup.move = slow  # type: ignore[method-assign]


async def _tick(gaps: list[float], task_status: trio.TaskStatus[None]) -> None:
    """The event loop's pulse while the unit is forked: the gaps between 5 ms sleeps,
    the last one until this task is cancelled."""
    last = time.monotonic()
    task_status.started()
    try:
        while True:
            await trio.sleep(0.005)
            gaps.append(time.monotonic() - last)
            last = time.monotonic()
    finally:
        gaps.append(time.monotonic() - last)


async def started(
    containment: _containment.Containment, child: ChildProcess, config: dict[str, Any]
) -> int:
    """Steps 1 and 2 for a unit that started: the engine's PID."""
    assert containment.layers is not None
    engine = await engine_pid(Path(config["pid_file"]))
    if config.get("scan"):
        await containment.scan()
    say(
        {
            "step": "started",
            "supervisor": os.getpid(),
            "unit": child.pid,
            "engine": engine,
            "layers": containment.layers.to_json(),
            "unit_cgroups": read_cgroups(child.pid),
            "engine_cgroups": read_cgroups(engine),
            "supervisor_cgroups": read_cgroups(),
            "sentinel_cgroups": read_cgroups(containment.layers.sentinel or 0),
            "loop_gap": config["loop_gap"],
        }
    )
    if config["then"] == "hang":
        await trio.sleep_forever()
    status = await child.wait()
    await child.stop(15, 1.0)
    say({"step": "unit-ended", "exit": status.to_json(), "engine_alive": not is_dead(engine)})
    if config.get("await_record"):
        with trio.fail_after(10):
            while engine not in containment._records.seen:  # noqa: ASYNC110 (bounded)
                await trio.sleep(0.01)
    return engine


if __name__ == "__main__":
    trio.run(main, json.loads(sys.argv[1]))
