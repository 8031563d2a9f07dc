"""``ddsup report``: the page's content, its safety, its size at 1,024 lanes, the command."""

from __future__ import annotations

import re
import stat
from pathlib import Path

import pytest
from report_helpers import (
    T0,
    Synthetic,
    lane,
    load_bench,
    plan,
    run_event,
    tags,
    two_lane_run,
    unit,
    write_state,
)

from ddsup._cli import main
from ddsup.ops.report import Rows, build_report, render_report
from ddsup.record import load_run
from ddsup.record._efficiency import DOWN

EVIL = '"><script>alert(1)</script><img src=x onerror=alert(2)>&amp;\x07'


def page_of(state: Path, now: float = T0 + 10_000, rows: Rows = Rows.AUTO) -> str:
    return render_report(build_report(load_run(state), now, rows))


def test_the_page_shows_the_run(tmp_path: Path) -> None:
    page = page_of(write_state(tmp_path / "run", two_lane_run()))
    assert "ok, exit 0 (worker: exit status 0)" in page
    assert (
        "GPU time 13 min (4 GPUs × 3m20s): loading 17 %, serving 4 %, idle 45 %, down 9 %"
        f" ({DOWN}), unused 25 %"
    ) in page
    svgs = {s.get("class") for s in tags(page, "svg")}
    assert {"timeline", "rates", "share"} <= svgs
    timeline = page[
        page.index('<svg class="timeline"') : page.index(
            "</svg>", page.index('<svg class="timeline"')
        )
    ]
    for name in ("a@0", "a@1", "endpoint", "n0"):
        assert f">{name}<" in timeline
    assert timeline.count('class="m-restart"') == 1
    assert timeline.count('class="m-exit"') == 1  # the crash; ddsup's own stops are no mark
    assert 'class="s-serving"' in timeline and 'class="s-starting"' in timeline
    assert "a@0 · restart at" in timeline and "exit status 1; restart in 2s" in timeline
    assert "3 refused with 429, 1 other refusal, 1 failed lane attempt" in page
    assert "start → first request</dt><dd>50 s" in page
    assert "<title>a@0 · loading (starting)" in timeline  # hover text on every bar
    assert "prefix cache</dt><dd>no counters read from the lanes" in page


def test_the_page_shows_the_lanes_prefix_cache_hit_rate(tmp_path: Path) -> None:
    run = two_lane_run()
    assert run.series is not None
    run.series[1]["prefix_cache"] = {"a@0": [3000, 1500]}
    run.series[-1]["prefix_cache"] = {"a@0": [1000, 700], "a@1": [200, 0]}
    page = page_of(write_state(tmp_path / "run", run))
    assert (
        "prefix cache</dt><dd>52% of 4,200 prompt tokens found in the lanes&#x27; caches "
        "(2,000 computed)" in page
    )


