"""The paths the endpoint serves: its own GET routes and vLLM's routes it forwards by model.

The forwarded routes are those of vLLM's OpenAI-compatible server (``vllm serve`` 0.32:
the routes its launcher lists at start-up) whose request names the model, so that the
endpoint can choose a lane for it; ``ddsup fake-vllm`` serves the same paths. Each is
``POST`` with a JSON object (``model`` optional: without it vLLM uses its own model, and
the endpoint the one model it serves, when it serves one), except speech to text, whose
body is ``multipart/form-data`` with a ``model`` field. The render and derender routes
answer 403 unless the lanes run with ``--enable-scale-out``; the lane's answer passes.

The endpoint answers ``/health``, ``/ping`` (vLLM's SageMaker health route: the same
answer), ``/metrics`` and ``/v1/models`` about itself, and ``/version`` with the
version a ready lane reports.

Routes of vLLM left out, and why: ``GET /v1/responses/{id}`` and its ``cancel`` (a stored
response lives on the lane that made it, and the request does not say which),
``/inference/v1/abort_requests`` (aborts requests by id on one server),
``/v1/load_lora_adapter`` and the other development-mode routes, ``/scale_elastic_ep``
and ``/is_scaling_elastic_ep`` (they change or ask one lane, not a model),
``/invocations`` (SageMaker's single route: one server per container), ``/load``,
``/kv_event_sources`` and ``/tokenizer_info`` (about one server).
"""

from __future__ import annotations

GET_ROUTES = frozenset({b"/health", b"/metrics", b"/v1/models", b"/ping", b"/version"})
# The GET routes that take other methods than GET and HEAD: vLLM's /ping answers POST too
# (SageMaker's), and /version, a lane's answer forwarded, takes GET alone, as vLLM's.
METHODS = {b"/ping": (b"GET", b"HEAD", b"POST"), b"/version": (b"GET",)}

JSON_ROUTES = frozenset(
    {
        # text generation
        b"/v1/completions",
        b"/v1/chat/completions",
        b"/v1/chat/completions/batch",  # several conversations, one choice each
        b"/v1/responses",
        b"/v1/messages",  # Anthropic's Messages API
        b"/v1/messages/count_tokens",
        b"/inference/v1/generate",  # token ids in and out (needs --enable-scale-out)
        b"/v1/systemone",  # structured decisions
        b"/generative_scoring",
        # tokenizer, chat templates (render and derender need --enable-scale-out)
        b"/tokenize",
        b"/detokenize",
        b"/v1/chat/completions/render",
        b"/v1/completions/render",
        b"/v1/messages/render",
        b"/v1/responses/render",
        b"/v1/chat/completions/derender",
        b"/v1/completions/derender",
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
