"""Shared by the report tests: synthetic state directories, headless Chromium, PNG pixels.

Synthetic runs are written in the real file formats (``events.jsonl`` objects as the
controller writes them, series lines as the endpoint writes them), so the readers are
tested on what they will meet. Chromium is Debian's ``chromium`` package; without it
the browser tests skip, except in CI (``CI=true``), where a skip is a failure
(``support.ci``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ddsup.record._series import header_line

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_000.0  # synthetic runs start here (Unix seconds; only differences matter)


def load_bench(name: str) -> ModuleType:
    """A ``bench/NAME.py`` module (its generators are shared with the tests)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module


# --- synthetic state directories ------------------------------------------------------------
def lane(instance: str, node: str, gpus: Sequence[int], **extra: Any) -> dict[str, Any]:
    rank = 1 if ":" in instance else 0
    return {
        "instance": instance,
        "unit": instance.split("@")[0] + "@",
        "type": "lane",
        "node": node,
        "gpus": list(gpus),
        "port": 8000 + gpus[0],
        "rank": rank,
        **extra,
    }


def client(name: str, node: str) -> dict[str, Any]:
    return {"instance": name, "unit": name, "type": name, "node": node, "gpus": [], "port": None}


def plan(nodes: Mapping[str, Sequence[int]], instances: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "format": 1,
        "nodes": [{"name": n, "address": "127.0.0.1", "gpus": list(g)} for n, g in nodes.items()],
        "instances": list(instances),
    }


def unit(
    t: float, instance: str, old: str, new: str, reason: str = "", **extra: Any
) -> dict[str, Any]:
    return {
        "time": t,
        "event": "unit",
        "instance": instance,
        "node": "n0",
        "from": old,
        "to": new,
        "reason": reason or new,
        **extra,
    }


def run_event(t: float, reason: str, **extra: Any) -> dict[str, Any]:
    return {"time": t, "event": "run", "reason": reason, **extra}


def series_line(
    end: float, span: float, lanes: Mapping[str, Sequence[float]], **extra: Any
) -> dict[str, Any]:
    """A line as the endpoint writes it; ``lanes`` maps a lane to its six counts."""
    counts = [value for values in lanes.values() for value in values]
    return {"t": end, "d": span, "lanes": list(lanes), "counts": counts, **extra}


@dataclass(frozen=True)
class Synthetic:
    plan: dict[str, Any] | None
    events: list[dict[str, Any]]
    series: list[dict[str, Any]] | None  # None: no series file at all
    result: dict[str, Any] | None = None


