"""The chaos suite: seeded schedules of signals into a running ``ddsup start``, its node
agents, lanes and worker, each checked against the no-orphan promise (docs/no-orphans.md,
by an oracle that counts every process left in the schedule's own PID namespace), the
exit status and result status the schedule demands (docs/cli.md), well-formed
``result.json``/``events.jsonl``, every injection fired, and a hard bound.

``pytest tests/chaos --chaos-runs N --chaos-seed S``; one test id per schedule,
``schedule-S-I``, reproducible from (S, I). See ``chaos_schedule`` for what a schedule is.
"""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from chaos_harness import (
    ChaosRun,
    EventTail,
    Figures,
    Outcome,
    check_events,
    check_result,
    run_processes,
)
from chaos_schedule import (
    Cause,
    Injection,
    LaneKind,
    LaneUnit,
    Phase,
    Schedule,
    Worker,
    WorkerKind,
    make_schedule,
)


def _record(figures: Figures, outcome: Outcome, state: Path) -> list[str]:
    """Count the schedule in the session's figures; the ways it went wrong."""
    figures.run += 1
    if outcome.schedule.expected_status is None and outcome.empty_after is not None:
        figures.emptied.append(outcome.empty_after)
    wrong = []
    if outcome.orphans:
        figures.orphans += 1
        wrong.append(f"{len(outcome.orphans)} orphan(s)")
    if outcome.wrong_exit:
        figures.wrong_exit += 1
        wrong.append(f"exit {outcome.returncode}, expected {outcome.schedule.expected_exit}")
    if outcome.wrong_status:
        figures.wrong_status += 1
        wanted = outcome.schedule.allowed().get(outcome.returncode or 0)
        wrong.append(f"status {outcome.status!r}, expected {wanted!r}")
    if outcome.missed:
        figures.not_fired += 1
    if outcome.hang or outcome.slow_stop:
        figures.hangs += 1
        wrong.append("hang" if outcome.hang else "slow stop")
    if outcome.problems:
        wrong.append(f"{len(outcome.problems)} malformed-artefact problem(s)")
    if wrong:
        figures.bad.append(f"{outcome.schedule.test_id}: {', '.join(wrong)} ({state})")
    return wrong


def test_schedule(schedule: Schedule, tmp_path: Path, figures: Figures) -> None:
    """One seeded schedule; also every schedule that once found a bug
    (``chaos_known_bugs.REGRESSIONS``), whatever the seed."""
    outcome = ChaosRun(schedule, tmp_path).run()
    wrong = _record(figures, outcome, tmp_path / "state")
    assert not wrong, outcome.report(tmp_path / "state")


# --- the headline check ---------------------------------------------------------------


def _grandchildren(run: ChaosRun) -> dict[int, str]:
    """Processes of the run that called setsid below a unit process: PID → node."""
    assert run.invocation_id is not None and run.namespace is not None
    units = {run.namespace.host_pid(pid) for pid in run.view.pid.values()}
    found = {}
    for pid in run_processes(run.invocation_id):
        try:
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            leader = os.getsid(pid) == pid
        except (OSError, ValueError, IndexError):
            continue
        if leader and parent in units:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            node = next((e[11:].decode() for e in environ if e.startswith(b"DDSUP_NODE=")), "?")
            found[pid] = node
    return found


