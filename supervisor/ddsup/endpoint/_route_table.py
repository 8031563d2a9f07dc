"""The paths the endpoint serves: its own GET routes and vLLM's routes it forwards by model.

The forwarded routes are those of vLLM's OpenAI-compatible server (``vllm serve``: the
routers ``vllm/entrypoints/openai/api_server.py`` registers) whose request names the
model, so that the endpoint can choose a lane for it; ``ddsup fake-vllm`` serves the same
paths. Each is ``POST`` with a JSON object (``model`` optional: without it vLLM uses its
own model, and the endpoint the one model it serves, when it serves one), except speech
to text, whose body is ``multipart/form-data`` with a ``model`` field.

Routes of vLLM left out, and why: ``GET /v1/responses/{id}`` and its ``cancel`` (a stored
response lives on the lane that made it, and the request does not say which),
``/v1/load_lora_adapter`` and the other development-mode routes (they change one lane,
not a model), ``/invocations`` (SageMaker's single route: one server per container),
``/health``, ``/metrics``, ``/ping``, ``/version``, ``/load`` (about one server; the
endpoint answers ``/health`` and ``/metrics`` about itself).
"""

from __future__ import annotations

GET_ROUTES = frozenset({b"/health", b"/metrics", b"/v1/models"})

JSON_ROUTES = frozenset(
    {
        # text generation
        b"/v1/completions",
        b"/v1/chat/completions",
        b"/v1/responses",
        b"/v1/messages",  # Anthropic's Messages API
        b"/v1/messages/count_tokens",
        # tokenizer
        b"/tokenize",
        b"/detokenize",
        # pooling models: embeddings, classification, scoring, reranking
        b"/v1/embeddings",
        b"/pooling",
        b"/classify",
        b"/score",
        b"/v1/score",
        b"/rerank",
        b"/v1/rerank",
        b"/v2/rerank",
    }
)

FORM_ROUTES = frozenset({b"/v1/audio/transcriptions", b"/v1/audio/translations"})

MODEL_ROUTES = JSON_ROUTES | FORM_ROUTES  # POST, forwarded to a lane of the body's model
ROUTES = GET_ROUTES | MODEL_ROUTES

DEFAULT_OPEN_ROUTES = ("/health", "/metrics")  # answered without the key when one is set
