"""The report in a real browser: headless Chromium draws the timeline where it should be.

Two checks. The whole page: Chromium's DOM after loading has the charts' SVG elements
and no script, and its screenshot holds the state colours in quantity. The timeline
alone, at the top-left of an empty page: the pixel in the middle of each known segment
(loading, serving, idle, restarting, waiting) has that segment's colour, so the picture
is right, not merely present.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from report_helpers import T0, hex_colour, read_png, run_chromium, tags, two_lane_run, write_state

from ddsup.ops.report import Rows, build_report, render_report
from ddsup.ops.report._page import CSS
from ddsup.ops.report._timeline_svg import GAP, NODE_H, ROW_H, TOP, axis_for, timeline_svg
from ddsup.record import load_run

COLOURS = {
    name: hex_colour(value)
    for name, value in (
        ("loading", "#e69f00"),
        ("ready", "#a6cfee"),
        ("serving", "#0b5fa5"),
        ("restarting", "#cc79a7"),
        ("waiting", "#e6e6e6"),
        ("white", "#ffffff"),
    )
}


@pytest.fixture
def report(tmp_path: Path) -> object:
    return build_report(
        load_run(write_state(tmp_path / "run", two_lane_run())), T0 + 1e4, Rows.AUTO
    )


def test_the_browser_loads_the_charts_and_no_script(tmp_path: Path, report: object) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_report(report))  # type: ignore[arg-type]
    dom = run_chromium(page, tmp_path / "profile", "--dump-dom", size=(1200, 1600))
    classes = [s.get("class") for s in tags(dom, "svg")]
    assert "timeline" in classes and "rates" in classes
    timeline = dom[dom.index('<svg class="timeline"') :]
    timeline = timeline[: timeline.index("</svg>")]
    assert timeline.count("<rect") >= 10 and timeline.count("<title>") >= 10
    assert not list(tags(dom, "script"))

    shot = tmp_path / "page.png"
    run_chromium(page, tmp_path / "profile", f"--screenshot={shot}", size=(1200, 1600))
    image = read_png(shot)
    assert (image.width, image.height) == (1200, 1600)
    assert image.count(COLOURS["loading"]) > 3000  # share bar, table bars and the timeline
    assert image.count(COLOURS["serving"]) > 500
    assert image.count(COLOURS["restarting"]) > 50  # only the timeline has restarts


def test_the_timeline_is_drawn_where_the_times_are(tmp_path: Path, report: object) -> None:
    svg = timeline_svg(report)  # type: ignore[arg-type]
    page = tmp_path / "timeline.html"
    page.write_text(
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}</style></head>'
        f'<body style="margin:0;padding:0">{svg}</body></html>'
    )
    shot = tmp_path / "timeline.png"
    run_chromium(page, tmp_path / "profile", f"--screenshot={shot}", size=(1200, 200))
    image = read_png(shot)
    axis = axis_for(report)  # type: ignore[arg-type]
    a0 = int(TOP + NODE_H + ROW_H / 2)  # first row under the node's header
    a1 = int(a0 + ROW_H + GAP)

    def at(seconds: float, y: int) -> tuple[int, int, int]:
        return image.pixel(int(axis.x(T0 + seconds)), y)

    assert at(5, a0) == COLOURS["white"]  # not started yet
    assert at(25, a0) == COLOURS["loading"]
    assert at(55, a0) == COLOURS["serving"]  # a request outstanding all of 50–60 s
    assert at(80, a0) == COLOURS["ready"]  # ready, idle
    assert at(101.5, a0) == COLOURS["restarting"]
    assert at(115, a0) == COLOURS["loading"]  # loading again after the restart
    assert at(12, a1) == COLOURS["waiting"]  # a@1 waits for its stagger
    assert at(25, a1) == COLOURS["loading"]
    assert at(150, a1) == COLOURS["ready"]
