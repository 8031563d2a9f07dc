"""The real-vLLM tier: these tests run the CPU build of vLLM as ddsup's lanes.

They need ``.venv-vllm`` (``scripts/setup-vllm``). Without it they skip; in CI
(``CI=true``) a skip fails (``support.ci``): a skipped tier would hide a broken set-up.
"""

from __future__ import annotations

import pytest

from support.vllm import VllmInstall, installed_vllm


@pytest.fixture(scope="session")
def real_vllm() -> VllmInstall:
    found = installed_vllm()
    if isinstance(found, str):
        pytest.skip(found)
    return found
