"""docs/quickstart.md's commands, taken from the page and run as it shows them.

Each test finds its shell block on the page by a command in it, and runs the block's
lines through bash: the rehearsal and what it leaves behind (step 1), the stop demo,
and writing your own units from an example (step 2: ``mkdir``/``cp``, the worker edit
the page gives, ``verify``, ``plan`` against the table the page prints, and the
rehearsal of the copied files). ``/shared`` is a temporary directory here. Rehearsals
of unit files with fixed ports run in a network namespace of their own
(``support.netns``), as in ``test_rehearse_examples``, or, where none can be made, on
files whose ports were moved to a free block (``support.fixed_ports``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.fixed_ports import free_base, move_ports, moved_copy, netns_available
from support.netns import argv_in_netns
from support.polls import until_sync
from support.runs import start_env

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"^```bash\n(.*?)^```", DOC, flags=re.S | re.M)


def block_with(text: str) -> str:
    [block] = [b for b in BLOCKS if text in b]
    return block


def commands(block: str) -> list[str]:
    """The block's command lines, without their comments."""
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _env() -> dict[str, str]:
    """``source .venv/bin/activate``: this interpreter's ddsup first on PATH."""
    env = start_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def bash(line: str, cwd: Path, *, netns: bool = False) -> subprocess.CompletedProcess[str]:
    """``line`` through bash; ``netns``: in a network namespace of its own."""
    argv = ["bash", "-c", line]
    return subprocess.run(
        argv_in_netns(argv) if netns else argv,
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _rehearsal_command() -> str:
    """What ``scripts/rehearse`` runs once .venv is set up (its last line)."""
    script = (ROOT / "scripts" / "rehearse").read_text().splitlines()
    line = script[-1].removeprefix("exec ").replace(".venv/bin/ddsup", "ddsup")
    return line.replace('"$@"', "").replace("units/", f"{ROOT}/units/")


@pytest.mark.slow
def test_step_1_what_a_rehearsal_leaves_behind(tmp_path: Path) -> None:
    if netns_available():
        done = bash(_rehearsal_command(), tmp_path, netns=True)
    else:  # the example's endpoint port (9000) may be another run's
        moved = moved_copy(ROOT / "units" / "examples", tmp_path / "examples", free_base())
        line = _rehearsal_command().replace(f"{ROOT}/units/examples/", f"{moved}/")
        done = bash(line, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    outputs = {}
    for line in commands(block_with("ddsup runs")):
        if line.startswith("source "):
            continue  # the environment of _env() is that virtual environment's
        shown = bash(line, tmp_path)
        assert shown.returncode == 0, f"{line}: {shown.stderr}"
        outputs[line] = shown.stdout
    assert "ok, exit 0 (worker: exit status 0)" in outputs["ddsup runs"]
    assert "finished: ok, exit 0" in outputs["ddsup status"]
    assert "fake-vllm listening on" in outputs["ddsup logs lane@0 -n 5"]
    every = outputs["ddsup logs -n 2"].splitlines()
    assert {line.split(": ", 1)[0] for line in every} >= {"lane@0", "lane@3", "endpoint"}
    result = json.loads(outputs["cat ddsup-*/result.json"])
    assert result["status"] == "ok"
    assert (next(tmp_path.glob("ddsup-*")) / "report.html").exists()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "ddsup stop"])
def test_the_stop_demo_stops_while_the_second_lane_waits(tmp_path: Path, how: str) -> None:
    netns = netns_available()
    if netns:
        (tmp_path / "units").symlink_to(ROOT / "units")  # the page runs from a checkout
    else:
        moved_copy(ROOT / "units", tmp_path / "units", free_base())
    [line] = [c for c in commands(block_with("vllm-tp-70b --rehearse")) if "--rehearse" in c]
    argv = ["bash", "-c", f"exec {line}"]
    argv = argv_in_netns(argv) if netns else argv
    console = tmp_path / "console.txt"
    with console.open("w") as sink:
        start = subprocess.Popen(argv, cwd=tmp_path, env=_env(), stderr=sink)
    try:
        state = until_sync(lambda: next(tmp_path.glob("ddsup-*"), None), "the state dir", limit=60)
        events = state / "events.jsonl"

        def waiting() -> bool:
            if start.poll() is not None:
                raise AssertionError(
                    f"ddsup start ended: {start.stderr.read() if start.stderr else ''}"
                )
            text = events.read_text() if events.exists() else ""
            return (
                '"instance":"lane@1"' in text.replace(" ", "")
                and "lane@0" in text
                and ('"to":"ready"' in text.replace(" ", ""))
            )

        until_sync(waiting, "lane@0 ready while lane@1 waits", limit=60)
        if how == "ctrl-c":
            start.send_signal(signal.SIGINT)
            expected = 130
        else:  # a second terminal in the same directory (and the run's network namespace)
            enter = ["nsenter", "-t", str(start.pid), "-n"] if netns else []
            stop = subprocess.run(
                [*enter, sys.executable, "-m", "ddsup", "stop"],
                cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60, check=False,
            )  # fmt: skip
            assert stop.returncode == 0, stop.stderr
            expected = 143
        assert start.wait(timeout=60) == expected
    finally:
        if start.poll() is None:
            start.kill()
            start.wait()
    transitions = [json.loads(x) for x in (state / "events.jsonl").read_text().splitlines()]
    started = {e["instance"] for e in transitions if e.get("to") == "starting"}
    assert "lane@1" not in started and "worker" not in started  # nothing more started
    runs = bash("ddsup runs", tmp_path).stdout
    assert f"stopped, exit {expected}" in runs


@pytest.mark.slow
def test_step_2_copy_check_and_rehearse_your_units(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    copy = block_with("cp -r units/examples/vllm-pp-2node").replace("/shared/", f"{shared}/")
    done = bash(copy, ROOT)
    assert done.returncode == 0, done.stderr
    units = shared / "jobs" / "llama" / "units"
    assert sorted(p.name for p in units.iterdir()) == [
        "endpoint.toml", "generate.py", "lane@.toml", "prompts.jsonl", "worker.toml",
    ]  # fmt: skip
    [documented] = re.findall(r"`(exec = \[\"python3\", \"\{unit_dir\}/generate\.py\".*?\])`", DOC)
    worker = units / "worker.toml"
    edited = re.sub(r"^exec = \[.*?\]$", documented, worker.read_text(), count=1, flags=re.S | re.M)
    assert edited != worker.read_text()
    worker.write_text(edited)

    verify, plan = commands(block_with("ddsup verify /shared"))
    assert bash(verify.replace("/shared/", f"{shared}/"), tmp_path).returncode == 0
    table = bash(plan.replace("/shared/", f"{shared}/"), tmp_path)
    assert table.returncode == 0, table.stderr
    after = DOC.split(plan, 1)[1]
    shown = re.search(r"^```\n(.*?)^```", after, flags=re.S | re.M)  # the block printed next
    assert shown is not None and shown.group(1) in table.stdout, table.stdout

    [rehearse] = commands(block_with("--rehearse --nodes 4"))
    netns = netns_available()
    if not netns:
        move_ports(units, free_base())
    done = bash(rehearse.replace("/shared/", f"{shared}/"), tmp_path, netns=netns)
    assert done.returncode == 0, done.stderr[-3000:]
    results = next(tmp_path.glob("ddsup-*")) / "results.jsonl"
    assert len(results.read_text().splitlines()) == 300  # every prompt answered
