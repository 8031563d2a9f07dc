"""The endpoint's lane table kept lane by lane: what a request sees after any changes.

A join, a leave, a replaced lane or a name a lane's ``/v1/models`` adds changes only the
tuples of the names involved (``endpoint._lanes``), no longer a rebuild of every
name from every lane. What the request path relies on is checked against a table built
from scratch (the set of ready lanes as ``states()`` lists them): the same lanes answer
to each name, a lane counted in a slot is the ready one, names never asked for are
unknown, and for lanes that joined and left (no names learned) the same order, which
decides round-robin ties. A tuple a request already holds never changes under it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from lane_scripts import MODELS, apply_step, info, learning, steps

from ddsup.endpoint._lanes import LaneState, LaneTable


def _from_scratch(table: LaneTable) -> dict[str, list[LaneState]]:
    """Each name's ready lanes, walking the table's lanes in their order (the rebuild
    every change used to make)."""
    by_name: dict[str, list[LaneState]] = {}
    for state in table.states():
        for name in sorted(state.names):
            by_name.setdefault(name, []).append(state)
    return by_name


def _check(table: LaneTable, ordered: bool) -> None:
    expected = _from_scratch(table)
    for name in {*expected, *MODELS, "alias", "adapter-a", "adapter-b", "unknown"}:
        seen = table.ready(name)
        want = expected.get(name, [])
        if ordered:
            assert list(seen) == want, name
        else:
            assert sorted(map(id, seen)) == sorted(map(id, want)), name
    assert table.ready_names() == sorted(expected)
    assert all(table.is_known(name) for name in expected)  # a name once ready is known
    for state in table.states():
        assert table.state_at(state.slot) is state
    ready_slots = {state.slot for state in table.states()}
    for slot in range(1, 100):
        if slot not in ready_slots:
            assert table.state_at(slot) is None, slot
    assert not table.is_known("unknown")


@settings(max_examples=300, deadline=None)
@given(st.lists(steps, max_size=25))
def test_joins_and_leaves_keep_the_table_a_rebuild_would_make(
    script: list[tuple[object, ...]],
) -> None:
    table = LaneTable()
    for step in script:
        generation, before = table.generation, list(map(id, table.states()))
        apply_step(table, step)
        _check(table, ordered=True)
        if list(map(id, table.states())) != before:  # the choice's index re-reads the table
            assert table.generation > generation


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(steps, learning), max_size=25))
def test_learned_names_keep_the_same_lanes_per_name(script: list[tuple[object, ...]]) -> None:
    table = LaneTable()
    for step in script:
        apply_step(table, step)
        _check(table, ordered=False)


def test_a_request_keeps_the_tuple_it_read() -> None:
    lanes = [info(f"lane@{i}", "m", 8000 + i, False) for i in range(3)]
    table = LaneTable(lanes[:2])
    held = table.ready("m")
    table.change([lanes[2]], ["lane@0"])
    assert [s.info.instance for s in held] == ["lane@0", "lane@1"]
    assert [s.info.instance for s in table.ready("m")] == ["lane@1", "lane@2"]


def test_a_name_learned_joins_its_lane_last_and_leaves_with_it() -> None:
    lanes = [info(f"lane@{i}", "m", 8000 + i, False) for i in range(3)]
    table = LaneTable(lanes)
    before = table.generation
    table.learn_names(lanes[1], ("m",))  # nothing new: no new generation
    assert table.generation == before
    table.learn_names(lanes[2], ("adapter-a",))
    table.learn_names(lanes[0], ("adapter-a",))
    assert table.generation == before + 2
    assert [s.info.instance for s in table.ready("adapter-a")] == ["lane@2", "lane@0"]
    assert [s.info.instance for s in table.ready("m")] == ["lane@0", "lane@1", "lane@2"]
    table.remove("lane@2")
    assert [s.info.instance for s in table.ready("adapter-a")] == ["lane@0"]
    table.remove("lane@0")
    assert table.ready("adapter-a") == ()
    assert table.is_known("adapter-a")  # a name once known stays known (503, not 404)
    assert table.ready_names() == ["m"]