def test_kill9_of_start_leaves_no_setsid_grandchild_on_two_nodes(tmp_path: Path) -> None:
    """kill -9 of ``ddsup start`` while lanes on two simulated nodes (and the worker) have
    setsid grandchildren: within 2 s nothing of the run is alive (ddsup start's sentinel:
    simulated nodes' agents run none of their own)."""
    lanes = (
        LaneUnit("a-setsid", LaneKind.SETSID, 3, False, 0.1),
        LaneUnit("b-fakevllm", LaneKind.FAKE_VLLM, 1, False, 0.1),
    )
    kill = Injection(Phase.RUNNING, "start", signal.SIGKILL, "primary")
    schedule = Schedule(
        seed=0,
        index=0,
        nodes=2,
        gpus_per_node=2,
        lanes=lanes,
        worker=Worker(WorkerKind.SETSID, ("a-setsid@", "b-fakevllm@")),
        client_setsid_service=True,
        cause=Cause.KILL_START,
        injections=(kill,),
        expected_exit=-signal.SIGKILL,
        expected_status=None,
    )
    seen: dict[int, str] = {}

    def before(run: ChaosRun, injection: Injection) -> bool:
        seen.update(_grandchildren(run))
        # every lane, the worker and the helper service have one; the engine may lag
        return len(seen) >= 3 + 1 + 1 + 1

    outcome = ChaosRun(schedule, tmp_path, before_fire=before).run()
    assert sorted(Counter(seen.values())) == ["node0", "node1"], seen
    assert outcome.returncode == -signal.SIGKILL, outcome.report(tmp_path / "state")
    assert not outcome.orphans, outcome.report(tmp_path / "state")
    assert not outcome.hang and not outcome.problems, outcome.report(tmp_path / "state")


