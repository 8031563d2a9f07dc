"""``ddsup logs`` without a unit, on a terminal, and across log rotation, against real runs."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from control_helpers import PY, ddsup, env, on_pty, wait_for

from support.runs import end, start_process
from support.unit_dirs import UnitDir

# Prints "NAME n" every 50 ms, forever.
TALK = "import sys, time\nfor n in range(10**6):\n    print(sys.argv[1], n, flush=True); time.sleep(0.05)"

# Says "start", waits for FILE, then writes COUNT numbered lines of 100 bytes, a little at
# a time.
SPEW = """\
import os, sys, time
flag, count = sys.argv[1], int(sys.argv[2])
print("start", flush=True)
while not os.path.exists(flag):
    time.sleep(0.02)
for i in range(count):
    sys.stdout.write(f"{i:08d} " + "x" * 90 + "\\n")
    if i % 20 == 0:
        sys.stdout.flush()
        time.sleep(0.01)
"""
ANSI = re.compile(rb"\x1b\[[0-9;]*m")


def _talkers(path: Path) -> UnitDir:
    units = UnitDir(path)
    for name in ("talker", "chatterbox"):
        units.add(name, "service", [PY, "-c", TALK, name])
    units.add("worker", "worker", ["sleep", "300"], unit={"after": ["talker", "chatterbox"]})
    return units


def test_follow_all_units_on_a_terminal_with_coloured_aligned_prefixes(tmp_path: Path) -> None:
    units = _talkers(tmp_path / "units")
    state = tmp_path / "state"
    with (tmp_path / "start.out").open("wb") as sink:
        run = start_process(units, state, output=sink)
    try:
        wait_for(lambda: (state / "logs" / "talker.log").exists(), "the talker's log")
        argv = [PY, "-m", "ddsup", "logs", "-f", "--state-dir", str(state)]
        with on_pty(argv, tmp_path) as (follower, screen):
            screen.read_until(b"talker 5\r\n")
            screen.read_until(b"chatterbox 5\r\n")
            assert ddsup("stop", "--no-wait", "--state-dir", str(state)).returncode == 0
            assert follower.wait(timeout=30) == 0  # -f ends with the run
            seen = screen.read_to_end(limit=5)
    finally:
        end(run)
    # the plan's order (chatterbox, talker, worker), a colour each, names padded alike
    assert b"\x1b[36mchatterbox\x1b[0m | chatterbox 5\r\n" in seen
    assert b"\x1b[33mtalker    \x1b[0m | talker 5\r\n" in seen
    lines = ANSI.sub(b"", seen).splitlines()
    talker = [n for n, line in enumerate(lines) if line.startswith(b"talker ")]
    chatter = [n for n, line in enumerate(lines) if line.startswith(b"chatterbox ")]
    assert talker and chatter and min(talker) < max(chatter) and min(chatter) < max(talker)


def test_logs_without_a_unit_prints_every_instance_plainly_when_piped(tmp_path: Path) -> None:
    units = _talkers(tmp_path / "units")
    state = tmp_path / "state"
    with (tmp_path / "start.out").open("wb") as sink:
        run = start_process(units, state, output=sink)
    try:
        wait_for(
            lambda: (
                b"talker 3\n" in (state / "logs" / "talker.log").read_bytes()
                if (state / "logs" / "talker.log").exists()
                else False
            ),
            "talker's lines",
        )
        shown = ddsup("logs", "--state-dir", str(state))
    finally:
        end(run)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b[" not in shown.stdout
    assert "chatterbox: chatterbox 0\n" in shown.stdout and "talker: talker 3\n" in shown.stdout


def test_follow_and_tail_across_rotations_lose_no_line(tmp_path: Path) -> None:
    """4,000 lines of 100 bytes through a 64 KiB cap (6 rotations, 2 files kept): a
    follower started before them sees every one, once, in order; -n reaches into the
    rotated files."""
    units = UnitDir(tmp_path / "units")
    (units.path / "spew.py").write_text(SPEW)
    flag = tmp_path / "go"
    service = {"log_max_size": "64K", "log_max_files": 2}
    units.add("worker", "worker", [PY, units.script("spew.py"), str(flag), "4000"], service=service)
    state = tmp_path / "state"
    with (tmp_path / "start.out").open("wb") as sink:
        run = start_process(units, state, output=sink)
    follower = None
    try:
        wait_for(lambda: (state / "logs" / "worker.log").exists(), "the worker's log")
        argv = [PY, "-m", "ddsup", "logs", "-f", "worker", "--state-dir", str(state)]
        follower = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env())
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"start\n"  # it follows the log: go
        flag.touch()
        out, _ = follower.communicate(timeout=60)
        assert run.wait(timeout=30) == 0
    finally:
        end(run)
        if follower is not None and follower.poll() is None:
            follower.kill()
            follower.wait()
    numbers = [int(line.split()[0]) for line in out.splitlines()]
    assert numbers == list(range(4000))
    kept = sorted(p.name for p in (state / "logs").glob("worker.log*"))
    assert kept == ["worker.log", "worker.log.1", "worker.log.2"]
    tail = ddsup("logs", "worker", "-n", "1000", "--state-dir", str(state)).stdout.splitlines()
    assert [int(line.split()[0]) for line in tail] == list(range(3000, 4000))
    whole = ddsup("logs", "worker", "--state-dir", str(state)).stdout.splitlines()
    first = int(whole[0].split()[0])
    assert [int(line.split()[0]) for line in whole] == list(range(first, 4000))
    assert first > 0  # the oldest output went with the oldest file, as the cap says


def test_follow_waits_for_a_unit_the_run_has_not_planned_yet(tmp_path: Path) -> None:
    """A job followed as soon as Slurm runs it: ddsup has written run.json but no plan, so
    the unit's names are not known yet; -f waits for them instead of refusing them, and
    prefixes the lines of a unit that turns out to have several instances."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "run.json").write_text(json.dumps({"invocation_id": "x" * 32}))
    (state / "run.json").chmod(0o600)
    followers = {}
    for unit in ("worker", "lane"):
        argv = [PY, "-m", "ddsup", "logs", "-f", unit, "--state-dir", str(state)]
        with (tmp_path / f"{unit}.err").open("w") as err:
            followers[unit] = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, env=env())
    try:
        for unit in followers:
            err = tmp_path / f"{unit}.err"
            wait_for(lambda err=err: "no plan yet" in err.read_text(), "the follower's wait")
        (state / "logs").mkdir(mode=0o700)
        planned = [{"instance": name} for name in ("worker", "lane@0", "lane@1")]
        # as ddsup writes it: whole or not at all (a follower polls for it meanwhile)
        (state / "plan.tmp").write_text(json.dumps({"instances": planned}))
        (state / "plan.tmp").rename(state / "plan.json")
        for name in ("worker", "lane@0", "lane@1"):
            (state / "logs" / f"{name}.log").write_text(f"{name} says hello\n")
        (state / "result.json").write_text("{}")
        outs = {unit: f.communicate(timeout=20)[0] for unit, f in followers.items()}
    finally:
        for follower in followers.values():
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    assert [f.returncode for f in followers.values()] == [0, 0]  # -f ends with the run
    assert outs["worker"] == b"worker says hello\n"
    assert outs["lane"] == b"lane@0: lane@0 says hello\nlane@1: lane@1 says hello\n"
    # once the run has planned, a name it does not have is refused, followed or not
    typo = ddsup("logs", "-f", "wroker", "--state-dir", str(state))
    assert (
        typo.returncode == 64
        and "no log for 'wroker'; known: lane@0, lane@1, worker" in typo.stderr
    )
