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

With ``restarts`` (a number), the unit is started that many times instead, one after the
other (each start once the last has exited and been stopped, as a crash loop does),
waiting before each but the first for the containment's spawner to have said whether it
can clone (``kill_spawner_before``: SIGKILL it before that start; ``stop_spawner_before``:
SIGSTOP it, and ``answer_timeout`` is how long a spawn waits for its answer); then
``{"step": "restarted", "starts": [...]}``, each start's exit, whether its cgroup held
it, whether the spawner was ready, and how many moves of this process into or out of a
cgroup its spawn made; then the containment closes.

With ``unit_cgroup_at``, the unit's cgroup is that directory (a test's way to give it one
the kernel refuses: a plain directory is no cgroup); when the spawn fails (an ``argv``
that cannot be executed), ``{"step": "spawn-failed", ...}`` with where we are, and the
containment closes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import trio

from ddsup.process import ChildProcess, SpawnError, _containment, _spawner, open_containment, spawn
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
    _spawner.ANSWER_TIMEOUT = config.get("answer_timeout", _spawner.ANSWER_TIMEOUT)
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
        if config.get("restarts"):
            say({"step": "restarted", "starts": await restarts(containment, env, config)})
            engine = 0
        else:
            engine = await one_start(containment, env, config)
    run = containment.layers.run_cgroup
    say(
        {
            "step": "closed",
            "engine_alive": bool(engine) and not is_dead(engine),
            "run_cgroup_exists": run is not None and await trio.Path(run.path).exists(),
            "survivors": containment.survivors,
        }
    )


async def one_start(
    containment: _containment.Containment, env: dict[str, str], config: dict[str, Any]
) -> int:
    """Steps 1 and 2 (or the failed spawn): the engine's PID, 0 when there is none."""
    gaps: list[float] = []
    child: ChildProcess | SpawnError
    async with trio.open_nursery() as nursery:
        await nursery.start(_tick, gaps)
        try:
            child = await spawn(config["argv"], env=env, cwd="/", log_path=config["log"], unit="u1")
        except SpawnError as err:
            child = err
        nursery.cancel_scope.cancel()
    if isinstance(child, SpawnError):
        say({"step": "spawn-failed", "error": str(child), "supervisor_cgroups": read_cgroups()})
        engine = 0
    else:
        config["loop_gap"] = max(gaps, default=0.0)
        engine = await started(containment, child, config)
    return engine


def _slow_moves(seconds: float) -> None:
    """Every move into or out of a cgroup waits ``seconds`` first, in whatever thread
    makes it: the kernel's cgroup mutex held by other processes' moves, as it is when
    128 agents start lanes on one kernel."""
    move = Cgroup.move

    def slow(self: Cgroup, pid: int) -> None:
        time.sleep(seconds)
        move(self, pid)

    Cgroup.move = slow  # type: ignore[method-assign]


async def restarts(
    containment: _containment.Containment, env: dict[str, str], config: dict[str, Any]
) -> list[dict[str, Any]]:
    """The unit started ``restarts`` times in a row (see the module docstring)."""
    moves = _count_moves()
    scope, spawner = containment.scope("u1"), containment._spawner
    starts: list[dict[str, Any]] = []
    for number in range(config["restarts"]):
        if number and spawner is not None:
            with trio.fail_after(30):
                await spawner.booted.wait()
            if number == config.get("kill_spawner_before") and spawner._popen is not None:
                spawner._popen.kill()
                with trio.fail_after(30):
                    while spawner.ready:  # noqa: ASYNC110 (its exit is seen by its own task)
                        await trio.sleep(0.01)
            if number == config.get("stop_spawner_before") and spawner._popen is not None:
                spawner._popen.send_signal(signal.SIGSTOP)  # it answers nothing from now on
        ready, before = spawner is not None and spawner.ready, len(moves)
        cwd = config.get("cwd", "/")
        try:
            child = await spawn(config["argv"], env=env, cwd=cwd, log_path=config["log"], unit="u1")
        except SpawnError as err:
            starts.append({"error": str(err), "spawner": ready, "moves": len(moves) - before})
            continue
        contained = scope.contained
        status = await child.wait()
        await child.stop(15, 1.0)
        left = [] if scope.cgroup is None else scope.cgroup.members()
        starts.append(
            {
                "exit": status.to_json(),
                "contained": contained,
                "spawner": ready,
                "moves": len(moves) - before,
                "left": left,
            }
        )
    return starts


def _count_moves() -> list[int]:
    """Every move of this process into or out of a cgroup from now on, as a list that
    grows (its PID each time)."""
    moves: list[int] = []
    move = Cgroup.move

    def counted(self: Cgroup, pid: int) -> None:
        if pid in (0, os.getpid()):
            moves.append(pid)
        move(self, pid)

    Cgroup.move = counted  # type: ignore[method-assign]
    return moves


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
