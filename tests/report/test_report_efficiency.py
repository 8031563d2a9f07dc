"""The efficiency table from synthetic events and series with known timings (pure)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_helpers import (
    T0,
    Synthetic,
    client,
    lane,
    plan,
    run_event,
    series_line,
    two_lane_run,
    unit,
    write_state,
)

from ddsup.ops.report import build_report, render_report
from ddsup.record import efficiency_json, efficiency_line, load_run
from ddsup.record._efficiency import DOWN, efficiency_of, gpu_time_text, whole_percents
from ddsup.record._run_files import event_line
from ddsup.record._run_info import RunInfo
from ddsup.record._series import Series, read_series
from ddsup.record._timeline import MarkKind, replay, run_span


def test_two_lanes_with_a_restart_and_an_unused_gpu(tmp_path: Path) -> None:
    state = write_state(tmp_path / "run", two_lane_run())
    eff = efficiency_of(load_run(state), now=T0 + 10_000)
    assert eff.span.start == T0 and eff.span.end == T0 + 200 and eff.span.finished
    a0, a1 = eff.lanes
    # a@0: loading 10→40 and 102.5→132.5; ready 40→100.5 and 132.5→190; the rest down.
    assert a0.gpus == 2 and a0.restarts == 1
    assert a0.time.loading == pytest.approx(60.0)
    assert a0.time.ready == pytest.approx(60.5 + 57.5)
    assert a0.time.down == pytest.approx(200 - 60 - 118)
    # serving: ten busy seconds, plus a 2 s line that overlaps ready for only 1.5 s
    assert a0.time.serving == pytest.approx(11.5)
    # a@1: waits for its stagger (down), loads 15→35, ready 35→190; a line of 8 busy
    # seconds over 30→40 counts only its 5 ready seconds, plus 0.5 later.
    assert (a1.time.loading, a1.time.ready) == pytest.approx((20.0, 155.0))
    assert a1.time.serving == pytest.approx(5.5)
    total = eff.total
    assert (total.loading, total.serving, total.idle, total.down) == pytest.approx(
        (140.0, 28.5, 362.5, 69.0)
    )
    assert eff.allocation_seconds == pytest.approx(800.0)  # 4 GPUs × 200 s
    assert eff.unused == pytest.approx(200.0)  # GPU 3
    assert sum(eff.shares().values()) == pytest.approx(1.0)
    assert eff.line() == (
        "GPU time 13 min (4 GPUs × 3m20s): loading 17 %, serving 4 %, idle 45 %, down 9 %"
        f" ({DOWN}), unused 25 %"
    )
    assert eff.first_request == pytest.approx(T0 + 50.0)
    assert eff.last_request == pytest.approx(T0 + 100.9)


def test_json_and_line_read_the_state_dir(tmp_path: Path) -> None:
    state = write_state(tmp_path / "run", two_lane_run())
    data = efficiency_json(state)
    assert data["format"] == 1
    assert data["line"] == efficiency_line(state)
    assert data["allocation_gpus"] == 4 and data["gpu_seconds"] == pytest.approx(800)
    assert data["seconds"] == pytest.approx(
        {"loading": 140, "serving": 28.5, "idle": 362.5, "down": 69, "unused": 200}
    )
    assert data["first_request_after"] == pytest.approx(50.0)
    assert data["last_request_before_end"] == pytest.approx(99.1)
    assert [lane["instance"] for lane in data["lanes"]] == ["a@0", "a@1"]
    assert data["lanes"][0]["seconds"]["serving"] == pytest.approx(11.5)
    assert data["requests_recorded"] is True


def test_a_live_run_ends_now(tmp_path: Path) -> None:
    run = two_lane_run()
    live = Synthetic(run.plan, [e for e in run.events if e["time"] <= T0 + 150], run.series)
    files = load_run(write_state(tmp_path / "run", live))
    eff = efficiency_of(files, now=T0 + 160)
    assert not eff.span.finished and eff.span.end == T0 + 160
    a0, a1 = eff.lanes
    assert a1.time.ready == pytest.approx(125.0)  # ready since +35, still ready now
    assert a0.time.ready == pytest.approx(60.5 + 27.5)
    assert eff.total.total == pytest.approx(3 * 160)


def test_without_a_series_serving_and_idle_are_unknown(tmp_path: Path) -> None:
    run = two_lane_run()
    state = write_state(tmp_path / "run", Synthetic(run.plan, run.events, None, run.result))
    line = efficiency_line(state)
    assert line.startswith(
        f"GPU time 13 min (4 GPUs × 3m20s): loading 17 %, ready 49 %, down 9 % ({DOWN}), unused 25 %"
    )
    assert "no endpoint request record" in line
    assert efficiency_json(state)["requests_recorded"] is False


def test_an_endpoint_without_requests_means_all_idle(tmp_path: Path) -> None:
    run = two_lane_run()
    state = write_state(tmp_path / "run", Synthetic(run.plan, run.events, [], run.result))
    data = efficiency_json(state)
    assert data["requests_recorded"] is True
    assert data["seconds"]["serving"] == 0
    assert data["first_request_after"] is None and data["last_request_before_end"] is None


def test_ranks_of_a_multi_node_replica_serve_with_rank_zero(tmp_path: Path) -> None:
    instances = [lane("x@0", "n0", [0]), lane("x@0:1", "n1", [0])]
    events = [run_event(T0, "starting")]
    for name in ("x@0", "x@0:1"):
        events += [unit(T0, name, "inactive", "starting"), unit(T0 + 10, name, "starting", "ready")]
    events.append(run_event(T0 + 20, "finished", status="ok", exit_code=0, cause={}))
    series = [series_line(T0 + 15, 5.0, {"x@0": [3, 3, 0, 0, 4.0, 10]})]
    state = write_state(
        tmp_path / "run", Synthetic(plan({"n0": [0], "n1": [0]}, instances), events, series)
    )
    eff = efficiency_of(load_run(state))
    assert [lane.time.serving for lane in eff.lanes] == pytest.approx([4.0, 4.0])
    assert eff.line() == (  # no lane was ever down: nothing to explain
        "GPU time 40 s (2 GPUs × 20s): loading 50 %, serving 20 %, idle 30 %, down 0 %"
    )


def test_no_plan_and_no_gpus_say_so(tmp_path: Path) -> None:
    events = [run_event(T0, "starting"), run_event(T0 + 1, "finished", status="invalid_units")]
    state = write_state(tmp_path / "a", Synthetic(None, events, None))
    assert efficiency_line(state) == "GPU time: none (the run ended before it had a plan)"
    cpu_only = Synthetic(plan({"n0": []}, [client("worker", "n0")]), events, None)
    assert efficiency_line(write_state(tmp_path / "b", cpu_only)) == (
        "GPU time: none (no GPUs in the plan)"
    )


def test_replay_marks_exits_restarts_and_failures() -> None:
    events = [
        *two_lane_run().events,
        unit(T0 + 199, "a@1", "stopping", "failed", "start limit hit"),
    ]
    lines = [line for line in map(event_line, events) if line is not None]
    assert len(lines) == len(events)  # every line as the controller writes it reads back
    span = run_span(lines, RunInfo(invocation_id="synthetic-run"), now=0)
    lives = replay(lines, ["a@0", "a@1", "never"], span)
    assert [(m.kind, m.time) for m in lives["a@0"].marks] == [
        (MarkKind.EXIT, T0 + 100),
        (MarkKind.RESTART, T0 + 100.5),
    ]
    assert lives["a@0"].marks[0].text == "exit status 1 (pid 7)"
    assert not lives["a@0"].marks[0].ok
    assert lives["a@1"].marks[-1].kind is MarkKind.FAILED
    # every second of the span is in exactly one segment
    for life in lives.values():
        assert sum(s.seconds for s in life.segments) == pytest.approx(200.0)
    assert [s.state for s in lives["never"].segments] == ["inactive"]


def test_malformed_lines_are_skipped_and_named(tmp_path: Path) -> None:
    state = write_state(tmp_path / "run", two_lane_run())
    with (state / "events.jsonl").open("a") as handle:
        handle.write("{not json\n")
        handle.write('{"event": "unit", "time": ')  # being written: not a problem
    with (state / "series" / "endpoint-1.jsonl").open("a") as handle:
        handle.write('{"t": 5, "d": 1, "lanes": ["a@0"], "counts": [1, 2]}\n')
    files = load_run(state)
    assert files.problems == (
        f"events.jsonl:{len(two_lane_run().events) + 1}: not JSON; skipped",
        "series/endpoint-1.jsonl:14: not a series line (2 counts for 1 lanes of 6 each); skipped",
    )
    assert efficiency_of(files).total.serving == pytest.approx(28.5)


def test_several_endpoint_files_are_merged(tmp_path: Path) -> None:
    state = write_state(tmp_path / "run", two_lane_run())
    (state / "series" / "endpoint-2.jsonl").write_text(
        '{"series":"endpoint","format":1,"pid":2,"interval":1.0,"fields":[],"time":0}\n'
        + '{"t": 1180, "d": 10, "lanes": ["a@1"], "counts": [5, 5, 0, 0, 6.0, 5]}\n'
    )
    series = read_series(state)
    assert series.files == 2
    assert [line.end for line in series.lines] == sorted(line.end for line in series.lines)
    assert efficiency_of(load_run(state)).lanes[1].time.serving == pytest.approx(11.5)
    assert Series().first_request is None


@pytest.mark.parametrize(
    ("shares", "expected"),
    [
        ([0.175, 0.035625, 0.453125, 0.08625, 0.25], [17, 4, 45, 9, 25]),
        ([1 / 3, 1 / 3, 1 / 3], [34, 33, 33]),
        ([0.0, 0.0], [0, 0]),
    ],
)
def test_whole_percents_add_up_to_100(shares: list[float], expected: list[int]) -> None:
    assert whole_percents(shares) == expected


def test_gpu_time_reads_like_a_person_writes_it() -> None:
    assert [gpu_time_text(s) for s in (45, 800, 3 * 3600 + 720)] == ["45 s", "13 min", "3.2 h"]


def test_a_run_that_failed_at_once_says_what_its_down_time_is(tmp_path: Path) -> None:
    """A lane that failed at once: most of a split second is down, and the line says
    what down is, what the whole is, and shows the whole to a tenth of a second."""
    events = [
        run_event(T0, "starting"),
        unit(T0 + 0.05, "x@0", "inactive", "starting"),
        unit(T0 + 0.1, "x@0", "starting", "failed", "exit status 1"),
        run_event(T0 + 0.8, "finished", status="unit_failed", exit_code=70, cause={}),
    ]
    state = write_state(
        tmp_path / "run", Synthetic(plan({"n0": [0]}, [lane("x@0", "n0", [0])]), events, [])
    )
    assert efficiency_line(state) == (
        f"GPU time 0.8 s (1 GPU × 800ms): loading 6 %, serving 0 %, idle 0 %, down 94 % ({DOWN})"
    )
    page = render_report(build_report(load_run(state), T0 + 10))
    key = page[page.index('<dl class="facts key">') :]
    key = key[: key.index("</dl>")]
    for part in ("loading", "serving", "idle", "down"):
        assert f"<dt>{part}</dt><dd>" in key, key
    assert "no process loading or ready: not started yet (its stagger turn" in key


def test_values_of_the_wrong_type_are_read_as_missing(tmp_path: Path) -> None:
    """A line another tool or a damaged disk wrote, with a value of the wrong type, is
    read as far as it goes (an event) or skipped and named (a series line): never a crash."""
    state = write_state(tmp_path / "run", two_lane_run())
    with (state / "events.jsonl").open("a") as handle:
        handle.write(json.dumps(unit(T0 + 199, "a@1", "exited", "failed", restarts="x")) + "\n")
        handle.write(json.dumps({"time": T0 + 199, "event": "exit", "instance": ["a@1"]}) + "\n")
    with (state / "series" / "endpoint-1.jsonl").open("a") as handle:
        handle.write(json.dumps(series_line(T0 + 199, 1.0, {}, refused=["a"])) + "\n")
    files = load_run(state)
    assert files.problems == (
        "series/endpoint-1.jsonl:14: not a series line (refused and cut must be an object); "
        "skipped",
    )
    report = build_report(files, T0 + 300)
    life = next(r.life for g in report.groups for r in g.rows if r.instance == "a@1")
    assert life.segments[-1].state == "failed" and life.restarts == 0
    assert "a@1" in render_report(report)
