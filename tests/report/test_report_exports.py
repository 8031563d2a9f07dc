"""The public surfaces the report adds: ``ddsup.ops.report``, and what ``ddsup.record`` reads back."""

from __future__ import annotations

from types import ModuleType

import pytest

import ddsup.ops.report
import ddsup.record


def _public(module: ModuleType) -> set[str]:
    return {name for name in vars(module) if not name.startswith("_")} - {"annotations"}


def test_report_exports() -> None:
    assert _public(ddsup.ops.report) == {
        "Report",
        "Rows",
        "build_report",
        "configure_report",
        "render_report",
        "run_report",
    }


@pytest.mark.parametrize(
    "name",
    [
        "Efficiency",
        "RunFiles",
        "Series",
        "efficiency",
        "efficiency_json",
        "efficiency_line",
        "load_run",
        "read_series",
    ],
)
def test_record_exports_what_tools_read_a_run_with(name: str) -> None:
    member = getattr(ddsup.record, name)
    assert member.__module__.startswith("ddsup.record._")
