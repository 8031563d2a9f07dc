"""The endpoint's time series: the recorder's counts, the writer's file, a real endpoint."""

from __future__ import annotations

import json
import os
import stat
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from ddsup.endpoint import EndpointConfig, LaneInfo, LaneTable, serve_endpoint
from ddsup.endpoint import _timeseries as timeseries
from ddsup.endpoint._timeseries import (
    NO_SERIES,
    SeriesRecorder,
    SizeBudget,
    open_series,
    write_series,
)
from ddsup.fake_vllm import Behaviour, serve_fake_vllm
from ddsup.record import read_series
from ddsup.record._series import BUSY, BYTES, FAILED, FIELDS, FINISHED, OUTSTANDING, STARTED


class Clock:
    """Stands in for the recorder's monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(timeseries, "_monotonic", fake)
    return fake


def counts(line: dict[str, object], lane: str) -> list[float]:
    lanes, flat = line["lanes"], line["counts"]
    assert isinstance(lanes, list) and isinstance(flat, list)
    at = lanes.index(lane) * len(FIELDS)
    return flat[at : at + len(FIELDS)]


def test_busy_is_the_time_with_a_request_outstanding(clock: Clock, tmp_path: Path) -> None:
    recorder = SeriesRecorder(tmp_path)
    recorder.started("a")  # t=100: busy from here
    clock.now = 101.0
    recorder.started("a")  # a second one does not restart the busy period
    recorder.sent("a", 300)
    clock.now = 102.0
    recorder.finished("a", 200)
    clock.now = 103.5
    recorder.finished("a", 0)  # no whole response: failed; idle from 103.5
    clock.now = 106.0
    recorder.started("b")
    recorder.refused("m", 429)
    recorder.refused("m", 429)
    recorder.refused("", 503)
    clock.now = 107.0
    line = recorder.take(wall_offset=1000.0)
    assert line["lanes"] == ["a", "b"]
    assert counts(line, "a") == [2, 1, 1, 0, 3.5, 300]
    assert counts(line, "b") == [1, 0, 0, 1, 1.0, 0]  # still busy: counted up to the take
    assert line["refused"] == {"m": {"429": 2}, "": {"503": 1}}
    assert line["first"] == 1100.0  # the first request, in wall time
    assert "quiet" not in line  # b is still busy
    clock.now = 107.25
    recorder.finished("b", 503)  # a lane's 5xx relayed whole still counts as failed
    clock.now = 108.0
    line = recorder.take(wall_offset=1000.0)
    assert line["lanes"] == ["b"]  # a was idle all along: left out (and forgotten)
    assert counts(line, "b") == [0, 0, 1, 0, 0.25, 0]
    assert line["quiet"] == 1107.25 and "first" not in line and "refused" not in line
    assert not recorder.active()
    assert recorder.take(wall_offset=0.0) == {"lanes": [], "counts": []}


def test_no_state_dir_no_recorder() -> None:
    assert open_series({}) is NO_SERIES
    recorder = open_series({"DDSUP_STATE_DIR": "/somewhere"})
    assert isinstance(recorder, SeriesRecorder)
    assert recorder.directory == Path("/somewhere/series")
    NO_SERIES.started("a")  # the hooks exist and do nothing
    NO_SERIES.sent("a", 1)
    NO_SERIES.finished("a", 200)
    NO_SERIES.refused("m", 429)


async def test_the_writer_writes_lines_and_a_last_one(tmp_path: Path) -> None:
    recorder = SeriesRecorder(tmp_path / "series")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(write_series, recorder, interval=0.05))
        recorder.started("a")
        await trio.sleep(0.12)
        recorder.finished("a", 200)
        await trio.sleep(0.12)  # quiet: no line
        recorder.started("a")
        nursery.cancel_scope.cancel()
    path = tmp_path / "series" / f"endpoint-{os.getpid()}.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    header, *lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert header["series"] == "endpoint" and header["interval"] == 0.05
    assert header["fields"] == list(FIELDS)
    total = [sum(counts(line, "a")[i] for line in lines) for i in range(len(FIELDS))]
    assert total[STARTED] == 2 and total[FINISHED] == 1
    assert counts(lines[-1], "a")[OUTSTANDING] == 1  # the last line, written on cancel
    assert 0.1 <= total[BUSY] <= 0.2
    assert sum(line["d"] for line in lines) < 0.35  # the quiet stretch is in no line
    # a line spans the time since the previous tick (or the writer's start); one that
    # comes within half a millisecond of it (the last, on cancel; the first, when the
    # writer opened its file just before a boundary) says 0.000 s
    assert all(line["d"] >= 0 for line in lines) and sum(line["d"] for line in lines) > 0


async def test_the_size_budget_holds_lines_back(tmp_path: Path) -> None:
    recorder = SeriesRecorder(tmp_path / "series")
    budget = SizeBudget(burst=0, per_hour=1)  # one line, then nothing until the last
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(write_series, recorder, interval=0.02, budget=budget))
        for _ in range(10):
            recorder.started("a")
            recorder.finished("a", 200)
            await trio.sleep(0.02)
        nursery.cancel_scope.cancel()
    series = read_series(tmp_path)
    assert len(series.lines) == 2
    assert sum(line.total(FINISHED) for line in series.lines) == 10
    assert series.lines[-1].span >= 0.1  # one line covers the intervals held back


async def test_an_unwritable_state_dir_is_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "series").symlink_to(tmp_path / "elsewhere")
    recorder = SeriesRecorder(tmp_path / "series")
    with trio.fail_after(5):
        await write_series(recorder)  # returns at once
    assert "no time series: cannot write" in caplog.text
    assert list((tmp_path / "elsewhere").iterdir()) == []


async def test_a_real_endpoint_records_what_went_through_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through fake-vllm (in-process): answered, refused 429 and 404, bytes, busy time."""
    monkeypatch.setenv("DDSUP_STATE_DIR", str(tmp_path))
    config = EndpointConfig(port=0, max_queue_per_lane=1, retries=0)
    slow = Behaviour(model="m", ttft=0.3)
    async with trio.open_nursery() as nursery:
        lane_port = await nursery.start(partial(serve_fake_vllm, slow))
        table = LaneTable([LaneInfo("m@0", "m", f"http://127.0.0.1:{lane_port}")])
        port = await nursery.start(serve_endpoint, config, table)
        url = f"http://127.0.0.1:{port}/v1/completions"
        body = {"model": "m", "prompt": "hello", "max_tokens": 4}
        async with httpx.AsyncClient() as http:
            for _ in range(3):
                assert (await http.post(url, json=body)).status_code == 200
            statuses: list[int] = []

            async def post() -> None:
                statuses.append((await http.post(url, json=body)).status_code)

            async with trio.open_nursery() as burst:
                for _ in range(3):
                    burst.start_soon(post)
            unknown = await http.post(url, json={**body, "model": "nope"})
        assert sorted(statuses) == [200, 429, 429] and unknown.status_code == 404
        nursery.cancel_scope.cancel()
    series = read_series(tmp_path)
    assert series.files == 1 and series.problems == ()
    assert sum(line.total(STARTED) for line in series.lines) == 4
    assert sum(line.total(FINISHED) for line in series.lines) == 4
    assert sum(line.total(FAILED) for line in series.lines) == 0
    assert sum(line.total(BYTES) for line in series.lines) > 4 * 100
    refused: dict[str, int] = {}
    for line in series.lines:
        for model, by_status in line.refused.items():
            for status, n in by_status.items():
                refused[f"{model} {status}"] = refused.get(f"{model} {status}", 0) + n
    assert refused == {"m 429": 2, "(unknown) 404": 1}
    busy = sum(line.total(BUSY) for line in series.lines)
    assert 1.15 <= busy <= 1.6  # four requests of 0.3 s each, one at a time
    assert series.first_request is not None and series.last_request_end is not None
    assert series.last_request_end - series.first_request == pytest.approx(busy, abs=0.4)


