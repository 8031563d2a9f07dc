"""Nothing a unit file contains may raise anything but UnitFileError (never a traceback)."""

from __future__ import annotations

import random
import string
import tempfile
from collections.abc import Iterator
from pathlib import Path

import fuzz_units as fuzz
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddsup.units._schema import SECTIONS

KEYS = [key.name for section in SECTIONS for key in section.keys]
NAMES = [section.name for section in SECTIONS]

scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["auto", "{port}", "{nope}", "{{", "}", "5s", "SIGTERM", "100%", "each-node"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=6,
)
keys = st.one_of(st.sampled_from([*KEYS, "typo"]), st.text(max_size=10))
sections = st.dictionaries(keys, values, max_size=5)
documents = st.dictionaries(
    st.one_of(st.sampled_from(NAMES), st.text(string.ascii_letters, max_size=8)),
    st.one_of(sections, values),
    max_size=4,
)
file_names = st.sampled_from(["lane@", "endpoint", "worker", "svc", "svc@", "a b", "lane"])


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(files=st.dictionaries(file_names, documents, min_size=1, max_size=3))
def test_random_documents(scratch: Path, files: dict[str, dict[str, object]]) -> None:
    data = {f"{name}.toml": fuzz.toml_document(doc).encode() for name, doc in files.items()}
    outcome = fuzz.check_files(data)
    assert outcome in ("ok", "rejected"), outcome


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(seed=st.integers(min_value=0, max_value=2**32), rounds=st.integers(1, 6))
def test_mutated_examples(scratch: Path, seed: int, rounds: int) -> None:
    rng = random.Random(seed)
    files = {}
    for example in fuzz.EXAMPLES[:3]:
        data = example.read_bytes()
        for _ in range(rounds):
            data = fuzz.mutate(rng, data)
        files[example.name] = data
    outcome = fuzz.check_directory(scratch, files)
    assert outcome in ("ok", "rejected"), outcome


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_arbitrary_bytes(scratch: Path, data: bytes) -> None:
    outcome = fuzz.check_directory(scratch, {"worker.toml": data})
    assert outcome in ("ok", "rejected"), outcome


def test_two_thousand_random_directories() -> None:
    outcomes = [outcome for _files, outcome in fuzz.run(2000, seed=20261202)]
    failures = [o for o in outcomes if o not in ("ok", "rejected")]
    assert not failures, failures[0]
    assert outcomes.count("ok") > 0  # the generator also produces valid sets
    assert outcomes.count("rejected") > 1000
