"""Pin the public surface of ``ddsup.fake_vllm``: what other modules may import."""

from __future__ import annotations

import ddsup.fake_vllm as fake_vllm


def test_exported_members() -> None:
    exported = {name for name in vars(fake_vllm) if not name.startswith("_")}
    assert exported == {
        "Behaviour",
        "CRASH_EXIT_STATUS",
        "LoraModule",
        "VLLM_VERSION",
        "fake_vllm_argv",
        "is_vllm_serve",
        "behaviour_from_args",
        "configure_fake_vllm",
        "run_fake_vllm",
        "serve_fake_vllm",
    }
