"""One table of keys drives validation, the JSON Schema, the model's defaults and the docs."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped,unused-ignore]
import pytest

from ddsup.units import json_schema
from ddsup.units._model import (
    EndpointSection,
    LaneSection,
    ReadySection,
    ServiceSection,
    SlurmSection,
    Unit,
)
from ddsup.units._schema import SECTIONS

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "units" / "examples").glob("*/*.toml"))
MODELS = {
    "unit": Unit,
    "service": ServiceSection,
    "ready": ReadySection,
    "lane": LaneSection,
    "slurm": SlurmSection,
    "endpoint": EndpointSection,
}


def _field_default(model: type, name: str) -> object:
    field = next(f for f in dataclasses.fields(model) if f.name == name)
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return field.default


@pytest.mark.parametrize(
    ("section", "key"),
    [(s, k) for s in SECTIONS for k in s.keys if k.default is not None],
    ids=lambda x: getattr(x, "name", ""),
)
def test_documented_default_is_the_model_default(section: object, key: object) -> None:
    from ddsup.units._schema import KeySpec, SectionSpec

    assert isinstance(section, SectionSpec)
    assert isinstance(key, KeySpec)
    converted = key.kind.convert(key.default)
    assert converted == _field_default(MODELS[section.name], key.name)


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_examples_validate_against_the_schema(path: Path) -> None:
    document = tomllib.loads(path.read_text())
    jsonschema.Draft202012Validator(json_schema()).validate(document)


@pytest.mark.parametrize(
    "document",
    [
        {"unit": {"type": "worker"}, "service": {"exec": "python3 x.py"}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"], "restat": "no"}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"]}, "lane": {"model": "m"}},
        {"unit": {"type": "lane"}, "service": {"exec": ["x"]}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"], "timeout_stop": "30"}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"]}, "ready": {"interval": "1s"}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"], "exec_follower": ["y"]}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x\u0000"]}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"], "environment": {"X": "\u0000"}}},
        {"unit": {"type": "worker"}, "service": {"exec": ["x"], "working_directory": "\u0000"}},
    ],
)
def test_schema_rejects_what_verify_rejects(document: dict[str, object]) -> None:
    validator = jsonschema.Draft202012Validator(json_schema())
    assert list(validator.iter_errors(document))


def test_cli_prints_the_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ddsup", "schema"], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == json_schema()


def test_docs_cover_every_section_and_key() -> None:
    docs = (ROOT / "docs" / "units.md").read_text()
    for section in SECTIONS:
        assert f"## [{section.name}]" in docs
        for key in section.keys:
            assert f"### `{key.name}`" in docs, f"docs/units.md lacks [{section.name}] {key.name}"
