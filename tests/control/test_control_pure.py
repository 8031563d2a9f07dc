"""The pure parts: metrics text, the console's lines and progress line, log offsets."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from ddsup._errors import ResultStatus
from ddsup.controller._console import Console
from ddsup.ops._logs import parse_since, since_offset, tail_offset
from ddsup.ops._status_command import render_status
from ddsup.ops._status_view import StatusView
from ddsup.ops._supervisor_metrics import render_supervisor_metrics
from ddsup.process import ExitStatus
from ddsup.record._events import Contained, ProcessStarted, RunStopping, UnitTransition
from ddsup.record._outcome import Outcome
from ddsup.record._states import InstanceState
from ddsup.record._status import InstanceStatus
from ddsup.units._model import UnitType


def _lane(name: str, state: str, **extra: object) -> InstanceStatus:
    fields: dict[str, object] = {"gpus": (), "port": None, "model": None, **extra}
    return InstanceStatus(
        instance=name,
        unit="lane@",
        type=UnitType.LANE,
        node="n1",
        state=InstanceState(state),
        **fields,  # type: ignore[arg-type]
    )


def test_metrics_text_counts_lanes_per_model_and_escapes_labels() -> None:
    instances = [
        _lane("lane@0", "ready", model="a", restarts=2, ready_seconds=3.25),
        _lane("lane@1", "starting", model="a"),
        _lane("lane@1:1", "starting"),  # rank 1: not a replica of its own
        _lane("other@0", "ready", model='we"ird'),
        InstanceStatus(
            "prep", "prep", UnitType.ONESHOT, "n0", (), None, None, InstanceState.EXITED
        ),
    ]
    text = render_supervisor_metrics(instances, 12.5)
    assert 'ddsup_lanes_ready{model="a"} 1\n' in text and 'ddsup_lanes{model="a"} 2\n' in text
    assert 'ddsup_lanes{model="we\\"ird"} 1\n' in text
    assert 'ddsup_unit_state{instance="lane@1",node="n1",unit="lane@",state="starting"} 1\n' in text
    assert 'ddsup_unit_state{instance="lane@1",node="n1",unit="lane@",state="ready"} 0\n' in text
    assert 'ddsup_unit_restarts_total{instance="lane@0"} 2\n' in text
    assert 'ddsup_unit_ready_seconds{instance="lane@0"} 3.25\n' in text
    assert "ddsup_run_uptime_seconds 12.5\n" in text
    assert "# TYPE ddsup_unit_restarts_total counter" in text
    for line in text.splitlines():  # every sample line is "name{labels} number"
        assert line.startswith("#") or float(line.rsplit(" ", 1)[1]) >= 0


def _unit(instance: str, to: str, at: float, node: str = "n3") -> UnitTransition:
    return UnitTransition(
        instance=instance,
        node=node,
        from_state=InstanceState.INACTIVE,
        to_state=InstanceState(to),
        reason=to,
        time=at,
    )


def test_console_draws_a_progress_line_on_a_terminal() -> None:
    stream, now = io.StringIO(), [100.0]
    console = Console(stream=stream, tty=True, clock=lambda: now[0])
    console.lanes({"lane@0": "m", "lane@1": "m"})
    console.event(_unit("lane@0", "starting", 30.0))
    console.event(_unit("lane@1", "starting", 28.0, node="n4"))
    assert console.progress() == "lanes ready 0/2 · waiting on lane@1 (n4) 1m12s (+1 more)"
    console.event(_unit("lane@1", "ready", 99.0, node="n4"))
    assert console.progress() == "lanes ready 1/2 · waiting on lane@0 (n3) 1m10s"
    out = stream.getvalue()
    assert "\r\x1b[K" in out and "\x1b[32m● ready\x1b[0m — ready\n" in out
    console.event(_unit("lane@0", "ready", 100.0))
    assert console.progress() == ""
    console.result(
        Outcome(ResultStatus.OK, 0, "worker", "exit status 0"), Path("/s"), planned=False
    )
    assert (
        stream.getvalue()
        .rstrip("\n")
        .endswith("finished: ok, exit 0 (worker: exit status 0); state in /s")
    )


def test_console_prints_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    console = Console(stream=stream, tty=False)
    console.event(_unit("lane@0", "starting", 1.0))
    console.event(_unit("lane@1", "starting", 1.0))
    console.event(_unit("lane@0", "ready", 2.0))
    console.event(ProcessStarted(instance="lane@1", node=None, pid=42))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        "ddsup: lane@0 (n3): ready — ready · lanes ready 1/2"
    )
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()
    verbose = io.StringIO()
    chatty = Console(stream=verbose, tty=False, verbose=True)
    chatty.event(ProcessStarted(instance="lane@1", node="n3", pid=42))
    chatty.event(_unit("lane@1", "starting", 1.0))
    assert "lane@1 (n3): pid 42" in verbose.getvalue() and "starting" in verbose.getvalue()
    quiet = io.StringIO()
    Console(stream=quiet, tty=True, quiet=True).event(_unit("lane@0", "failed", 1.0))
    assert quiet.getvalue() == ""


def test_since_uses_process_log_offsets_when_events_have_them(tmp_path: Path) -> None:
    log = tmp_path / "lane@0.log"
    log.write_bytes(b"first run\ncrashed\nsecond run\n")
    events = [
        ProcessStarted(instance="lane@0", node=None, pid=1, log_offset=0, time=10.0),
        UnitTransition(
            instance="lane@0",
            node=None,
            from_state=InstanceState.READY,
            to_state=InstanceState.RESTARTING,
            reason="exit status 1; restart in 1s",
            exit=ExitStatus(code=1),
            time=20.0,
        ),
        ProcessStarted(instance="lane@0", node=None, pid=2, log_offset=18, time=21.0),
    ]
    assert since_offset(log, "lane@0", 5.0, events) == 0
    assert since_offset(log, "lane@0", 25.0, events) == 18  # only the second process
    old = tmp_path / "old.log"
    old.write_bytes(b"x\n")
    os.utime(old, (1000.0, 1000.0))
    assert since_offset(old, "old", 999.0, []) == 0  # no offsets: the file as a whole
    assert since_offset(old, "old", 1001.0, []) == 2


def test_tail_offset_and_since_parsing(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_bytes(b"a\nbb\nccc\n")
    assert log.read_bytes()[tail_offset(log, 0, 2) :] == b"bb\nccc\n"
    assert tail_offset(log, 0, 10) == 0 and tail_offset(log, 0, 0) == 9
    assert log.read_bytes()[tail_offset(log, 2, 5) :] == b"bb\nccc\n"
    assert abs(parse_since("2026-01-02T03:04:05Z") - 1767323045.0) < 1e-6
    assert 590 < __import__("time").time() - parse_since("10m") < 610


def test_status_text_of_a_run_that_did_not_answer() -> None:
    view = StatusView(
        invocation_id="abc",
        launcher="slurm",
        state_dir="/s",
        unit_dir=None,
        pid=None,
        started_at=None,
        ended_at=None,
        uptime=None,
        live=False,
        stopping=False,
        result=None,
        instances=(
            _lane(
                "lane@0",
                "ready",
                gpus=(0, 1),
                port=8000,
                since=90.0,
                pid=7,
                model="m",
                served_names=("m", "alias", "sql-lora"),
            ),
            _lane("lane@0:1", "starting", gpus=(0, 1), port=8000, since=95.0, pid=8),
        ),
    )
    text = render_status(view, colour=False, now=100.0)
    assert "not answering and no result.json" in text
    assert text.splitlines()[-2].split() == [
        "lane@0",
        "n1",
        "ready",
        "10s",
        "7",
        "0",
        "-",
        "0,1",
        "8000",
        "m,alias,sql-lora",
        "-",
        "-",
    ]
    assert text.splitlines()[-1].split()[-2:] == ["-", "-"]  # a rank > 0 serves no name


def test_status_header_sits_over_the_state_symbols_on_a_terminal() -> None:
    view = StatusView("abc", "local", "/s", None, None, None, None, 1.0, True, False, None, (
        _lane("lane@0", "ready", since=90.0, pid=7, model="m"),
        _lane("lane@1", "failed", since=90.0, model="m"),
    ))  # fmt: skip
    lines = render_status(view, colour=True, now=100.0).splitlines()
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
    header = next(line for line in plain if line.startswith("INSTANCE"))
    column = header.index("STATE")
    assert [row[column] for row in plain[-2:]] == ["●", "✗"]
    assert header.index("SINCE") == plain[-1].index("10s")


async def test_console_run_redraws_the_elapsed_time_every_second(autojump_clock: object) -> None:
    import trio

    stream = io.StringIO()
    console = Console(stream=stream, tty=True, clock=trio.current_time)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(console.run)
        await trio.sleep(5)  # idle: nothing to show, so nothing is drawn
        assert stream.getvalue() == ""
        console.lanes({"lane@0": "m"})
        console.event(_unit("lane@0", "starting", trio.current_time()))
        await trio.sleep(61.5)
        assert stream.getvalue().endswith("\r\x1b[Klanes ready 0/1 · waiting on lane@0 (n3) 1m01s")
        assert stream.getvalue().count("\r\x1b[K") == 62  # once at the event, then every second
        console.event(_unit("lane@0", "ready", trio.current_time()))
        drawn = stream.getvalue()
        await trio.sleep(30)
        assert stream.getvalue() == drawn  # nothing left to wait for: no more redraws
        console.event(RunStopping(time=trio.current_time()))
        console.event(_unit("lane@0", "stopping", trio.current_time()))
        await trio.sleep(3.5)
        assert stream.getvalue().endswith("stopping · 1 left · waiting on lane@0 (n3) 3s")
        nursery.cancel_scope.cancel()


def test_status_shows_a_replicas_ranks_the_attempt_and_the_gpus_a_lane_sees() -> None:
    view = StatusView(
        invocation_id="abc",
        launcher="slurm",
        state_dir="/s",
        unit_dir=None,
        pid=None,
        started_at=None,
        ended_at=None,
        uptime=None,
        live=False,
        stopping=False,
        result=None,
        instances=(
            _lane(
                "lane@0", "starting", gpus=(0,), port=8000, since=90.0, attempt=2,
                attempt_limit=5, probe="HTTP 503", replica="lane@0", rank=0, nnodes=2,
                devices=("GPU-8f2c1b0e-0000-1111",),
            ),
            _lane("lane@0:1", "restarting", gpus=(0,), since=95.0, attempt=2,
                  attempt_limit=5, replica="lane@0", rank=1, nnodes=2, devices=("3",)),
        ),
    )  # fmt: skip
    rows = [line.split() for line in render_status(view, colour=False, now=100.0).splitlines()]
    header = rows.index(["INSTANCE", "NODE", "RANK", "STATE", "SINCE", "PID", "RESTARTS",
                         "LAST", "EXIT", "GPUS", "PORT", "MODEL", "ATTEMPT", "PROBE"])  # fmt: skip
    assert rows[header + 1] == [
        "lane@0", "n1", "0/2", "starting", "10s", "-", "0", "-", "GPU-8f2c1b0e…", "8000", "-",
        "2", "of", "5", "HTTP", "503",
    ]  # fmt: skip
    assert rows[header + 2][:4] == ["lane@0:1", "n1", "1/2", "restarting"]
    assert rows[header + 2][8:] == ["3", "-", "-", "2", "of", "5", "-"]


def test_status_starts_no_event_loop() -> None:
    """``ddsup status`` is one request and one answer: it imports neither trio nor psutil
    (trio's import alone was 0.2 s of CPU, most of the command at 1,024 lanes), nor what
    reads unit files or works out a plan (the packages' names are imported when first
    used: ``ddsup.units``, ``ddsup.plan`` and ``ddsup.record`` imported all of that, ~0.1 s
    of CPU), nor the run's own messages and the plan and unit sections they carry (the
    operator's part of the codec: ~40 ms more), nor what only ``--job`` needs (Slurm's
    view of a job)."""
    heavy = (
        "'trio', 'psutil', 'tomllib', 'subprocess', 'ddsup.units._parse', "
        "'ddsup.units._jsonschema', 'ddsup.plan._allocation', 'ddsup.plan._placement', "
        "'ddsup.units._model', 'ddsup.plan._plan', 'ddsup.channel._messages', "
        "'ddsup.channel._codec', 'secrets', 'ddsup.units._toml', 'ddsup.jobs._view'"
    )
    code = f"import sys, ddsup.ops._status_command; print(sorted({{{heavy}}} & set(sys.modules)))"
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]"


def test_status_names_each_set_of_no_orphan_layers_once() -> None:
    """At 128 nodes the controller's layers and its agents' differ by one (a sweep by tag
    against a match): two lines above the table, not 129."""
    sweep, match = "cgroup v2, sentinel, tag sweep", "cgroup v2, sentinel, tag match"
    reports = (
        Contained(node=None, supervisor="controller", summary=sweep),
        *(Contained(node=f"n{i}", supervisor=f"agent-n{i}", summary=match) for i in range(128)),
        # (in the order they reported: shown in node order)
    )
    view = StatusView(
        "abc", "local", "/s", None, None, None, None, 1.0, True, False, None, (),
        containment=(reports[0], *reversed(reports[1:])),
    )  # fmt: skip
    assert "no-orphan" not in render_status(view, colour=False)  # without -v: none
    lines = [
        x for x in render_status(view, colour=False, verbose=True).splitlines() if "no-orphan" in x
    ]
    assert lines == [
        f"no-orphan layers of controller: {sweep}",
        f"no-orphan layers of 128 supervisors (agent-n0 (n0) … agent-n127 (n127)): {match}",
    ]
    few = StatusView(
        "abc", "local", "/s", None, None, None, None, 1.0, True, False, None, (),
        containment=reports[:3],
    )  # fmt: skip
    lines = [
        x for x in render_status(few, colour=False, verbose=True).splitlines() if "no-orphan" in x
    ]
    assert lines[1] == f"no-orphan layers of agent-n0 (n0), agent-n1 (n1): {match}"
    alike = replace(view, containment=tuple(replace(c, summary=match) for c in reports))
    [line] = [
        x for x in render_status(alike, colour=False, verbose=True).splitlines() if "no-orphan" in x
    ]
    assert line == f"no-orphan layers: {match}"


def test_status_says_what_each_waiting_instance_waits_for_and_until_when() -> None:
    """Stagger turns with when they come (the soonest, the last, its clock time); held
    instances by what holds them, many of one kind as a range."""
    held = "for max_loading = 2 (lanes of lane loading fill it)"
    instances = (
        _lane("lane@0", "starting", since=90.0),
        _lane("lane@1", "waiting", since=90.0, reason="stagger 10s", until=103.0),
        _lane("lane@2", "waiting", since=90.0, reason="stagger 20s", until=113.0),
        *(_lane(f"lane@{n}", "waiting", reason=held) for n in range(3, 9)),
        _lane("worker", "waiting", reason="after endpoint (not ready yet)"),
    )
    view = StatusView(
        "abc", "local", "/s", None, None, None, None, 1.0, True, False, None, instances
    )
    lines = render_status(view, colour=False, now=100.0).splitlines()
    clock = time.strftime("%H:%M:%S", time.localtime(113.0))
    assert lines[-3:] == [
        f"waiting: lane@3 … lane@8 (6) {held}",
        "waiting: worker after endpoint (not ready yet)",
        f"waiting: lane@1, lane@2 for their stagger turns, in 3s … 13s (until {clock})",
    ]
    one = StatusView(
        "abc", "local", "/s", None, None, None, None, 1.0, True, False, None, instances[:2]
    )
    assert render_status(one, colour=False, now=100.0).splitlines()[-1] == (
        f"waiting: lane@1 for its stagger turn, in 3s (until "
        f"{time.strftime('%H:%M:%S', time.localtime(103.0))})"
    )
    assert "waiting:" not in render_status(
        replace(view, instances=instances[:1]), colour=False, now=100.0
    )
