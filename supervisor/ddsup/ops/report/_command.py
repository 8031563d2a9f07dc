"""``ddsup report``: write a run's report, one self-contained HTML file.

Reads only the state directory, so it works for a finished run, for a live one (its
last states reach "now"), and from any machine that mounts the directory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ddsup._errors import RunStateError
from ddsup.ops._run_handle import add_state_dir, find_state
from ddsup.ops.report._page import render_report
from ddsup.ops.report._report_data import Rows, build_report
from ddsup.record import load_run, summary_line, write_private


def configure_report(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write one self-contained HTML file (inline SVG and CSS, no script, no network) "
        "that shows where the run's GPU time went: timeline by node, requests per "
        "second, allocation efficiency, outcome and plan."
    )
    add_state_dir(parser)
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="where to write it (default: report.html in the state directory; - for stdout)",
    )
    parser.add_argument(
        "--rows",
        choices=[r.value for r in Rows],
        default=Rows.AUTO.value,
        help="timeline rows: per instance, per node, or auto (per node above "
        "128 lanes; the default)",
    )


def run_report(args: argparse.Namespace) -> int:
    state = find_state(args)
    files = load_run(state.path)
    report = build_report(files, time.time(), Rows(args.rows))
    page = render_report(report)
    if args.output is not None and str(args.output) == "-":
        sys.stdout.write(page)
        return 0
    target = args.output if args.output is not None else state.path / "report.html"
    _write(target, page)
    print(f"{summary_line(report.efficiency)}\nreport: {target}")
    return 0


def _write(target: Path, page: str) -> None:
    """Atomically, owner-only (it names the run's units and reasons), no symlink followed."""
    try:
        write_private(target, page)
    except OSError as err:
        raise RunStateError(f"cannot write {target}: {err.strerror or err}") from err
