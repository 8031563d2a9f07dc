"""Deterministic "generated" text, token by token, with vLLM's stop-string semantics.

The text depends only on the lane identity, the model name, the prompt and the choice
index, so a test can compute what an answer must be and tell which lane gave it: the
first token is always ``[<lane id>]``. The rest are words picked by a tiny PRNG seeded
from a hash of the model, prompt and choice index.

Stop strings follow vLLM: the output ends *before* the first occurrence of any stop
string (which is not included), ``finish_reason`` becomes ``"stop"`` and ``stop_reason``
names the string; without a stop, generation ends after ``max_tokens`` tokens with
``finish_reason = "length"``. While streaming, text that could still be the start of a
stop string is held back until it cannot be, as vLLM's detokenizer does, so a client
never sees part of a stop string.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

_WORDS = (
    *("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india"),
    *("juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo"),
    *("sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu"),
)
_MASK64 = (1 << 64) - 1


def tokens(lane_id: str, model: str, prompt: str, index: int) -> Iterator[str]:
    """The endless token stream of one choice: ``[lane]`` then `` word`` tokens."""
    digest = hashlib.blake2b(f"{model}\0{prompt}\0{index}".encode(), digest_size=8).digest()
    state = int.from_bytes(digest, "big")
    yield f"[{lane_id}]"
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) & _MASK64
        yield " " + _WORDS[(state >> 33) % len(_WORDS)]


@dataclass(frozen=True)
class ChoiceText:
    """One generated choice: what each token step emits, and how it ended.

    ``deltas[i]`` is the text a stream sends after token ``i`` (possibly empty while a
    possible stop string is held back); their concatenation is ``text``.
    """

    deltas: tuple[str, ...]
    text: str
    finish_reason: str
    stop_reason: str | None

    @property
    def completion_tokens(self) -> int:
        return len(self.deltas)


def generate(stream: Iterator[str], max_tokens: int, stops: Sequence[str]) -> ChoiceText:
    """Run ``stream`` for up to ``max_tokens`` tokens, cutting at the first stop string."""
    hold = max((len(s) for s in stops), default=1) - 1
    text = ""
    emitted = 0
    deltas: list[str] = []
    for token in islice(stream, max_tokens):
        search_from = max(0, len(text) - hold)
        text += token
        hit = _first_stop(text, stops, search_from)
        if hit is not None:
            cut, stop = hit
            deltas.append(text[emitted:cut])
            return ChoiceText(tuple(deltas), text[:cut], "stop", stop)
        safe = max(emitted, len(text) - hold)
        deltas.append(text[emitted:safe])
        emitted = safe
    if deltas:
        deltas[-1] += text[emitted:]
    return ChoiceText(tuple(deltas), text, "length", None)


def _first_stop(text: str, stops: Sequence[str], start: int) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for stop in stops:
        at = text.find(stop, start)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, stop)
    return best


def count_tokens(text: str) -> int:
    """The fake tokenizer: one token per whitespace-separated word, at least one."""
    return max(1, len(text.split()))
