"""Every flag the installed ``vllm serve`` knows is accepted by fake-vllm, with its arity.

The installed vLLM's own parser is read by ``scripts/gen-vllm-flags --json`` under that
vLLM's Python; each of its spellings is then given to ``ddsup fake-vllm``'s parser with
as many values as vLLM takes: a refused flag, or one whose values spill into the model
argument, fails here (run the script to add it to the table).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ddsup._cli import build_parser
from support.vllm import VllmInstall

pytestmark = pytest.mark.slow  # imports vLLM: 15-50 s

SCRIPT = Path(__file__).parents[2] / "scripts" / "gen-vllm-flags"
VALUES = {"SWITCH": [], "ONE": ["1"], "OPTIONAL": [], "ONE_OR_MORE": ["a", "b"]}


@pytest.fixture(scope="module")
def installed(real_vllm: VllmInstall) -> dict[str, object]:
    done = subprocess.run(
        [str(real_vllm.bin / "python"), str(SCRIPT), "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_table_holds_every_flag_of_the_installed_vllm(installed: dict[str, object]) -> None:
    assert installed["conflicts"] == []
    assert installed["missing"] == [], (
        f"fake-vllm's table lacks flags of vLLM {installed['version']}: run "
        ".venv-vllm/bin/python scripts/gen-vllm-flags"
    )


def test_fake_vllm_accepts_each_spelling_with_its_values(installed: dict[str, object]) -> None:
    parser = build_parser(["fake-vllm"])
    flags = installed["flags"]
    assert isinstance(flags, list) and len(flags) > 300
    refused = []
    for flag in flags:
        for name in flag["names"]:
            try:
                args = parser.parse_args(["fake-vllm", "/m", name, *VALUES[flag["arity"]]])
            except SystemExit:
                refused.append(name)
                continue
            assert args.model_tag == "/m", f"{name}'s values spilled into the model"
    assert refused == []