async def test_the_file_stays_within_its_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clock: Clock
) -> None:
    """An hour of three busy lanes against a budget of 2 kB + 36 kB an hour."""
    monkeypatch.setattr(timeseries, "_wall", lambda: 1e9 + clock.now)
    recorder = SeriesRecorder(tmp_path / "series")
    fd = timeseries._open_file(recorder.directory)
    budget = SizeBudget(burst=2_000, per_hour=36_000)  # 10 bytes a second
    writer = timeseries._Writer(recorder, fd, budget)
    for _second in range(3600):
        for lane in ("llama@0", "llama@1", "llama@2"):
            recorder.started(lane)
            recorder.finished(lane, 200)
        clock.now += 1.0
        await writer.tick(final=False)
    await writer.tick(final=True)
    os.close(fd)
    size = sum(p.stat().st_size for p in recorder.directory.iterdir())
    longest = max(
        len(x) + 1
        for x in (recorder.directory / f"endpoint-{os.getpid()}.jsonl").read_text().splitlines()
    )
    assert size <= 2_000 + 36_000 + 2 * longest
    series = read_series(tmp_path)
    assert sum(line.total(FINISHED) for line in series.lines) == 3 * 3600  # nothing lost
    assert sum(line.span for line in series.lines) == pytest.approx(3600, abs=1.5)
    assert max(line.span for line in series.lines) > 10  # later lines cover many seconds


def write_file(directory: Path, pid: int, lines: list[dict[str, object]]) -> None:
    """A series file as an endpoint process writes it (times are exact binary fractions)."""
    directory.mkdir(exist_ok=True)
    header = {"series": "endpoint", "format": 1, "pid": pid, "interval": 1.0}
    text = "".join(json.dumps(x) + "\n" for x in [header, *lines])
    (directory / f"endpoint-{pid}.jsonl").write_text(text)


