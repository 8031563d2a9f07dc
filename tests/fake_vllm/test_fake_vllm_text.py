"""Deterministic text and vLLM's stop-string semantics, as pure functions."""

from __future__ import annotations

from itertools import islice

from hypothesis import given, settings
from hypothesis import strategies as st

from ddsup.fake_vllm._text import count_tokens, generate, tokens


def test_tokens_are_deterministic_and_carry_the_lane() -> None:
    first = list(islice(tokens("lane-7", "m", "prompt", 0), 20))
    assert first == list(islice(tokens("lane-7", "m", "prompt", 0), 20))
    assert first[0] == "[lane-7]"
    assert all(t.startswith(" ") for t in first[1:])
    assert first != list(islice(tokens("lane-7", "m", "other prompt", 0), 20))
    assert first != list(islice(tokens("lane-7", "other-model", "prompt", 0), 20))
    assert first != list(islice(tokens("lane-7", "m", "prompt", 1), 20))


def test_length_finish() -> None:
    done = generate(tokens("L", "m", "p", 0), 4, ())
    assert (done.finish_reason, done.stop_reason, done.completion_tokens) == ("length", None, 4)
    assert "".join(done.deltas) == done.text


def test_stop_spanning_two_tokens_is_held_back() -> None:
    full = generate(tokens("L", "m", "p", 0), 6, ()).text
    # a stop string made of the end of token 2 and the start of token 3
    words = full.split(" ")
    stop = words[2][-2:] + " " + words[3][:2]
    done = generate(tokens("L", "m", "p", 0), 6, (stop,))
    assert done.text == full[: full.index(stop)]
    assert (done.finish_reason, done.stop_reason) == ("stop", stop)
    assert "".join(done.deltas) == done.text
    assert done.completion_tokens == 4


@settings(max_examples=40, deadline=None)
@given(
    prompt=st.text(max_size=20),
    max_tokens=st.integers(1, 30),
    stops=st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz []L", min_size=1, max_size=4), max_size=3
    ),
)
def test_stream_and_text_agree(prompt: str, max_tokens: int, stops: list[str]) -> None:
    done = generate(tokens("L", "m", prompt, 0), max_tokens, stops)
    assert "".join(done.deltas) == done.text
    assert 1 <= done.completion_tokens <= max_tokens
    assert not any(s in done.text for s in stops)
    if done.finish_reason == "length":
        assert done.completion_tokens == max_tokens
    else:
        assert done.stop_reason in stops


def test_count_tokens() -> None:
    assert count_tokens("") == 1
    assert count_tokens("one two  three") == 3
