"""The public surface of ``ddsup.units`` is pinned: additions and removals are deliberate."""

from __future__ import annotations

import ddsup.units

EXPECTED = {
    "SPECIFIERS",
    "SpecifierError",
    "Unit",
    "UnitSet",
    "UnitType",
    "configure_schema",
    "configure_verify",
    "json_schema",
    "load_unit_files",
    "load_unit_set",
    "parse_duration",
    "parse_signal",
    "parse_unit_set",
    "printable",
    "resolve_argv",
    "resolve_specifiers",
    "run_schema",
    "run_verify",
}


def test_exported_members() -> None:
    # its names are imported when first used (``ddsup._lazy``): the surface is its table
    assert set(ddsup.units._LAZY) == EXPECTED
    loaded = {name for name in vars(ddsup.units) if not name.startswith("_")}
    assert loaded - {"annotations", "TYPE_CHECKING", "lazy_names"} <= EXPECTED
    for name in EXPECTED:
        member = getattr(ddsup.units, name)
        module = getattr(member, "__module__", "ddsup.units._x")
        assert module.startswith("ddsup.units._"), name
