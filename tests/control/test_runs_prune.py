"""``ddsup runs`` lists the runs here; ``ddsup prune`` removes finished ones, never a live one."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from control_helpers import ddsup, live_run

HOUR = 3600.0


def _run_dir(base: Path, name: str, *, started: float, ended: float | None, code: int = 0) -> Path:
    """A state directory as ddsup start leaves it (``ended`` None: no result.json yet)."""
    path = base / name
    (path / "logs").mkdir(parents=True)
    run = {"invocation_id": name, "pid": 1, "started_at": started, "unit_dir": "/units/job"}
    (path / "run.json").write_text(json.dumps(run))
    if ended is not None:
        status = "ok" if code == 0 else "unit_failed"
        cause = {"unit": "worker", "reason": f"exit status {code}"}
        (path / "result.json").write_text(
            json.dumps({"status": status, "exit_code": code, "cause": cause})
        )
        os.utime(path / "result.json", (ended, ended))
    return path


def _runs_here(base: Path) -> list[str]:
    return sorted(p.name for p in base.glob("ddsup-*"))


def test_runs_lists_newest_first_with_the_outcome(tmp_path: Path) -> None:
    now = time.time()
    _run_dir(tmp_path, "ddsup-a", started=now - 3 * HOUR, ended=now - 2 * HOUR, code=70)
    _run_dir(tmp_path, "ddsup-b", started=now - HOUR, ended=now - HOUR + 90)
    _run_dir(tmp_path, "ddsup-c", started=now - 60, ended=None)
    (tmp_path / "ddsup-not-a-run").mkdir()  # no run.json: not a run
    done = ddsup("runs", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[:4] == ["STATE", "DIR", "STARTED", "RAN"]
    assert [line.split()[0] for line in lines[1:]] == ["ddsup-c", "ddsup-b", "ddsup-a"]
    assert "no result: live, or killed" in lines[1]
    assert "ok, exit 0 (worker: exit status 0)" in lines[2] and " 1m30s " in lines[2]
    assert "unit_failed, exit 70" in lines[3]
    listed = json.loads(ddsup("runs", "--json", "--in", str(tmp_path)).stdout)
    assert [(r["state_dir"], r["finished"]) for r in listed] == [
        (str(tmp_path / "ddsup-c"), False),
        (str(tmp_path / "ddsup-b"), True),
        (str(tmp_path / "ddsup-a"), True),
    ]


def test_prune_keeps_the_newest_and_never_a_run_without_result(tmp_path: Path) -> None:
    now = time.time()
    for n in range(4):  # ddsup-0 oldest … ddsup-3 newest, all finished
        _run_dir(tmp_path, f"ddsup-{n}", started=now - (10 - n) * HOUR, ended=now - (9 - n) * HOUR)
    _run_dir(tmp_path, "ddsup-live", started=now - 20 * HOUR, ended=None)  # oldest of all
    dry = ddsup("prune", "--keep", "1", "--dry-run", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    assert [line.split()[2] for line in dry.stdout.splitlines()] == [
        "ddsup-2",
        "ddsup-1",
        "ddsup-0",
    ]
    assert len(_runs_here(tmp_path)) == 5  # a dry run removes nothing

    aged = ddsup("prune", "--older-than", "7h30m", cwd=tmp_path)  # ended 9h and 8h ago
    assert aged.returncode == 0, aged.stderr
    assert _runs_here(tmp_path) == ["ddsup-2", "ddsup-3", "ddsup-live"]
    assert "removed 2 runs; kept 2 finished, 1 without a result" in aged.stderr

    kept = ddsup("prune", "--keep", "0", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert _runs_here(tmp_path) == ["ddsup-live"]


def test_prune_needs_a_rule_and_valid_values(tmp_path: Path) -> None:
    for args, message in (
        ((), "say which runs to remove: --keep N and/or --older-than AGE"),
        (("--keep", "-1"), "--keep must be 0 or more"),
        (("--older-than", "soon"), "--older-than 'soon'"),
    ):
        done = ddsup("prune", *args, cwd=tmp_path)
        assert done.returncode == 64 and message in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_prune_never_removes_a_live_run(tmp_path: Path) -> None:
    with live_run(tmp_path, state_name="ddsup-live") as run:
        done = ddsup("prune", "--keep", "0", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert run.state.is_dir() and (run.state / "events.jsonl").exists()
        assert "removed 0 runs; kept 0 finished, 1 without a result" in done.stderr
        listed = ddsup("runs", cwd=tmp_path).stdout.splitlines()
        assert listed[1].startswith("ddsup-live") and "no result: live" in listed[1]