@pytest.mark.parametrize("cgroup", ["auto", "off"], ids=["cgroup", "no-cgroup"])
@pytest.mark.parametrize("kind", [LaneKind.ORPHANER_RETITLED, LaneKind.ORPHANER])
@pytest.mark.parametrize("cause", [Cause.WORKER_EXIT, Cause.KILL_START], ids=["ok", "kill-9"])
def test_engines_outliving_their_api_server_leave_nothing(
    cause: Cause, kind: LaneKind, cgroup: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's process model: each lane's API server exits 1 after 0.3 s and leaves its setsid
    engine, retitled by setproctitle (its environment clobbered; or re-executed with a
    cleared one), then restarts. A run that ends well (the worker's exit 0) leaves nothing
    alive when ``ddsup start`` returns; a SIGKILL of ``ddsup start`` once the engines were
    orphaned, nothing within 2 s. With the cgroup layer, and without it (registry and
    adoption). The oracle counts every process of the schedule's PID namespace."""
    monkeypatch.setenv("DDSUP_CGROUP", cgroup)
    lane = LaneUnit("a-engines", kind, 2, False, 0.1)
    if cause is Cause.WORKER_EXIT:
        worker = Worker(WorkerKind.EXITS, ("a-engines@",), exit_code=0, exit_after=2.0)
        injections: tuple[Injection, ...] = ()
        expected: tuple[int, str | None] = (0, "ok")
    else:
        worker = Worker(WorkerKind.FOREVER, ("a-engines@",))
        injections = (Injection(Phase.RUNNING, "start", signal.SIGKILL, "primary"),)
        expected = (-signal.SIGKILL, None)
    schedule = Schedule(
        seed=0,
        index=0,
        nodes=1,
        gpus_per_node=2,
        lanes=(lane,),
        worker=worker,
        client_setsid_service=False,
        cause=cause,
        injections=injections,
        expected_exit=expected[0],
        expected_status=expected[1],
    )

    def orphaned(run: ChaosRun) -> bool:
        """Every API server exited 1 (its engine orphaned) and was ready again after."""
        again = set()
        exited = set()
        for event in run.tail.events:
            instance = event.get("instance")
            if event["event"] == "exit" and event.get("exit") == {"code": 1}:
                exited.add(instance)
            elif event.get("to") == "ready" and instance in exited:
                again.add(instance)
        return again >= set(lane.instances())

    run = ChaosRun(schedule, tmp_path, before_fire=lambda run, _injection: orphaned(run))
    outcome = run.run()
    report = outcome.report(tmp_path / "state")
    assert orphaned(run), report  # the engines were orphaned before the end
    assert (outcome.returncode, outcome.status) == expected, report
    assert not outcome.orphans and not outcome.problems and not outcome.hang, report
    layers = [e for e in run.tail.events if e["event"] == "containment"]
    assert layers and all((e["cgroup"] is None) is (cgroup == "off") for e in layers), layers


# --- the generator --------------------------------------------------------------------


def test_schedules_are_reproducible_from_seed_and_index() -> None:
    assert make_schedule(7, 3) == make_schedule(7, 3)
    assert make_schedule(7, 3).describe() == make_schedule(7, 3).describe()
    assert len({make_schedule(7, i).describe() for i in range(20)}) == 20
    assert make_schedule(7, 3) != make_schedule(8, 3)


def test_default_schedules_cover_every_cause_phase_target_and_signal() -> None:
    schedules = [make_schedule(1, i) for i in range(50)]
    assert {s.cause for s in schedules} == set(Cause)
    primaries = [i for s in schedules for i in s.injections if i.role == "primary"]
    phases = {i.phase for i in primaries if i.target == "start"}
    assert phases >= {Phase.PREFLIGHT, Phase.MID_STAGGER, Phase.READINESS_WAIT, Phase.RUNNING}
    injected = [i for s in schedules for i in s.injections]
    assert {i.target.split(":")[0] for i in injected} == {"start", "agent", "lane", "worker"}
    assert {i.signum for i in injected} >= {
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGKILL,
        signal.SIGUSR1,
        signal.SIGHUP,
    }
    assert {"reentry", "storm", "prelude", "noise"} <= {i.role for i in injected}
    assert any(i.phase is Phase.STOPPING and i.signum is signal.SIGKILL for i in primaries)
    kinds = {u.kind for s in schedules for u in s.lanes}
    assert kinds == set(LaneKind)
    assert {s.nodes for s in schedules} >= {1, 2, 3}


# --- the judge ------------------------------------------------------------------------


def test_event_tail_flags_malformed_lines_and_reads_growing_files(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    tail.poll()  # no file yet: nothing, no error
    path.write_text('{"time": 1.5, "event": "run", "reason": "starting"}\n{"time": 2.0, "ev')
    tail.poll()
    assert [e["reason"] for e in tail.events] == ["starting"] and not tail.problems
    with path.open("a") as handle:
        handle.write('ent": "unit"}\nnot json\n[1]\n{"time": 3, "event": "x"}\n{"time"')
    tail.finish()
    assert len(tail.events) == 2
    assert len(tail.problems) == 4, tail.problems  # not JSON, not an object, int time, no newline


def test_result_and_events_checks_catch_disagreement(tmp_path: Path) -> None:
    good = {"status": "stopped", "exit_code": 143, "cause": {"reason": "received SIGTERM"}}
    state = tmp_path
    (tmp_path / "result.json").write_text(json.dumps(good))
    assert check_result(state, 143) == ("stopped", [])
    assert check_result(state, -15)[1] != []  # killed by the signal instead of exiting 143
    (tmp_path / "result.json").write_text(json.dumps({"status": "stopped", "exit_code": 143}))
    assert check_result(state, 143)[1] != []  # no cause
    schedule = make_schedule(1, 0)
    outcome = Outcome(schedule, returncode=schedule.expected_exit, status="no-such-status")
    assert outcome.wrong_status and not outcome.wrong_exit  # the schedule's status, exactly
    (tmp_path / "result.json").write_text(json.dumps(good))
    events = [
        {"time": 1.0, "event": "run", "reason": "starting"},
        {"time": 2.0, "event": "run", "reason": "ending"},
        {"time": 3.0, "event": "run", "reason": "finished", "status": "stopped", "exit_code": 143},
    ]
    assert check_events(events, state) == []
    assert check_events(events[:2], state) != []  # no 'run finished'
    assert check_events([events[0], events[1], events[1], events[2]], state) != []
    wrong = {**events[2], "exit_code": 130}
    assert check_events([*events[:2], wrong], state) != []
