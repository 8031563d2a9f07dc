"""``scripts/gen-vllm-flags``: how it merges an installed vLLM's flags into the table.

The script runs under vLLM's Python (``tests/vllm/test_vllm_flags.py`` runs it there);
its merge and rendering import nothing of vLLM, so they are checked here on made-up
parsers: a flag is added, a spelling is added, nothing is ever dropped, and an arity
that changed is an error, not an overwrite.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from ddsup.fake_vllm._vllm_flags import VLLM_SERVE_FLAGS, VLLM_VERSION, VLLM_VERSIONS

SCRIPT = Path(__file__).parents[2] / "scripts" / "gen-vllm-flags"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("gen_vllm_flags", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module
    loader.exec_module(module)
    return module


TABLE = [(["--port"], "ONE"), (["--enable-x", "--no-enable-x"], "SWITCH"), (["--newer"], "ONE")]


def test_new_flags_and_spellings_are_added_and_none_dropped(gen: ModuleType) -> None:
    installed = [(["--port"], "ONE"), (["--enable-x", "--disable-x"], "SWITCH"), (["--y"], "+")]
    merged, added, conflicts = gen.merge(
        TABLE, [(n, a.replace("+", "ONE_OR_MORE")) for n, a in installed]
    )
    assert conflicts == []
    assert merged == [
        (["--port"], "ONE"),
        (["--enable-x", "--no-enable-x", "--disable-x"], "SWITCH"),
        (["--newer"], "ONE"),  # not in the installed release: kept
        (["--y"], "ONE_OR_MORE"),
    ]
    assert added == ["--enable-x (spelt also --disable-x)", "--y"]


def test_an_arity_that_changed_is_a_conflict(gen: ModuleType) -> None:
    _, _, conflicts = gen.merge(TABLE, [(["--port"], "ONE_OR_MORE")])
    assert conflicts == ["--port: the installed vLLM says ONE_OR_MORE, the table ONE"]


def test_the_table_is_in_its_generated_form(gen: ModuleType) -> None:
    """Rendering the table's own flags and versions gives the file back unchanged."""
    current = [(list(flag.names), flag.arity.name) for flag in VLLM_SERVE_FLAGS]
    text = gen.TABLE.read_text()
    assert gen.render(text, current, list(VLLM_VERSIONS)) == text
    assert max(VLLM_VERSIONS) == VLLM_VERSION and "0.32.0" in VLLM_VERSIONS


def test_a_local_version_is_its_release(gen: ModuleType) -> None:
    assert gen.release("0.32.0+cpu") == "0.32.0"
