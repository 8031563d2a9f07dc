"""The real-vLLM tier: these tests run the CPU build of vLLM as ddsup's lanes.

They need ``.venv-vllm`` (``scripts/setup-vllm``). Without it they skip, except in CI
(``CI=true``), where a skipped tier would hide a broken set-up: there they fail.
"""

from __future__ import annotations

import os

import pytest

from support.vllm import VllmInstall, installed_vllm


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def real_vllm() -> VllmInstall:
    found = installed_vllm()
    if isinstance(found, str):
        if _in_ci():
            pytest.fail(f"CI=true, so the real-vLLM tier may not skip: {found}", pytrace=False)
        pytest.skip(found)
    return found
