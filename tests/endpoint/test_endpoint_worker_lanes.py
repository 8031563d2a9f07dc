"""What the endpoint's parent tells its workers about lanes: the whole table once, then
only what changed.

Each worker routes by its own copy of the parent's lane table. The oracle is the
parent's table itself: after any sequence of joins, leaves, replacements, learned names
and full sets, a worker's copy, built only from the messages the parent sent (each
encoded and decoded as on the link), has the same lanes for each name, each in the same
slot, the same learned names, and knows the same models and names. A lane that joins
a table of any size costs one lane in the message (the whole table each time made a
start quadratic in the workers).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lane_scripts import MODELS, apply_step, info, learning, steps

from ddsup.endpoint import _worker_link as link
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneTable
from ddsup.endpoint._worker import apply_lanes
from ddsup.endpoint._workers import WorkerPool


@contextmanager
def _parent_and_worker() -> Iterator[tuple[LaneTable, LaneTable, list[link.Message]]]:
    """A parent's table whose every change is passed on (as ``WorkerPool.run`` does,
    without processes), and a worker's table that applies each message off the wire."""
    parent, worker = LaneTable(), LaneTable()
    pool = WorkerPool(EndpointConfig(), parent, 2, paced_gc=False)
    sent: list[link.Message] = []

    def broadcast(message: link.Message) -> None:
        wired = link.decode(json.loads(json.dumps(link.encode(message))))
        assert isinstance(wired, link.Lanes | link.LanesChanged)
        apply_lanes(worker, wired)
        sent.append(wired)

    with pytest.MonkeyPatch.context() as patch, parent.watch_changes() as touched:
        patch.setattr(pool, "_broadcast", broadcast)
        pool._touched = touched
        parent.on_change = pool._lanes_changed
        pool._lanes_changed()
        yield parent, worker, sent


def _same(parent: LaneTable, worker: LaneTable) -> None:
    for name in {*parent.known_names(), *MODELS, "alias", "adapter-a"}:
        assert {s.info for s in worker.ready(name)} == {s.info for s in parent.ready(name)}, name
    for state in parent.states():
        copy = worker.state_at(state.slot)
        assert copy is not None and copy.info == state.info
    assert len(worker.states()) == len(parent.states())
    assert worker.learned() == parent.learned()
    assert worker.known_models() == parent.known_models()
    assert worker.known_names() == parent.known_names()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(steps, learning), max_size=25))
def test_a_worker_keeps_the_parents_table_from_its_changes(
    script: list[tuple[object, ...]],
) -> None:
    with _parent_and_worker() as (parent, worker, sent):
        for step in script:
            apply_step(parent, step)
            _same(parent, worker)
        assert all(isinstance(m, link.LanesChanged) for m in sent[1:])


def test_a_lane_that_joins_is_one_lane_on_the_link() -> None:
    with _parent_and_worker() as (parent, worker, sent):
        for index in range(300):
            parent.add(info(f"lane@{index}", "m", 8000 + index, False))
        parent.learn_names(info("lane@7", "m", 8007, False), ("adapter-a",))
        parent.remove("lane@3")
        joins = [m for m in sent if isinstance(m, link.LanesChanged) and m.joined]
        assert len(joins) == 300 and all(len(m.joined) == 1 for m in joins)
        last = sent[-1]
        assert isinstance(last, link.LanesChanged)
        assert last.removed == ("lane@3",) and last.joined == () and last.learned == ()
        assert [s.info.instance for s in worker.ready("adapter-a")] == ["lane@7"]
        _same(parent, worker)
