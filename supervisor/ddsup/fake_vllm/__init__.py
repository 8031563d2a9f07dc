"""``ddsup fake-vllm``: a vLLM stand-in for rehearsals and tests (docs/cli.md, `ddsup fake-vllm`).

It takes ``vllm serve``'s command line (every flag of vLLM 0.32 and 0.34), serves vLLM's
HTTP surface (OpenAI completions and chat with SSE streaming, batch chat, Anthropic
messages, responses, embeddings, pooling,
score, rerank, tokenize, ``/v1/models`` with aliases and LoRA adapters, ``/health``,
``/metrics``) with deterministic answers, imitates vLLM's process model (a retitled
``VLLM::EngineCore`` with its ``VLLM::Worker_TP…`` children), and misbehaves on request:
slow start, slow tokens, limited concurrency, crashes, an unhealthy health check, a
SIGTERM it ignores, an engine that outlives it. Layering, bottom up:

- ``_vllm_flags``: vLLM's serve flags as data; ``_behaviour``: the validated knobs.
- ``_text``: deterministic tokens and stop strings; ``_request``: request validation;
  ``_responses``: vLLM-shaped JSON; ``_vllm_metrics``: Prometheus text.
- ``_models``: served names and adapters; ``_pooling``: pooling, scoring and tokenizer
  routes; ``_responses_api``: ``/v1/responses``; ``_messages_api``: ``/v1/messages``.
- ``_answers``: a generated answer's bytes per API (whole, or event by event).
- ``_engine``: the running/waiting model, counters, health, planned crashes, a dead engine.
- ``_asgi``: ASGI plumbing; ``_app``: the ASGI app; ``_fake_server``: hypercorn (trio) serving it.
- ``_engine_core``: the retitled engine and worker processes.
- ``_vllm_cli``: vLLM's argv inside the fake (and :func:`fake_vllm_argv` for
  rehearsals); ``_fake_vllm_command``: the CLI; ``_main``: running it.
"""

from ddsup.fake_vllm._behaviour import Behaviour as Behaviour
from ddsup.fake_vllm._behaviour import LoraModule as LoraModule
from ddsup.fake_vllm._engine import CRASH_EXIT_STATUS as CRASH_EXIT_STATUS
from ddsup.fake_vllm._fake_server import serve_fake_vllm as serve_fake_vllm
from ddsup.fake_vllm._fake_vllm_command import behaviour_from_args as behaviour_from_args
from ddsup.fake_vllm._fake_vllm_command import configure_fake_vllm as configure_fake_vllm
from ddsup.fake_vllm._main import run_fake_vllm as run_fake_vllm
from ddsup.fake_vllm._vllm_cli import fake_vllm_argv as fake_vllm_argv
from ddsup.fake_vllm._vllm_cli import is_vllm_serve as is_vllm_serve
from ddsup.fake_vllm._vllm_flags import VLLM_VERSION as VLLM_VERSION
