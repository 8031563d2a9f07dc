"""The ``[endpoint]`` section's keys: the logical endpoint's settings (docs/units.md).

Split from :mod:`ddsup.units._schema` (the one table of sections, which includes this
one) to keep each module small. ``ddsup.endpoint``'s ``EndpointConfig.from_section``
takes every key; the endpoint's own routes are listed here too, for ``open_routes``
(the units layer cannot import the endpoint's; a test holds the two lists equal).
"""

from __future__ import annotations

import difflib
import math

from ddsup.units import _kinds as k
from ddsup.units import _kinds_env as ke
from ddsup.units._keyspec import KeySpec, SectionSpec, duration_key
from ddsup.units._model import Routing, UnitType

# The endpoint's routes (ddsup.endpoint._route_table.ROUTES, which a test holds equal).
ENDPOINT_ROUTES = (
    "/health",
    "/metrics",
    "/v1/models",
    "/ping",
    "/version",
    "/v1/completions",
    "/v1/chat/completions",
    "/v1/chat/completions/batch",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/inference/v1/generate",
    "/v1/systemone",
    "/generative_scoring",
    "/tokenize",
    "/detokenize",
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/v1/messages/render",
    "/v1/responses/render",
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
    "/v1/embeddings",
    "/pooling",
    "/classify",
    "/score",
    "/v1/score",
    "/rerank",
    "/v1/rerank",
    "/v2/rerank",
    "/v1/audio/transcriptions",
    "/v1/audio/translations",
)


def _routes(value: object) -> tuple[str, ...]:
    routes = k.STRINGS.convert(value)
    assert isinstance(routes, tuple)

    def check(item: object) -> None:
        if item not in ENDPOINT_ROUTES:
            near = difflib.get_close_matches(str(item), ENDPOINT_ROUTES, n=1)
            hint = (
                f"; did you mean {near[0]!r}?" if near else f"; one of {', '.join(ENDPOINT_ROUTES)}"
            )
            raise k.Invalid(f"{item!r} is not a route of the endpoint{hint}")

    k.each(routes, check)
    return routes


def _number(low: float, high: float | None = None) -> k.Kind:
    """A finite number (integer or float) in ``[low, high]`` (``high`` may be open)."""
    bounds = f"{low:g}..{high:g}" if high is not None else f">= {low:g}"

    def convert(value: object) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise k.Invalid(f"expected a number {bounds}, got {k.type_name(value)}")
        number = float(value)
        if not math.isfinite(number) or number < low or (high is not None and number > high):
            raise k.Invalid(f"must be a number {bounds}, got {value}")
        return number

    def json() -> k.Json:
        schema: k.Json = {"type": "number", "minimum": low}
        if high is not None:
            schema["maximum"] = high
        return schema

    return k.Kind(f"number {bounds}", convert, json)


OPEN_ROUTES = k.Kind(
    "array of endpoint routes",
    _routes,
    lambda: {"type": "array", "items": {"enum": list(ENDPOINT_ROUTES)}},
)

ENDPOINT = SectionSpec(
    "endpoint",
    "The logical endpoint (router) in front of the lanes. Endpoint units only; optional there.",
    (
        KeySpec("port", k.PORT, "Port the endpoint listens on.", 9000, 8080),
        KeySpec(
            "bind", k.NONEMPTY_STRING, "Address the endpoint listens on.", "127.0.0.1", "0.0.0.0"
        ),
        KeySpec(
            "max_queue_per_lane",
            k.integer(1),
            "Admission limit: outstanding requests per lane before answering 429.",
            128,
            64,
        ),
        duration_key(
            "retry_after",
            "Retry-After sent with 429 and 503 answers (a lane's own 429 may ask for longer).",
            "1s",
            "2s",
        ),
        KeySpec(
            "retries",
            k.integer(0),
            "Further distinct lanes tried before any response byte went out.",
            2,
            1,
        ),
        KeySpec(
            "api_key_env",
            ke.VARIABLE,
            "Require this variable's value as bearer token (absent: no key needed).",
            example="DDSUP_API_KEY",
        ),
        KeySpec(
            "min_ready",
            k.MIN_READY,
            "Lanes per model that must be ready before the endpoint starts: a count or a percentage.",
            "100%",
            "50%",
        ),
        KeySpec(
            "open_routes",
            OPEN_ROUTES,
            "Routes answered without the key when api_key_env is set (the built-in readiness "
            "probe needs /health).",
            ["/health", "/metrics"],
            ["/health"],
        ),
        KeySpec(
            "max_body_bytes",
            k.integer(1),
            "Largest request body accepted (413 above).",
            33554432,
            1048576,
        ),
        KeySpec(
            "max_buffered_bytes",
            k.integer(1),
            "Bytes of request bodies one worker holds, counted as they arrive (429 above; at "
            "least max_body_bytes).",
            536870912,
            134217728,
        ),
        KeySpec("max_concurrent", k.integer(1), "Most requests served at once.", 4096, 1024),
        KeySpec(
            "max_connections",
            k.integer(1),
            "Client connections one worker holds open; more wait in the listen queue.",
            8192,
            1024,
        ),
        KeySpec(
            "eject_after",
            k.integer(0),
            "Connect errors or 5xx answers of a lane in a row that take it out of the "
            "rotation (0: never).",
            5,
            3,
        ),
        duration_key(
            "eject_for",
            "How long an ejected lane stays out before it is tried again.",
            "10s",
            "30s",
        ),
        duration_key(
            "upstream_timeout",
            "Longest wait for a lane's answer before trying another.",
            "10m",
            "5m",
            positive=True,
        ),
        KeySpec(
            "routing",
            k.choice(Routing),
            'How a lane of the model is picked: "prefix" sends a prompt to the lane that was '
            'sent its longest prefix (its KV cache holds it), "least-load" to the lane with '
            "the fewest requests in flight.",
            "prefix",
            "least-load",
        ),
        KeySpec(
            "prefix_min_match",
            _number(0, 1),
            "Share of a prompt a lane must have been sent before it for prefix routing to "
            "pick that lane (below it: the least loaded).",
            0.3,
            0.5,
        ),
        KeySpec(
            "prefix_balance_requests",
            k.integer(0),
            "Prefix routing gives way to least-load when the lane it would pick has this "
            "many more requests in flight than the least loaded ...",
            64,
            16,
        ),
        KeySpec(
            "prefix_balance_ratio",
            _number(1),
            "... and this many times as many.",
            1.5,
            2.0,
        ),
        KeySpec(
            "workers",
            k.WORKERS,
            'Processes that serve the endpoint\'s port; "auto": one per CPU it may run on.',
            1,
            "auto",
        ),
    ),
    only=frozenset({UnitType.ENDPOINT}),
)
