"""A lane's samples: the fast paths (prefix sums, binary search) agree with the plain pass."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddsup.record._samples import LaneSamples


@st.composite
def lanes(draw: st.DrawFn) -> LaneSamples:
    """Disjoint lines in time order, with gaps, zero-length lines, and any busy share."""
    samples, t = LaneSamples(), 0.0
    for _ in range(draw(st.integers(0, 30))):
        t += draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
        span = draw(st.sampled_from([0.0, 0.25, 1.0, 2.0, 7.0]))
        samples.starts.append(t)
        samples.ends.append(t + span)
        samples.busy.append(span * draw(st.floats(0, 1)))
        samples.started.append(draw(st.integers(0, 20)))
        t += span
    return samples


def plain(samples: LaneSamples) -> LaneSamples:
    """The same samples, made to take the plain pass."""
    copy = LaneSamples(samples.starts, samples.ends, samples.busy, samples.started)
    copy.__dict__["disjoint"] = False
    return copy


spans = st.lists(st.tuples(st.floats(-5, 120), st.floats(0, 30)), max_size=6).map(
    lambda pairs: _disjoint_spans(pairs)
)


def _disjoint_spans(pairs: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, length in sorted(pairs):
        if out and start < out[-1][1]:
            continue
        out.append((start, start + length))
    return out


@settings(max_examples=300, deadline=None)
@given(samples=lanes(), ready=spans)
def test_busy_within_spans(samples: LaneSamples, ready: list[tuple[float, float]]) -> None:
    assert samples.disjoint
    assert samples.busy_within(ready) == pytest.approx(plain(samples).busy_within(ready), abs=1e-9)


@settings(max_examples=300, deadline=None)
@given(samples=lanes(), start=st.floats(-5, 50), width=st.floats(0.1, 9), count=st.integers(1, 40))
def test_per_interval(samples: LaneSamples, start: float, width: float, count: int) -> None:
    edges = [start + i * width for i in range(count + 1)]
    fast, slow = samples.per_interval(edges), plain(samples).per_interval(edges)
    # zero-length lines on an edge may fall on either side of it; nothing else may differ
    on_edge = any(s == e and s in edges for s, e in zip(samples.starts, samples.ends, strict=True))
    if not on_edge:
        assert fast[0] == pytest.approx(slow[0], abs=1e-9)
        assert fast[1] == pytest.approx(slow[1], abs=1e-9)


def test_overlapping_lines_take_the_plain_pass() -> None:
    samples = LaneSamples([0.0, 0.5], [1.0, 1.5], [1.0, 1.0], [1, 1])
    assert not samples.disjoint
    assert samples.busy_within([(0.0, 2.0)]) == pytest.approx(2.0)
    assert samples.per_interval([0.0, 1.0, 2.0]) == ([1.5, 0.5], [1.5, 0.5])