def write_state(path: Path, run: Synthetic, *, invocation: str = "synthetic-run") -> Path:
    """Write ``run`` as a state directory (the layout ``ddsup start`` leaves)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    meta = {"invocation_id": invocation, "launcher": "local", "pid": 1, "started_at": T0}
    (path / "run.json").write_text(json.dumps({**meta, "unit_dir": str(path / "no-units")}))
    if run.plan is not None:
        (path / "plan.json").write_text(json.dumps(run.plan))
    (path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run.events))
    if run.result is not None:
        (path / "result.json").write_text(json.dumps(run.result))
    if run.series is not None:
        (path / "series").mkdir(mode=0o700, exist_ok=True)
        lines = [header_line(1, 1.0, T0)] + [json.dumps(line) + "\n" for line in run.series]
        (path / "series" / "endpoint-1.jsonl").write_text("".join(lines))
    return path


OK_RESULT = {"status": "ok", "exit_code": 0, "cause": {"unit": "worker", "reason": "exit status 0"}}


def two_lane_run() -> Synthetic:
    """Known timings (see tests/report/test_report_efficiency.py for the arithmetic).

    Node ``n0`` has GPUs 0–3. ``a@0`` holds GPUs 0,1: starts at +10, ready at +40, crashes
    at +100, restarts at +102.5, ready at +132.5, stops at +190. ``a@1`` holds GPU 2: waits
    for its stagger until +15, ready at +35, stops at +190. GPU 3 is unused. The run
    stops at +190 and finishes at +200.
    """
    instances = [lane("a@0", "n0", [0, 1]), lane("a@1", "n0", [2]), client("endpoint", "n0")]
    events = [
        run_event(T0, "starting", invocation_id="synthetic-run"),
        unit(T0 + 10, "a@0", "inactive", "starting", "starting"),
        unit(T0 + 10, "a@1", "inactive", "waiting", "stagger 5s"),
        unit(T0 + 15, "a@1", "waiting", "starting", "starting"),
        unit(T0 + 35, "a@1", "starting", "ready", "probe passed"),
        unit(T0 + 40, "a@0", "starting", "ready", "probe passed"),
        unit(T0 + 41, "endpoint", "inactive", "starting"),
        unit(T0 + 42, "endpoint", "starting", "ready", "probe passed"),
        {
            "time": T0 + 100,
            "event": "exit",
            "instance": "a@0",
            "node": "n0",
            "pid": 7,
            "exit": {"code": 1},
            "reason": "exit status 1",
        },
        unit(
            T0 + 100.5,
            "a@0",
            "ready",
            "restarting",
            "exit status 1; restart in 2s",
            restarts=1,
            exit={"code": 1},
        ),
        unit(T0 + 102.5, "a@0", "restarting", "starting", "starting", restarts=1),
        unit(T0 + 132.5, "a@0", "starting", "ready", "probe passed", restarts=1),
        run_event(T0 + 190, "stopping"),
        unit(T0 + 190, "endpoint", "ready", "stopping", "stop requested"),
        unit(T0 + 190, "a@0", "ready", "stopping", "stop requested", restarts=1),
        unit(T0 + 190, "a@1", "ready", "stopping", "stop requested"),
        unit(T0 + 191, "endpoint", "stopping", "exited", "stopped", exit={"code": 0}),
        unit(T0 + 192, "a@1", "stopping", "exited", "stopped", exit={"code": 0}),
        unit(T0 + 195, "a@0", "stopping", "exited", "stopped", restarts=1, exit={"code": 0}),
        run_event(T0 + 200, "finished", status="ok", exit_code=0, cause=OK_RESULT["cause"]),
    ]
    busy = [1, 1, 0, 0, 1.0, 100]
    series = [series_line(T0 + 51 + i, 1.0, {"a@0": busy}) for i in range(10)]
    series[0]["first"] = T0 + 50.0
    series.insert(0, series_line(T0 + 40, 10.0, {"a@1": [4, 4, 0, 0, 8.0, 400]}))
    series.append(
        series_line(
            T0 + 101,
            2.0,
            {"a@0": [2, 1, 1, 0, 2.0, 50], "a@1": [1, 1, 0, 0, 0.5, 9]},
            refused={"a": {"429": 3, "503": 1}},
            quiet=T0 + 100.9,
        )
    )
    return Synthetic(plan({"n0": [0, 1, 2, 3]}, instances), events, series, OK_RESULT)


# --- headless Chromium ------------------------------------------------------------------------
def chromium() -> str:
    """Debian's chromium; skip without it (a failure in CI, where .ci/run installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium; .ci/install-tools)")
    return found


def run_chromium(page: Path, profile: Path, *args: str, size: tuple[int, int]) -> str:
    """Run headless Chromium on ``page`` (no network, no sandbox: the tests run as root)."""
    argv = [
        chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-crash-reporter",
        "--disable-breakpad",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--user-data-dir={profile}",
        f"--window-size={size[0]},{size[1]}",
        *args,
        page.as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@dataclass(frozen=True)
class Image:
    """An 8-bit RGB(A) PNG, decoded: ``pixel(x, y)`` is ``(r, g, b)``."""

    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        row, at = self.rows[y], x * self.channels
        return row[at], row[at + 1], row[at + 2]

    def count(self, colour: tuple[int, int, int]) -> int:
        """Pixels of exactly ``colour`` (solid SVG fills render exactly)."""
        pattern, found = bytes(colour), 0
        for row in self.rows:
            at = row.find(pattern)
            while at >= 0:
                if at % self.channels == 0:  # a whole pixel, not bytes across two
                    found += 1
                at = row.find(pattern, at + 1)
        return found


def read_png(path: Path) -> Image:
    """Decode the PNGs Chromium writes (8-bit RGB or RGBA, not interlaced)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat, header = 8, [], b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
        at += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    channels = 3 if colour == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        _unfilter(kind, line, previous, channels)
        rows.append(bytes(line))
        previous = line
    return Image(width, height, channels, rows)


def _unfilter(kind: int, line: bytearray, previous: bytearray, bpp: int) -> None:
    for i in range(len(line)):
        left = line[i - bpp] if i >= bpp else 0
        up = previous[i]
        corner = previous[i - bpp] if i >= bpp else 0
        if kind == 1:
            line[i] = (line[i] + left) & 0xFF
        elif kind == 2:
            line[i] = (line[i] + up) & 0xFF
        elif kind == 3:
            line[i] = (line[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            line[i] = (line[i] + predictor) & 0xFF


def hex_colour(text: str) -> tuple[int, int, int]:
    text = text.lstrip("#")
    return int(text[0:2], 16), int(text[2:4], 16), int(text[4:6], 16)


def tags(html_text: str, name: str) -> Iterable[dict[str, str | None]]:
    """Attributes of every ``<name …>`` element (Python's HTML parser, as a browser would)."""
    found: list[dict[str, str | None]] = []

    class Finder(HTMLParser):
        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == name:
                found.append(dict(attrs))

    Finder().feed(html_text)
    return found
