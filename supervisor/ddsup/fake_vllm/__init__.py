"""``ddsup fake-vllm``: a vLLM stand-in for rehearsals and tests (docs/cli.md, `ddsup fake-vllm`).

It serves vLLM's HTTP surface (OpenAI completions and chat with SSE streaming,
``/v1/models``, ``/health``, ``/metrics``) with deterministic text, and misbehaves on
request: slow start, slow tokens, limited concurrency, crashes, an unhealthy health
check, a SIGTERM it ignores, an engine process that outlives it. Layering, bottom up:

- ``_behaviour``: the validated knobs (:class:`Behaviour`).
- ``_text``: deterministic tokens and stop strings; ``_request``: request validation;
  ``_responses``: vLLM-shaped JSON; ``_metrics``: Prometheus text.
- ``_engine``: the running/waiting model, counters, health, planned crashes.
- ``_app``: the ASGI app; ``_server``: hypercorn (trio) serving it.
- ``_engine_core``: the setsid ``EngineCore`` child; ``_commands``: the CLI.
"""

from ddsup.fake_vllm._behaviour import Behaviour as Behaviour
from ddsup.fake_vllm._commands import behaviour_from_args as behaviour_from_args
from ddsup.fake_vllm._commands import configure_fake_vllm as configure_fake_vllm
from ddsup.fake_vllm._commands import run_fake_vllm as run_fake_vllm
from ddsup.fake_vllm._engine import CRASH_EXIT_STATUS as CRASH_EXIT_STATUS
from ddsup.fake_vllm._server import serve_fake_vllm as serve_fake_vllm