def test_lines_of_several_workers_over_one_second_are_combined(tmp_path: Path) -> None:
    """Counts add up; busy is combined, not added (two workers busy at once: not 2 s)."""
    write_file(
        tmp_path / "series",
        1,
        [
            {"t": 101.00390625, "d": 1.0, "lanes": ["a", "b"], "counts": [3, 3, 0, 0, 1.0, 30] * 2},
            {"t": 102.00390625, "d": 1.0, "lanes": ["a"], "counts": [1, 1, 0, 0, 0.5, 10]},
            {
                "t": 102.50390625,
                "d": 0.5,
                "lanes": ["a"],
                "counts": [1, 0, 1, 0, 0.1, 0],
                "quiet": 102.4,
            },
        ],
    )
    write_file(
        tmp_path / "series",
        2,
        [
            {"t": 101.0078125, "d": 1.0, "lanes": ["a", "b"], "counts": [2, 2, 0, 1, 1.0, 20] * 2},
            {"t": 102.0078125, "d": 1.0, "lanes": ["b", "a"], "counts": [1, 1, 0, 0, 0.5, 7] * 2},
        ],
    )
    series = read_series(tmp_path)
    assert series.files == 2 and series.problems == ()
    first, second, last = series.lines
    assert (first.end, first.span) == (101.00390625, 1.0)  # the earliest end and start
    assert first.lanes == ["a", "b"]
    assert first.counts == [5, 5, 0, 1, 1.0, 50] * 2  # both busy all along: busy 1 s, not 2
    assert second.lanes == ["a", "b"]
    a, b = second.counts[:6], second.counts[6:]
    assert a[:4] == [2, 2, 0, 0] and a[BYTES] == 17
    assert a[BUSY] == pytest.approx(0.75, abs=0.01)  # 1 - (1 - 0.5)(1 - 0.5): max ≤ it ≤ sum
    assert b[:4] == [1, 1, 0, 0] and b[BUSY] == pytest.approx(0.5, abs=0.01)  # one worker only
    assert second.quiet is None
    assert last.counts == [1, 0, 1, 0, 0.1, 0] and last.quiet == 102.4  # same second, same file
    for samples in series.by_lane.values():
        assert samples.disjoint  # combined lines do not overlap: the fast reader applies


def test_one_file_reads_as_written(tmp_path: Path) -> None:
    lines = [
        {"t": 101.0, "d": 1.0, "lanes": ["a"], "counts": [1, 1, 0, 0, 0.2, 5]},
        {"t": 101.3, "d": 0.3, "lanes": ["a"], "counts": [1, 1, 0, 0, 0.2, 5]},
    ]
    write_file(tmp_path / "series", 1, lines)
    series = read_series(tmp_path)
    assert [line.counts for line in series.lines] == [x["counts"] for x in lines]


def test_the_lanes_cache_counters_are_recorded_and_read_back(tmp_path: Path) -> None:
    """What the lanes' prefix-cache counters added, per lane, in the line of its span;
    several files' lines of one second add up; a malformed record is named and skipped."""
    recorder = SeriesRecorder(tmp_path)
    recorder.cached("a", 834, 512)
    recorder.cached("a", 100.0, 80.0)
    recorder.cached("b", 50, 0)
    assert recorder.active()  # nothing went through a lane, yet there is a line
    line = recorder.take(wall_offset=0.0)
    assert line["prefix_cache"] == {"a": [934, 592], "b": [50, 0]}
    assert line["lanes"] == [] and not recorder.active()
    assert "prefix_cache" not in recorder.take(wall_offset=0.0)
    write_file(
        tmp_path / "series",
        1,
        [
            {"t": 101.0, "d": 1.0, "lanes": [], "counts": [], "prefix_cache": {"a": [934, 592]}},
            {"t": 102.0, "d": 1.0, "lanes": ["a"], "counts": [1, 1, 0, 0, 0.5, 9]},
            {"t": 103.0, "d": 1.0, "lanes": [], "counts": [], "prefix_cache": ["a", 1, 2]},
        ],
    )
    write_file(
        tmp_path / "series",
        2,
        [{"t": 101.0, "d": 1.0, "lanes": ["a"], "counts": [2, 2, 0, 0, 1.0, 4]}],
    )
    series = read_series(tmp_path)
    first = series.lines[0]
    assert first.lanes == ["a"] and first.counts == [2, 2, 0, 0, 1.0, 4]
    assert first.prefix_cache == {"a": (934, 592)}
    assert series.prefix_cache() == (934, 592)
    assert len(series.problems) == 1 and "endpoint-1.jsonl:4" in series.problems[0]
