"""``/metrics`` in the Prometheus text exposition format, with vLLM's metric names.

Names and labels follow vLLM's V1 engine (``vllm/v1/metrics/loggers.py``):
``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
``vllm:kv_cache_usage_perc`` are gauges labelled ``model_name`` and ``engine``;
``vllm:request_success_total`` is labelled by ``finished_reason`` as well. The KV cache
usage is faked as the share of sequence slots in use, which moves the way the real one
does under load. Written by hand: one short string per scrape, no client library.
"""

from __future__ import annotations

from ddsup.fake_vllm._engine import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches."),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed."),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."),
)
_COUNTERS = (
    ("vllm:prompt_tokens_total", "Number of prefill tokens processed."),
    ("vllm:generation_tokens_total", "Number of generation tokens processed."),
)
_REASONS = ("stop", "length", "abort")


def render(snapshot: Snapshot, model: str) -> bytes:
    """The whole exposition text for one scrape."""
    labels = f'engine="0",model_name="{_escape(model)}"'
    gauges = (
        snapshot.running,
        snapshot.waiting,
        snapshot.running / snapshot.max_num_seqs,
    )
    lines: list[str] = []
    for (name, help_text), value in zip(_GAUGES, gauges, strict=True):
        lines += _family(name, "gauge", help_text, [(labels, float(value))])
    counts = (snapshot.prompt_tokens, snapshot.generation_tokens)
    for (name, help_text), count in zip(_COUNTERS, counts, strict=True):
        lines += _family(name, "counter", help_text, [(labels, float(count))])
    samples = [
        (f'{labels},finished_reason="{reason}"', float(snapshot.success.get(reason, 0)))
        for reason in _REASONS
    ]
    lines += _family(
        "vllm:request_success_total",
        "counter",
        "Count of successfully processed requests.",
        samples,
    )
    return ("\n".join(lines) + "\n").encode()


def _family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> list[str]:
    head = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    return head + [f"{name}{{{labels}}} {value!r}" for labels, value in samples]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
