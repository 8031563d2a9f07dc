"""The public surface of ``ddsup.units`` is pinned: additions and removals are deliberate."""

from __future__ import annotations

import ddsup.units

EXPECTED = {
    "BusyGpus",
    "EndpointSection",
    "JOB_FILE",
    "JobSettings",
    "LaneSection",
    "OnFailure",
    "Placement",
    "ProbeKind",
    "ReadySection",
    "Routing",
    "Restart",
    "SPECIFIERS",
    "ServiceSection",
    "SpecifierError",
    "Unit",
    "UnitSet",
    "UnitType",
    "configure_schema",
    "configure_verify",
    "format_duration",
    "format_size",
    "json_schema",
    "load_job_file",
    "load_unit_files",
    "load_unit_set",
    "parse_duration",
    "parse_job_name",
    "parse_signal",
    "parse_size",
    "parse_slurm_time",
    "parse_unit_set",
    "printable",
    "resolve_argv",
    "resolve_specifiers",
    "run_schema",
    "run_verify",
    "served_names",
    "vllm_command_span",
}

LAZY_MACHINERY = {"TYPE_CHECKING", "annotations", "lazy_names"}


def test_exported_members() -> None:
    # its names are imported when first used (PEP 562): the lazy table, plus whatever
    # the package binds itself, less the machinery of the laziness
    bound = {name for name in vars(ddsup.units) if not name.startswith("_")}
    exported = (bound | set(ddsup.units._LAZY)) - LAZY_MACHINERY
    assert exported == EXPECTED
    for name in EXPECTED:
        member = getattr(ddsup.units, name)
        module = getattr(member, "__module__", "ddsup.units._x")
        assert module.startswith("ddsup.units._"), name
