"""The no-orphan layers against vLLM's process model, each on its own, with real processes.

The unit is ``tests/chaos/vllm_like.py``: an API server whose engine calls ``setsid``,
retitles itself with the real ``setproctitle`` (clobbering its environment, as it does
without ``SPT_NOENV``) and re-executes itself with a cleared environment, and which
outlives the API server. Nothing of the run's tag is left on the engine, so every test
here fails without the layer it is about. The supervisor is ``containment_program.py``
in a process of its own (the test process never becomes a subreaper or changes cgroup).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from process_helpers import alive

from ddsup.process import _cgroup, _registry, _unit_scope
from ddsup.process._opening import Records
from ddsup.process._proc import start_time
from ddsup.process._unit_scope import UnitScope
from support.polls import until_sync

HERE = Path(__file__).parent
PROGRAM = HERE / "containment_program.py"
VLLM_LIKE = HERE.parent / "chaos" / "vllm_like.py"
ROOT = os.geteuid() == 0


def _engine_argv(pid_file: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        str(VLLM_LIKE),
        "--clobber",
        "--env-clear",
        "--pid-file",
        str(pid_file),
        *extra,
    ]


class Supervisor:
    """``containment_program.py`` running one configuration; reads its JSON steps."""

    def __init__(self, tmp_path: Path, invocation_id: str, **config: Any) -> None:
        self.pid_file = tmp_path / "engine.pid"
        argv = config.pop("argv", None) or _engine_argv(self.pid_file, "--exit-after", "0.3")
        self.config = {
            "invocation": invocation_id,
            "pid_file": str(self.pid_file),
            "log": str(tmp_path / "unit.log"),
            "argv": argv,
            "then": "stop",
            **config,
        }
        self.process = subprocess.Popen(
            [sys.executable, str(PROGRAM), json.dumps(self.config)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.engines: dict[int, int] = {}  # PID → start time, for the fixture's cleanup

    def step(self) -> dict[str, Any]:
        """Its next step; a supervisor silent for 30 s fails the test (a broken layer can
        freeze or kill it: the test must say so, not hang)."""
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30.0)
        assert ready, "the supervisor said nothing for 30 s"
        line = self.process.stdout.readline()
        assert line, f"the supervisor ended early (exit {self.process.wait()})"
        data: dict[str, Any] = json.loads(line)
        start = start_time(data.get("engine", 0)) if data.get("engine") else None
        if start is not None:
            self.engines[data["engine"]] = start
        return data

    def finish(self) -> int:
        """Its exit status, once it has exited by itself (or been killed after 10 s)."""
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        assert self.process.stdout is not None
        self.process.stdout.close()
        return self.process.wait()


@pytest.fixture
def supervisors() -> Iterator[list[Supervisor]]:
    """The supervisors a test starts; at the end they are ended, and so is any engine
    they left (the suite's leak guard cannot see it: it has no tag), by PID and start
    time, so that a broken layer fails its test without leaking into the next."""
    started: list[Supervisor] = []
    yield started
    for supervisor in started:
        supervisor.finish()
        for pid, start in supervisor.engines.items():
            fd = _registry.pin(_registry.Entry(pid, start, "engine"))
            if fd is not None:
                _registry.kill_pinned([fd])
                _registry.wait_pidfds([fd], 5.0)


def _available(kind: str) -> bool:
    try:
        placement = _cgroup.place(f"probe-{os.getpid()}", kind)
    except _cgroup.Unavailable:
        return False
    placement.run.remove()
    return True


def _need(kind: str) -> None:
    if not _available(kind):  # in CI a failure: it runs as root with a writable hierarchy
        pytest.skip(f"no writable {kind} cgroup hierarchy here (needs root or delegation)")


def _wait_dead(pid: int, seconds: float) -> float | None:
    """Seconds until ``pid`` is dead (not our child: no exit event, bounded poll)."""
    began = time.monotonic()
    while alive(pid):
        if time.monotonic() - began > seconds:
            return None
        time.sleep(0.01)
    return time.monotonic() - began


# --- SPT_NOENV -------------------------------------------------------------------------


@pytest.mark.parametrize("noenv", [True, False], ids=["SPT_NOENV=1", "without"])
def test_spt_noenv_keeps_the_tag_through_setproctitle(noenv: bool, invocation_id: str) -> None:
    """The real setproctitle package wipes /proc/PID/environ unless SPT_NOENV is set."""
    code = (
        "import setproctitle, sys, time\n"
        "setproctitle.setproctitle('VLLM::EngineCore ' + 'x' * 200)\n"
        "print('titled', flush=True); time.sleep(60)\n"
    )
    env = {**os.environ, "DDSUP_INVOCATION_ID": invocation_id}
    env.pop("SPT_NOENV", None)
    if noenv:
        env["SPT_NOENV"] = "1"
    child = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "titled\n"
        environ = Path(f"/proc/{child.pid}/environ").read_bytes()
        title = Path(f"/proc/{child.pid}/cmdline").read_bytes()
        assert title.startswith(b"VLLM::EngineCore")
        assert (f"DDSUP_INVOCATION_ID={invocation_id}".encode() in environ) is noenv
    finally:
        child.kill()
        child.wait()
        assert child.stdout is not None
        child.stdout.close()


# --- cgroups ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["v2", "v1-freezer", "v1-pids"])
def test_unit_cgroup_ends_what_the_unit_left_when_it_ends(
    kind: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """The API server exits, its double-forked, retitled, env-cleared engine lives on;
    the unit's cgroup alone (no registry, nothing tagged) ends it with the unit."""
    _need(kind)
    pid_file = tmp_path / "engine.pid"
    argv = _engine_argv(pid_file, "--double-fork", "--exit-after", "0.3")
    run = Supervisor(tmp_path, invocation_id, cgroup=kind, argv=argv, state_dir=None)
    supervisors.append(run)
    started = run.step()
    layers = started["layers"]
    assert layers["cgroup"]["kind"] == kind and layers["registry"] is None, layers
    controller = _cgroup.CgroupKind(kind).controller
    unit_cgroup = started["unit_cgroups"][controller]
    assert unit_cgroup.endswith(f"/ddsup-{invocation_id}/controller/u-u1"), started
    assert started["engine_cgroups"][controller] == unit_cgroup  # it cannot leave it
    assert started["supervisor_cgroups"][controller].endswith("/controller/supervisor")
    assert f"ddsup-{invocation_id}" not in started["sentinel_cgroups"][controller]
    assert Path(f"/proc/{started['engine']}/cmdline").read_bytes().startswith(b"VLLM::")

    ended = run.step()
    assert ended["exit"] == {"code": 1} and ended["engine_alive"] is False, ended
    closed = run.step()
    assert closed == {
        "step": "closed",
        "engine_alive": False,
        "run_cgroup_exists": False,
        "survivors": [],
    }
    assert run.finish() == 0


def test_a_leftover_that_outlives_its_sigkill_holds_the_end_one_grace(
    invocation_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A unit's end, which its restart waits for, gives what it SIGKILLed ``END_GRACE``
    in all to die: not that on their pidfds and the same again on the cgroup. The
    leftover here outlives its SIGKILL as an engine stuck in the kernel does: a v1
    freezer holds it (SIGKILL does not thaw a v1-frozen process)."""
    _need("v2")
    _need("v1-freezer")
    monkeypatch.setattr(_unit_scope, "END_GRACE", 1.0)
    placement = _cgroup.place(invocation_id, "v2")
    freezer = _cgroup.place(invocation_id, "v1-freezer")
    unit, frozen = placement.run.child("u-stuck"), freezer.run.child("stuck")
    unit.create()
    frozen.create()
    procs_fd = unit.open_procs()
    stuck = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.write(procs_fd, b"0"))
    state = Path(frozen.path, "freezer.state")
    try:
        frozen.move(stuck.pid)
        state.write_text("FROZEN")
        until_sync(lambda: state.read_text().strip() == "FROZEN", "the freezer", limit=5.0)
        scope = UnitScope("u-stuck", unit, Records(None))
        scope.started(stuck.pid)
        began = time.monotonic()
        assert trio.run(scope.end) == [stuck.pid]
        took = time.monotonic() - began
        assert alive(stuck.pid), "the leftover did not outlive its SIGKILL: nothing tested"
        assert 1.0 <= took < 1.6, f"the end waited {took:.2f}s for a stuck leftover"
    finally:
        os.close(procs_fd)
        state.write_text("THAWED")  # the pending SIGKILL lands
        stuck.kill()
        stuck.wait()
        assert unit.wait_empty(5.0) and frozen.wait_empty(5.0)
        assert placement.run.remove() and freezer.run.remove()


@pytest.mark.parametrize("kind", ["v2", "v1-freezer", "v1-pids"])
def test_a_unit_process_is_contained_only_when_its_cgroup_holds_it(
    kind: str, invocation_id: str
) -> None:
    """A stop skips its passes over ``/proc`` for escaped descendants only when the
    unit's cgroup holds the process (ending the cgroup then ends all of it): one that
    moved in between fork and exec is contained, also when it has already exited (a fast
    crash) where the hierarchy (v2) still names its cgroup; one the cgroup does not hold (the move failed) is not, and is stopped with
    the passes."""
    _need(kind)
    placement = _cgroup.place(invocation_id, kind)
    unit = placement.run.child("u-probe")
    unit.create()
    procs_fd = unit.open_procs()
    inside = subprocess.Popen(["sleep", "60"], preexec_fn=lambda: os.write(procs_fd, b"0"))
    outside = subprocess.Popen(["sleep", "60"])
    exited = subprocess.Popen(["true"], preexec_fn=lambda: os.write(procs_fd, b"0"))
    os.waitid(os.P_PID, exited.pid, os.WEXITED | os.WNOWAIT)  # a zombie: not in cgroup.procs
    try:
        # v1 shows an exited process in its hierarchy's root: not known, so not contained
        exited_known = kind == "v2"
        for process, expected in ((inside, True), (outside, False), (exited, exited_known)):
            scope = UnitScope("u-probe", unit, Records(None))
            scope.started(process.pid)
            assert scope.contained is expected, (process.pid, unit.members())
    finally:
        os.close(procs_fd)
        for process in (inside, outside, exited):
            process.kill()
            process.wait()
        assert unit.wait_empty(5.0)
        assert placement.run.remove()


@pytest.mark.parametrize("kind", ["v2", "v1-freezer", "v1-pids"])
def test_the_supervisor_forks_a_unit_from_its_cgroup_and_is_home_after(
    kind: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """The supervisor holds itself in the unit's cgroup while it forks (the child is born
    there): after a spawn that failed it is back in its own leaf, and the unit's cgroup
    is empty (nothing of ours is left in it for the unit's end to kill)."""
    _need(kind)
    run = Supervisor(
        tmp_path, invocation_id, cgroup=kind, argv=["/nonexistent/vllm"], state_dir=None
    )
    supervisors.append(run)
    failed = run.step()
    assert failed["step"] == "spawn-failed" and "/nonexistent/vllm" in failed["error"], failed
    controller = _cgroup.CgroupKind(kind).controller
    assert failed["supervisor_cgroups"][controller].endswith(
        f"/ddsup-{invocation_id}/controller/supervisor"
    ), failed
    assert run.step()["run_cgroup_exists"] is False  # the unit's cgroup held nothing
    assert run.finish() == 0


@pytest.mark.parametrize("kind", ["v2", "v1-freezer"])
def test_ddsup_start_forks_a_unit_into_its_cgroup_off_its_event_loop(
    kind: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """``ddsup start``'s loop serves the whole run (every agent's channel, the lane feed):
    while the kernel holds the cgroup lock that the moves around a unit's fork wait for
    (here each move waits 0.4 s), the loop keeps its turns, and the unit is still born
    in its own cgroup, the supervisor back home after."""
    _need(kind)
    run = Supervisor(tmp_path, invocation_id, cgroup=kind, state_dir=None, slow_moves=0.4)
    supervisors.append(run)
    started = run.step()
    assert started["step"] == "started", started
    assert started["loop_gap"] < 0.2, started  # two moves: 0.8 s on the loop
    controller = _cgroup.CgroupKind(kind).controller
    assert started["engine_cgroups"][controller].endswith("/controller/u-u1"), started
    assert started["supervisor_cgroups"][controller].endswith("/controller/supervisor")
    assert run.step()["step"] == "unit-ended"
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


LEAVES_A_CHILD = ["/bin/sh", "-c", "sleep 30 & sleep 0.2; exit 3"]


def test_a_restarted_unit_is_cloned_into_its_cgroup_without_a_move(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """The first move into a cgroup after a quiet spell waits for an RCU grace period,
    and a restart must not: once a unit's process has ended,
    its next starts come from the containment's spawner, born in the unit's cgroup with
    nobody moved. A unit that left a process behind (its cgroup ended, and made anew)
    comes back alive: a clone into a cgroup that was ended once is killed at birth
    (Linux 6.18 compares the kill count with the spawner's cgroup's)."""
    _need("v2")
    run = Supervisor(
        tmp_path, invocation_id, cgroup="v2", state_dir=None, argv=LEAVES_A_CHILD, restarts=4
    )
    supervisors.append(run)
    first, *later = run.step()["starts"]
    assert first == {
        "exit": {"code": 3},
        "contained": True,
        "spawner": False,  # started when a unit's process first ends
        "moves": 2,  # in and back
        "left": [],
    }, first
    for start in later:
        assert start == {
            "exit": {"code": 3},
            "contained": True,
            "spawner": True,
            "moves": 0,
            "left": [],
        }, later
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


def test_a_unit_restarts_in_its_cgroup_when_the_spawner_is_gone(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """The spawner is a process that a unit of the same user can kill: starts then go
    back to the move, still born in the unit's cgroup."""
    _need("v2")
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="v2",
        state_dir=None,
        argv=LEAVES_A_CHILD,
        restarts=3,
        kill_spawner_before=2,
    )
    supervisors.append(run)
    starts = run.step()["starts"]
    assert [(s["spawner"], s["moves"]) for s in starts] == [(False, 2), (True, 0), (False, 2)]
    assert all(s["exit"] == {"code": 3} and s["contained"] for s in starts), starts
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


def test_a_spawner_that_does_not_answer_delays_a_start_by_its_timeout_only(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """A spawner that stopped answering (here SIGSTOPped) is given up after its timeout,
    whatever it may have started in the unit's cgroup is ended, and the unit starts by
    the move: a start never hangs on it."""
    _need("v2")
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="v2",
        state_dir=None,
        argv=LEAVES_A_CHILD,
        restarts=3,
        stop_spawner_before=1,
        answer_timeout=0.5,
    )
    supervisors.append(run)
    starts = run.step()["starts"]
    assert [(s["spawner"], s["moves"]) for s in starts] == [(False, 2), (True, 2), (False, 2)]
    assert all(s["exit"] == {"code": 3} and s["contained"] for s in starts), starts
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


DESCRIBE = (
    'grep -E "^Sig(Ign|Blk|Cgt)" /proc/$$/status | tr "\\n" " "; '
    'printf "fds=%s " "$(ls /proc/$$/fd | tr "\\n" ,)"; '
    'printf "sid=%s pid=%s cwd=%s stdin=%s\\n" '
    '"$(cut -d" " -f6 /proc/$$/stat)" $$ "$PWD" "$(readlink /proc/$$/fd/0)"; exit 3'
)


def test_a_unit_starts_the_same_from_the_spawner_as_from_its_cgroup(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """What a unit's process inherits does not depend on who forked it: no signal ignored
    or blocked (the spawner ignores the stop signals itself), only its three standard
    streams open (stdin on /dev/null), a session of its own, the working directory."""
    _need("v2")
    log = tmp_path / "unit.log"
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="v2",
        state_dir=None,
        argv=["/bin/sh", "-c", DESCRIBE],
        restarts=2,
        cwd=str(tmp_path),
    )
    supervisors.append(run)
    starts = run.step()["starts"]
    assert [(s["spawner"], s["exit"]) for s in starts] == [
        (False, {"code": 3}),
        (True, {"code": 3}),
    ]
    moved, cloned = (
        dict(w.split("=", 1) for w in line.replace(":\t", "=").split())
        for line in log.read_text().splitlines()
    )
    for seen in (moved, cloned):
        assert seen["sid"] == seen.pop("pid"), seen
        seen.pop("sid")
    assert cloned == moved, (moved, cloned)
    assert cloned["SigIgn"] == cloned["SigBlk"] == "0" * 16, cloned
    assert cloned["stdin"] == "/dev/null" and cloned["cwd"] == str(tmp_path), cloned
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


@pytest.mark.parametrize("gone", ["program", "directory"])
def test_the_spawner_says_why_a_unit_cannot_start_as_the_fork_does(
    gone: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """A unit whose program or working directory went away after its first start: the
    spawner's error names the cause as the fork from its cgroup does (the same words)."""
    _need("v2")
    home = tmp_path / "home"
    home.mkdir()
    program = tmp_path / "unit.sh"
    program.write_text(
        f"#!/bin/sh\ncd /\nrm -f {program if gone == 'program' else ''}\n"
        f"{'rmdir ' + str(home) if gone == 'directory' else ''}\nexit 3\n"
    )
    program.chmod(0o755)
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="v2",
        state_dir=None,
        argv=[str(program)],
        restarts=3,
        kill_spawner_before=2,
        cwd=str(home),
    )
    supervisors.append(run)
    first, cloned, moved = run.step()["starts"]
    assert first["exit"] == {"code": 3}, first
    assert (cloned["spawner"], moved["spawner"]) == (True, False), (cloned, moved)
    assert cloned["error"] == moved["error"], (cloned, moved)
    culprit = (
        f"working directory {str(home)!r}" if gone == "directory" else f"argv[0] {str(program)!r}"
    )
    assert culprit in cloned["error"], cloned
    assert run.step()["run_cgroup_exists"] is False
    assert run.finish() == 0


def test_a_unit_cgroup_the_kernel_refuses_starts_the_unit_outside_it(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """When the supervisor cannot enter the unit's cgroup (here a plain directory: no
    cgroup at all), the unit still starts, in the supervisor's cgroup, and is stopped with
    the passes over ``/proc`` (not contained); the supervisor stays in its own leaf."""
    _need("v2")
    not_a_cgroup = tmp_path / "not-a-cgroup"
    pid_file = tmp_path / "engine.pid"
    argv = _engine_argv(pid_file, "--double-fork", "--exit-after", "0.3")
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="v2",
        argv=argv,
        state_dir=None,
        unit_cgroup_at=str(not_a_cgroup),
    )
    supervisors.append(run)
    started = run.step()
    assert started["step"] == "started", started
    leaf = f"/ddsup-{invocation_id}/controller/supervisor"
    assert started["supervisor_cgroups"][""].endswith(leaf), started
    assert started["unit_cgroups"][""].endswith(leaf), started
    assert not (not_a_cgroup / "cgroup.procs").exists()
    assert run.step()["step"] == "unit-ended"
    closed = run.step()  # the engine escaped the unit: the subreaper's close ends it
    assert closed["engine_alive"] is False and closed["run_cgroup_exists"] is False, closed
    assert run.finish() == 0


@pytest.mark.parametrize("kind", ["v2", "v1-freezer", "v1-pids"])
def test_an_agent_alone_on_its_node_leaves_no_cgroup_of_the_run(
    kind: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """A node agent is the only supervisor of the run on its node (Slurm: every node but
    the controller's): at its end the run's cgroup there is gone too, not left as an
    empty directory (which would keep Slurm from removing the step's cgroup around it)."""
    _need(kind)
    run = Supervisor(
        tmp_path, invocation_id, cgroup=kind, name="agent-node1", root=False, state_dir=None
    )
    supervisors.append(run)
    started = run.step()
    controller = _cgroup.CgroupKind(kind).controller
    assert started["unit_cgroups"][controller].endswith(f"/ddsup-{invocation_id}/agent-node1/u-u1")
    run.step()  # the unit ended
    closed = run.step()
    assert closed["run_cgroup_exists"] is False and closed["survivors"] == [], closed
    assert run.finish() == 0


KILL_OUR_OWN = """
import os, sys
from ddsup.process import _cgroup
placement = _cgroup.place(sys.argv[1], sys.argv[2])
unit = placement.run.child("u-self")
unit.create()
unit.move(os.getpid())
try:
    unit.kill()
except RuntimeError as err:
    print(err)
placement.base.move(os.getpid())
assert placement.run.remove()
"""


@pytest.mark.parametrize("kind", ["v2", "v1-freezer", "v1-pids"])
def test_a_cgroup_that_holds_its_caller_is_not_ended_by_it(kind: str, invocation_id: str) -> None:
    """Ending a cgroup we sit in would kill us (v2, pids) or freeze us for good (freezer):
    it is refused, so a supervisor left in a unit's cgroup fails loudly, never hangs."""
    _need(kind)
    done = subprocess.run(
        [sys.executable, "-c", KILL_OUR_OWN, invocation_id, kind],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("/u-self holds this process: it cannot end it"), done


# --- the registry ----------------------------------------------------------------------


def test_registry_ends_a_seen_engine_with_its_unit(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """Without a cgroup: the scan saw the engine below the API server, so when the API
    server has exited (the engine lost its parent and its tag), the unit's stop ends it."""
    run = Supervisor(
        tmp_path, invocation_id, cgroup="off", state_dir=str(tmp_path / "state"), scan=True
    )
    supervisors.append(run)
    started = run.step()
    assert started["layers"]["cgroup"] is None
    assert started["layers"]["cgroup_reason"] == "turned off (DDSUP_CGROUP=off)"
    entries = _registry.read_entries(str(tmp_path / "state" / "containment"), "controller")
    assert (started["engine"], start_time(started["engine"]), "u1") in [
        (e.pid, e.start_time, e.unit) for e in entries
    ]
    assert run.step()["engine_alive"] is False
    assert run.step()["engine_alive"] is False
    assert run.finish() == 0


def test_an_orphan_of_a_stopped_unit_is_recorded_without_the_periodic_scan(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """Without a cgroup, a unit's end asks for a look at what it orphaned (the restart
    does not wait for it): the adopted engine, never seen while its unit ran, reaches the
    registry file (for the sentinel) though the periodic scan is an hour away."""
    pid_file = tmp_path / "engine.pid"
    argv = _engine_argv(pid_file, "--double-fork", "--exit-after", "0.3")
    state = tmp_path / "state"
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup="off",
        state_dir=str(state),
        argv=argv,
        await_record=True,
        scan_interval=3600,
    )
    supervisors.append(run)
    engine = run.step()["engine"]
    start = start_time(engine)
    assert run.step()["engine_alive"] is True
    assert run.step()["engine_alive"] is False  # the close ended it
    entries = _registry.read_entries(str(state / "containment"), "controller")
    assert (engine, start) in [(e.pid, e.start_time) for e in entries], entries
    assert run.finish() == 0


def test_registry_never_kills_a_reused_pid(tmp_path: Path) -> None:
    """An entry whose start time differs names another process: it is left alone."""
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = start_time(stranger.pid)
        assert start is not None
        assert _registry.kill_entries([_registry.Entry(stranger.pid, start - 1, "u1")]) == []
        assert alive(stranger.pid)
        [(entry, fd)] = _registry.kill_entries([_registry.Entry(stranger.pid, start, "u1")])
        assert _registry.wait_pidfds([fd], 5.0) and entry.pid == stranger.pid
        assert stranger.wait(5) == -signal.SIGKILL
    finally:
        stranger.kill()
        stranger.wait()


# --- adoption ----------------------------------------------------------------------------


def test_adopted_orphan_ends_at_close(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """No cgroup, no registry, no tag: the double-forked engine was reparented to the
    supervisor (a subreaper), cannot be told apart from another unit's, so it lives on
    after its unit ended, and the close ends it: it belongs to the run."""
    pid_file = tmp_path / "engine.pid"
    argv = _engine_argv(pid_file, "--double-fork", "--exit-after", "0.3")
    run = Supervisor(tmp_path, invocation_id, cgroup="off", state_dir=None, argv=argv)
    supervisors.append(run)
    started = run.step()
    status = Path(f"/proc/{started['engine']}/status").read_text()
    assert f"PPid:\t{started['supervisor']}\n" in status  # adopted: it is our child
    assert run.step()["engine_alive"] is True  # not attributable to the unit
    closed = run.step()
    assert closed["engine_alive"] is False, closed
    assert run.finish() == 0


# --- the sentinel ------------------------------------------------------------------------


@pytest.mark.parametrize("cgroup", ["auto", "off"])
def test_sigkill_of_the_supervisor_ends_the_engine_within_2s(
    cgroup: str, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """The sentinel ends the unit's cgroup (or, without one, the registry entries)."""
    state = tmp_path / "state"
    pid_file = tmp_path / "engine.pid"
    argv = _engine_argv(pid_file)  # the API server stays: the engine is its child
    run = Supervisor(
        tmp_path,
        invocation_id,
        cgroup=cgroup,
        state_dir=str(state),
        then="hang",
        argv=argv,
        scan=True,
    )
    supervisors.append(run)
    started = run.step()
    run.process.kill()
    killed = time.monotonic()
    # both are SIGKILLed by the sentinel, one after the other: each may take a moment to die
    for name in ("engine", "unit"):
        assert _wait_dead(started[name], 5.0) is not None, f"{name} alive 5 s after the SIGKILL"
        took = time.monotonic() - killed
        assert took < 2.0, f"{name} dead only {took:.2f}s after the SIGKILL"
    sentinel = started["layers"]["sentinel"]
    assert _wait_dead(sentinel, 10.0) is not None
    if started["layers"]["cgroup"] is not None:
        assert not Path(started["layers"]["cgroup"]["run"]).exists()


def test_cleanup_ends_what_the_registry_and_cgroup_hold(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """Supervisor and sentinel both SIGKILLed (an OOM kill of the step): ``ddsup cleanup
    --state-dir`` ends the engine from the records, and removes the cgroup."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "run.json").write_text(json.dumps({"invocation_id": invocation_id}))
    run = Supervisor(
        tmp_path,
        invocation_id,
        state_dir=str(state),
        then="hang",
        argv=_engine_argv(tmp_path / "engine.pid"),
        scan=True,
    )
    supervisors.append(run)
    started = run.step()
    os.kill(started["layers"]["sentinel"], signal.SIGKILL)
    run.process.kill()
    run.process.wait()
    assert _wait_dead(started["layers"]["sentinel"], 5.0) is not None
    assert alive(started["engine"])
    result = subprocess.run(
        [sys.executable, "-m", "ddsup", "cleanup", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ended "), result.stdout
    assert _wait_dead(started["engine"], 2.0) is not None
    if started["layers"]["cgroup"] is not None:
        assert not Path(started["layers"]["cgroup"]["run"]).exists()


# --- what is reported ----------------------------------------------------------------------


@pytest.mark.parametrize("alive", [True, False], ids=["covered", "not-covered"])
def test_an_agent_covered_by_the_controller_s_live_sentinel_starts_none(
    alive: bool, tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    """A simulated node's agent (``covered_by="controller"``) starts no sentinel while the
    controller's layers file on this machine names a live one; else it starts its own."""
    directory = tmp_path / "state" / "containment"
    directory.mkdir(parents=True)
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        if not alive:
            stand_in.kill()
            stand_in.wait()
        machine = _registry.Machine.here().to_json()
        layers = {"machine": machine, "sentinel": stand_in.pid}
        _registry.write_layers(str(directory), "controller", layers)
        run = Supervisor(
            tmp_path,
            invocation_id,
            cgroup="off",
            state_dir=str(tmp_path / "state"),
            name="agent-node1",
            root=False,
            covered_by="controller",
        )
        supervisors.append(run)
        found = run.step()["layers"]
        run.step()  # the unit ended
        assert run.step()["engine_alive"] is False  # closed: adoption ended the engine
        assert run.finish() == 0
    finally:
        stand_in.kill()
        stand_in.wait()
    if alive:
        assert found["sentinel"] is None and found["sentinel_of"] == "controller", found
        assert "sentinel of controller" in found["layers"], found
    else:
        assert isinstance(found["sentinel"], int) and found["sentinel_of"] is None, found
        assert "sentinel" in found["layers"], found


def test_no_writable_cgroup_never_fails_and_says_why(
    tmp_path: Path, invocation_id: str, supervisors: list[Supervisor]
) -> None:
    run = Supervisor(tmp_path, invocation_id, cgroup="v3", state_dir=None)
    supervisors.append(run)
    layers = run.step()["layers"]
    assert layers["cgroup"] is None
    assert layers["cgroup_reason"] == (
        "DDSUP_CGROUP='v3': expected one of auto, off, v2, v1-freezer, v1-pids"
    )
    assert layers["registry_reason"] == "no state directory"
    assert layers["layers"] == ["subreaper", "sentinel", "process group", "tag sweep"]