def test_the_page_needs_no_script_and_no_network(tmp_path: Path) -> None:
    page = page_of(write_state(tmp_path / "run", two_lane_run()))
    assert not list(tags(page, "script")) and not list(tags(page, "link"))
    assert not list(tags(page, "img")) and not list(tags(page, "iframe"))
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "url(" not in page and "@import" not in page
    meta = [m for m in tags(page, "meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert meta and meta[0]["content"] is not None and "default-src 'none'" in meta[0]["content"]


def test_strings_from_the_run_cannot_inject_markup(tmp_path: Path) -> None:
    bad = f"x{EVIL}@0"
    events = [
        run_event(T0, "starting"),
        unit(T0 + 1, bad, "inactive", "starting", EVIL),
        unit(T0 + 2, bad, "starting", "ready", EVIL),
        {
            "time": T0 + 3,
            "event": "exit",
            "instance": bad,
            "pid": 9,
            "exit": {"signal": EVIL},
            "reason": EVIL,
        },
        unit(T0 + 3, bad, "ready", "failed", EVIL, exit={"signal": EVIL}),
        run_event(
            T0 + 4, "finished", status=EVIL, exit_code=70, cause={"unit": bad, "reason": EVIL}
        ),
    ]
    nodes = {EVIL: [0]}
    run = Synthetic(plan(nodes, [lane(bad, EVIL, [0])]), events, None)
    state = write_state(tmp_path / "run", run, invocation=EVIL)
    page = page_of(state)
    for element in ("script", "img"):
        assert not list(tags(page, element)), element
    assert not any(
        key.startswith("on")
        for tag in ("rect", "text", "svg", "g", "title", "td")
        for a in tags(page, tag)
        for key in a
    )
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&amp;amp;" in page  # even an entity is shown as written
    assert "\x07" not in page and "\ufffd" in page


def test_many_lanes_fold_into_one_row_per_node(tmp_path: Path) -> None:
    bench = load_bench("report_scale")
    state = tmp_path / "run"
    bench.write_synthetic_run(state, lanes=1024, seconds=400.0)
    page = page_of(state)
    timeline = page[page.index('<svg class="timeline"') :]
    timeline = timeline[: timeline.index("</svg>")]
    assert timeline.count(">8 lanes, 8 GPUs<") == 128  # one aggregate row per node
    assert ">llama@17<" not in timeline  # no row per lane
    assert "<details><summary>By lane (1024)</summary>" in page  # folded, not gone
    assert len(page.encode()) < 5_000_000
    per_instance = page_of(state, rows=Rows.INSTANCE)
    assert ">llama@17<" in per_instance


def test_a_live_run_is_shown_up_to_now(tmp_path: Path) -> None:
    run = two_lane_run()
    live = Synthetic(run.plan, [e for e in run.events if e["time"] <= T0 + 150], run.series)
    page = page_of(write_state(tmp_path / "run", live), now=T0 + 160)
    assert "no result yet: live (or its controller was killed)" in page
    assert "shown up to" in page


def test_the_command_writes_report_html_into_the_state_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = write_state(tmp_path / "run", two_lane_run())
    assert main(["report", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert out == (
        "GPU time 13 min (4 GPUs × 3m20s): loading 17 %, serving 4 %, idle 45 %, down 9 %"
        f" ({DOWN}), unused 25 %\n"
        f"report: {state / 'report.html'}\n"
    )
    report = state / "report.html"
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert report.read_text().startswith("<!DOCTYPE html>")
    target = tmp_path / "elsewhere.html"
    assert main(["report", "--state-dir", str(state), "-o", str(target)]) == 0
    footer = re.compile(r"report written [^·]*·")
    assert footer.sub("", target.read_text()) == footer.sub("", report.read_text())
    capsys.readouterr()
    assert main(["report", "--state-dir", str(state), "-o", "-"]) == 0
    assert capsys.readouterr().out.startswith("<!DOCTYPE html>")


def test_the_command_explains_a_wrong_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--state-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err == f"ddsup: error: {tmp_path} is not a ddsup state directory (no run.json)\n"
    state = write_state(tmp_path / "run", two_lane_run())
    (state / "run.json").write_text("{not json")
    assert main(["report", "--state-dir", str(state)]) == 1
    assert "is not a ddsup state directory (no readable run.json)" in capsys.readouterr().err
    assert (
        main(
            [
                "report",
                "--state-dir",
                str(write_state(tmp_path / "ok", two_lane_run())),
                "-o",
                str(tmp_path / "missing" / "r.html"),
            ]
        )
        == 1
    )
    assert "ddsup: error: cannot write" in capsys.readouterr().err


def test_a_run_that_ended_before_its_plan(tmp_path: Path) -> None:
    cause = {"reason": "lane@.toml:3:1: error: unknown key 'tpye'"}
    events = [
        run_event(T0, "starting"),
        run_event(T0 + 0.2, "finished", status="invalid_units", exit_code=65, cause=cause),
    ]
    result = {"status": "invalid_units", "exit_code": 65, "cause": cause}
    page = page_of(write_state(tmp_path / "run", Synthetic(None, events, None, result)))
    assert "invalid_units, exit 65 (lane@.toml:3:1: error: unknown key &#x27;tpye&#x27;)" in page
    assert "GPU time: none (the run ended before it had a plan)" in page
    assert "no plan: the run ended before it placed any instance" in page
