"""``ddsup report``: a run's report, one self-contained HTML file.

Bottom up: ``_svg`` (escaping, the time axis, shapes), ``_report_data`` (what the page shows,
from the run's files and :mod:`ddsup.record._efficiency`), ``_timeline_svg`` and
``_rate_svg`` (the two charts on one time axis), ``_sections`` (outcome, efficiency,
plan and notes as HTML), ``_page`` (CSS and assembly), ``_command`` (the command line).
"""

from __future__ import annotations

from ddsup.ops.report._command import configure_report as configure_report
from ddsup.ops.report._command import run_report as run_report
from ddsup.ops.report._page import render_report as render_report
from ddsup.ops.report._report_data import Report as Report
from ddsup.ops.report._report_data import Rows as Rows
from ddsup.ops.report._report_data import build_report as build_report
