"""A job read from the login node: Slurm's words and the run's record, reconciled.

The Slurm output here was recorded from real ``squeue``/``sacct`` (Slurm 22.05); the
runs are real state directories as ddsup leaves them. Each case is one a user meets:
a job that waits (and why), one that runs before ddsup has started, one requeued, one
that ended before ddsup started, one a lost node cut off, one slurmctld forgot while
accounting still lags behind.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ddsup._errors import UntrustedRunError
from ddsup.jobs._slurm import Slurm
from ddsup.jobs._slurm_job import parse_accounting, parse_queue
from ddsup.jobs._view import Phase, find_job_run, reconcile

# squeue --noheader --states=all --Format=JobID:|,State:|,Reason:|,exit_code:|,RestartCnt:|,
#   NodeList:|,StartTime:|,EndTime:|,BatchHost:|,UserName:|,Name:
QUEUE = """\
11|PENDING|Resources|0|0||N/A|N/A|n/a|alice|llama
12|PENDING|BeginTime|0|1||2026-12-06T20:48:44|2026-12-06T20:48:44|n/a|alice|llama
13|RUNNING|None|0|0|n[1-3]|2026-12-06T20:19:56|2026-12-06T20:29:56|n1|alice|llama
14|CANCELLED|None|15|0|n[1-3]|2026-12-06T20:19:56|2026-12-06T20:20:10|n1|alice|llama
15|FAILED|NonZeroExitCode|768|0|n1|2026-12-06T20:15:10|2026-12-06T20:15:12|n1|alice|llama
16|NODE_FAIL|NodeDown|9|0|n[1-3]|2026-12-06T20:19:56|2026-12-06T20:31:02|n1|alice|llama
17|COMPLETING|None|0|0|n[1-3]|2026-12-06T20:19:56|2026-12-06T20:29:56|n1|alice|a|b
18|COMPLETED|None|0|0|n[1-3]|2026-12-06T20:19:56|2026-12-06T20:29:56|n1|alice|llama
garbage line
99|RUNNING|None|0|0|n1|N/A|N/A|n1|bob|not asked for
"""
# sacct --noheader --parsable2 --allocations --format=JobID,State,ExitCode,Reason,NodeList,
#   Start,End,User
ACCOUNTING = """\
21|RUNNING|0:0|None|n[1-3]|2026-12-06T20:19:56|Unknown|alice
22|CANCELLED by 0|0:15|None|n[1-2]|2026-12-06T20:19:56|2026-12-06T20:30:00|alice
"""
ASKED = [str(n) for n in range(11, 23)]


def test_recorded_squeue_and_sacct_lines_parse_as_slurm_meant_them() -> None:
    queue = parse_queue(QUEUE, set(ASKED))
    accounting = parse_accounting(ACCOUNTING, set(ASKED))
    assert sorted(queue) == ["11", "12", "13", "14", "15", "16", "17", "18"]  # 99: not asked
    assert (queue["15"].exit_code, queue["15"].signal) == (3, None)  # wait status 768
    assert (queue["14"].exit_code, queue["14"].signal) == (None, 15)
    assert queue["12"].restarts == 1 and queue["11"].nodes is None
    assert queue["17"].name == "a|b"  # the one field a user writes comes last
    assert (accounting["22"].state, accounting["22"].signal) == ("CANCELLED", 15)


def _run(root: Path, job: str, result: dict[str, object] | None, attempt: int = 0) -> Path:
    """A state directory as ddsup leaves it: run.json naming the job, maybe result.json."""
    root.mkdir(mode=0o700, parents=True)
    run = {"invocation_id": f"inv-{job}-{attempt}", "job": job, "attempt": attempt}
    (root / "run.json").write_text(json.dumps(run))
    (root / "run.json").chmod(0o600)
    if result is not None:
        (root / "result.json").write_text(json.dumps(result))
    return root


OK = {"status": "ok", "exit_code": 0, "cause": {"unit": "worker", "reason": "exit status 0"}}
REQUEUED = {
    "status": "requeued",
    "exit_code": 85,
    "cause": {"unit": "worker", "reason": "exit status 85; the job was requeued"},
}


@pytest.mark.parametrize(
    ("job", "record", "phase", "summary"),
    [
        ("11", None, Phase.PENDING, "pending: waits for nodes to be free (Resources)"),
        ("12", REQUEUED, Phase.REQUEUED, "requeued: the next attempt waits for its start "
         "time (BeginTime); attempt 0 ended requeued, exit 85 (worker: exit status 85; the "
         "job was requeued)"),
        ("13", None, Phase.STARTING, "RUNNING on n[1-3] since 2026-12-06T20:19:56: ddsup "
         "has not started yet; its output: /out"),
        ("13", {}, Phase.RUNNING, "RUNNING on n[1-3] since 2026-12-06T20:19:56"),
        ("17", OK, Phase.ENDING, "ddsup has ended (ok, exit 0 (worker: exit status 0)); "
         "Slurm is ending the job (COMPLETING)"),
        ("18", OK, Phase.FINISHED, "COMPLETED, exit 0: ok, exit 0 (worker: exit status 0)"),
        ("14", None, Phase.NO_RUN, "CANCELLED, signal 15 before ddsup started; its output: /out"),
        ("15", None, Phase.NO_RUN, "FAILED, exit 3 before ddsup started; its output: /out"),
        ("16", {}, Phase.CUT_OFF, "NODE_FAIL, signal 9 on n[1-3]: a node of the job failed, "
         "and Slurm ended the job before ddsup recorded how the run ended"),
    ],
)  # fmt: skip
def test_slurms_view_with_the_runs_record_says_what_is_true(
    tmp_path: Path, job: str, record: dict[str, object] | None, phase: Phase, summary: str
) -> None:
    """``record``: None, no run of the job; {}: a run without result.json; else its result."""
    state = tmp_path / "state"
    if record is not None:
        _run(state, job, record or None)
    run = find_job_run(state, job)
    slurm = parse_queue(QUEUE, set(ASKED))[job]
    assert reconcile(job, slurm, run, batch_output=Path("/out")) == (phase, summary)


def test_a_job_slurmctld_forgot_reads_from_its_record_while_accounting_lags(
    tmp_path: Path,
) -> None:
    lagging = parse_accounting(ACCOUNTING, set(ASKED))["21"]  # sacct: still RUNNING
    finished = find_job_run(_run(tmp_path / "a", "21", OK), "21")
    killed = find_job_run(_run(tmp_path / "b", "21", None), "21")
    assert reconcile("21", lagging, finished, forgotten=True) == (
        Phase.FINISHED,
        "ok, exit 0 (worker: exit status 0) (Slurm no longer lists the job)",
    )
    assert reconcile("21", lagging, killed, forgotten=True)[0] is Phase.CUT_OFF
    assert reconcile("21", None, None) == (
        Phase.UNKNOWN,
        "Slurm does not know job 21 (any more), and ddsup never started in it",
    )
    cancelled = parse_accounting(ACCOUNTING, set(ASKED))["22"]  # an end: sacct is believed
    assert reconcile("22", cancelled, None, forgotten=True)[1] == (
        "CANCELLED, signal 15 before ddsup started"
    )


def test_the_jobs_run_is_found_among_the_attempts_of_its_state_dir(tmp_path: Path) -> None:
    """The same directory holds the job submitted again (job 31) above the first (30),
    which was requeued once: each job's newest attempt is its run."""
    state = _run(tmp_path / "state", "31", None, attempt=2)
    (state / "attempts").mkdir(mode=0o700)
    _run(state / "attempts" / "0", "30", REQUEUED, attempt=0)
    _run(state / "attempts" / "1", "30", OK, attempt=1)
    first, second = find_job_run(state, "30"), find_job_run(state, "31")
    assert first is not None and second is not None
    assert (first.state.path, first.info.attempt) == (state / "attempts" / "1", 1)
    assert (second.state.path, second.result) == (state, None)
    assert find_job_run(state, "32") is None


def test_a_run_record_another_user_could_write_is_refused(tmp_path: Path) -> None:
    state = _run(tmp_path / "state", "40", OK)
    os.chmod(state / "run.json", 0o666)
    with pytest.raises(UntrustedRunError, match="may be written by other users"):
        find_job_run(state, "40")


def test_without_accounting_the_answer_says_so(tmp_path: Path) -> None:
    """sacct on a cluster without accounting storage (the test cluster's) exits 1."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "sacct").write_text(
        "#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n"
    )
    (fake / "sacct").chmod(0o755)
    slurm = Slurm({**os.environ, "PATH": f"{fake}:{os.environ['PATH']}"})
    answer = slurm.accounting(["7"])
    assert (dict(answer.jobs), answer.missing) == (
        {},
        "sacct: Slurm accounting storage is disabled",
    )
