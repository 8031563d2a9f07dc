"""Prefix-aware routing's core: a request's keys, the index of what each lane was sent,
and the choice with its thresholds, the balance fallbacks and lanes that leave or restart.

These run the pure core over a real :class:`LaneTable` (no sockets): the choice is given
least-load's lane as the endpoint gives it, and time is a parameter.
"""

from __future__ import annotations

import math

import pytest

from ddsup.endpoint._lanes import EJECTED_UNTIL, LaneInfo, LaneState, LaneTable
from ddsup.endpoint._prefix_routing import (
    BLOCK_CHARS,
    MAX_BLOCKS,
    Choice,
    PrefixIndex,
    PrefixPolicy,
    PrefixRouter,
    prompt_keys,
)

TEMPLATE = "You label product reviews. Examples: " + "great, positive; awful, negative. " * 30
LIMIT = 128
STALE = 3.0


def info(name: str, port: int = 8000) -> LaneInfo:
    return LaneInfo(name, "m", f"http://127.0.0.1:{port}")


def record(i: int) -> dict[str, object]:
    return {"model": "m", "prompt": f"{TEMPLATE}\nReview {i}: it broke after a week."}


class Fleet:
    """Lanes ``a``, ``b``, ``c`` of model ``m`` and a router over them."""

    def __init__(self, policy: PrefixPolicy | None = None, **index: float) -> None:
        self.table = LaneTable([info("a", 8000), info("b", 8001), info("c", 8002)])
        blocks = int(index.get("max_blocks", 1 << 16))
        self.router = PrefixRouter(
            self.table,
            policy or PrefixPolicy(),
            PrefixIndex(blocks, index.get("max_age", 600)),
            limit=LIMIT,
            stale_after=STALE,
        )

    def lane(self, name: str) -> LaneState:
        state = self.table.state_of(name)
        assert state is not None
        return state

    def route(
        self,
        payload: dict[str, object],
        least: str,
        *,
        now: float = 0.0,
        tried: tuple[str, ...] = (),
    ) -> tuple[str, str]:
        keys = prompt_keys(payload, "m")
        lane, how = self.router.choose("m", self.lane(least), keys, tried, now)
        return lane.info.instance, how

    def load(self, name: str, n: int) -> None:
        for _ in range(n):
            self.lane(name).begin()


# --- a request's keys ------------------------------------------------------------------


def test_prompts_that_share_a_prefix_share_its_keys() -> None:
    one, two = prompt_keys(record(1), "m"), prompt_keys(record(2), "m")
    shared = len(TEMPLATE) // BLOCK_CHARS
    assert one[:shared] == two[:shared]
    assert one[-1] != two[-1]
    assert prompt_keys(record(1), "other")[0] != one[0]  # per model name


def test_a_change_early_in_the_prompt_changes_every_key_after_it() -> None:
    changed = {"prompt": "X" + TEMPLATE[1:]}
    assert not set(prompt_keys(changed, "m")) & set(prompt_keys({"prompt": TEMPLATE}, "m"))


def test_chat_messages_are_keyed_on_role_and_text() -> None:
    def chat(system: str, user: object) -> dict[str, object]:
        return {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]
        }

    base = prompt_keys(chat(TEMPLATE, "review 1"), "m")
    assert base == prompt_keys(chat(TEMPLATE, [{"type": "text", "text": "review 1"}]), "m")
    assert base[:3] == prompt_keys(chat(TEMPLATE, "review 2"), "m")[:3]
    assert base[0] != prompt_keys(chat("Be brief. " + TEMPLATE, "review 1"), "m")[0]
    as_user = {"messages": [{"role": "user", "content": TEMPLATE}]}
    assert prompt_keys(as_user, "m")[0] != base[0]  # the role is part of the prompt


def test_token_ids_batches_and_prompts_without_text() -> None:
    ids = list(range(100))
    assert prompt_keys({"prompt": ids}, "m") == prompt_keys({"prompt": [ids, [1, 2]]}, "m")
    assert len(prompt_keys({"prompt": ids}, "m")) == 4  # blocks of 32 ids
    assert prompt_keys({"prompt": [TEMPLATE, "x"]}, "m") == prompt_keys({"prompt": TEMPLATE}, "m")
    assert prompt_keys({"input": TEMPLATE}, "m") == prompt_keys({"prompt": TEMPLATE}, "m")
    for nothing in ({}, {"prompt": ""}, {"prompt": 3}, {"prompt": [{"a": 1}]}, {"prompt": [[{}]]}):
        assert prompt_keys(nothing, "m") == []


def test_only_the_first_blocks_of_a_long_prompt_are_keyed() -> None:
    assert len(prompt_keys({"prompt": "x" * (BLOCK_CHARS * MAX_BLOCKS * 10)}, "m")) == MAX_BLOCKS
    messages = [{"role": "user", "content": "y" * 1000}] * 1000
    assert len(prompt_keys({"messages": messages}, "m")) == MAX_BLOCKS


# --- the index ---------------------------------------------------------------------------


def test_the_index_forgets_blocks_not_sent_for_max_age() -> None:
    fleet = Fleet(max_age=100.0)
    assert fleet.route(record(1), least="b") == ("b", Choice.NO_MATCH)
    assert fleet.route(record(2), least="c", now=99.0) == ("b", Choice.PREFIX)  # kept fresh
    assert fleet.route(record(3), least="c", now=190.0) == ("b", Choice.PREFIX)
    assert fleet.route(record(4), least="c", now=291.0) == ("c", Choice.NO_MATCH)


def test_a_block_sent_again_as_its_generation_turns_over_is_kept() -> None:
    """A request whose blocks were found young, recorded just as their generation grows
    old: recording keeps them, in the new young one."""
    fleet = Fleet(max_age=100.0)
    other = {"model": "m", "prompt": "Summarise the meeting notes below. " * 20}
    assert fleet.route(record(1), least="b") == ("b", Choice.NO_MATCH)
    assert fleet.route(record(2), least="c", now=60.0) == ("b", Choice.PREFIX)
    assert fleet.route(other, least="c", now=111.0) == ("c", Choice.NO_MATCH)
    assert fleet.route(record(3), least="c", now=150.0) == ("b", Choice.PREFIX)


def test_a_block_remembers_its_first_lane_and_the_latest_others() -> None:
    table = LaneTable([info(name, 8000 + i) for i, name in enumerate("abcdef")])
    index = PrefixIndex(1 << 10, 600.0)
    keys = prompt_keys(record(0), "m")
    lanes = [table.state_of(name) for name in "abcdef"]
    for lane in lanes:
        assert lane is not None
        index.record(keys, lane, 0.0)
    held = index.holders(keys, 0.0)
    assert len(held) == len(keys)
    assert [lane.info.instance for lane in held[-1]] == ["a", "d", "e", "f"]
    for again in (lanes[4], lanes[1]):  # e is held: it stays where it is; b was dropped
        assert again is not None
        index.record(keys, again, 0.0)
    assert [lane.info.instance for lane in index.holders(keys, 0.0)[0]] == ["a", "e", "f", "b"]


def test_the_index_holds_at_most_its_bound_and_keeps_what_is_in_use() -> None:
    fleet = Fleet(max_blocks=256)
    index = fleet.router.index
    fleet.route(record(0), least="a")
    for i in range(300):  # prompts that share nothing, 10 blocks each
        fleet.route({"prompt": f"{i:4} " * 256}, least="b")
        if i % 10 == 0:  # 100 other blocks in between: the template stays known
            assert fleet.route(record(i), least="c") == ("a", Choice.PREFIX)
        assert len(index) <= 256 + MAX_BLOCKS
    assert fleet.route({"prompt": f"{0:4} " * 256}, least="c") == ("c", Choice.NO_MATCH)


# --- the choice ----------------------------------------------------------------------------


def test_the_lane_sent_the_prefix_gets_its_records() -> None:
    fleet = Fleet()
    assert fleet.route(record(1), least="a") == ("a", Choice.NO_MATCH)
    fleet.load("a", 3)
    fleet.load("b", 1)
    fleet.load("c", 2)
    assert fleet.route(record(2), least="b") == ("a", Choice.PREFIX)
    other = {"prompt": "Translate to French: " * 40}
    assert fleet.route(other, least="b") == ("b", Choice.NO_MATCH)
    assert fleet.route({"prompt": "Translate to French: " * 40 + "cat"}, least="c")[0] == "b"


def test_the_longest_match_wins() -> None:
    fleet = Fleet()
    fleet.route({"prompt": TEMPLATE[:600]}, least="a")
    assert fleet.route({"prompt": TEMPLATE}, least="b", tried=("a",))[0] == "b"
    fleet.load("b", 5)
    fleet.load("c", 1)
    assert fleet.route(record(1), least="c") == ("b", Choice.PREFIX)


def test_a_match_below_the_threshold_goes_by_load() -> None:
    fleet = Fleet(PrefixPolicy(min_match=0.5))
    short = "s" * (BLOCK_CHARS * 2)  # two blocks
    fleet.route({"prompt": short}, least="a")
    fleet.load("a", 1)
    fleet.load("b", 1)
    long_tail = {"prompt": short + "x" * (BLOCK_CHARS * 6)}  # 2 of 8 blocks match: 0.25
    assert fleet.route(long_tail, least="b") == ("b", Choice.NO_MATCH)
    fleet.load("c", 1)
    half = {"prompt": short + "y" * (BLOCK_CHARS * 2)}  # 2 of 4 blocks match: 0.5
    assert fleet.route(half, least="c") == ("a", Choice.PREFIX)  # level with b: sent it first


def test_load_balance_wins_past_both_thresholds() -> None:
    fleet = Fleet(PrefixPolicy(balance_requests=8, balance_ratio=2.0))
    fleet.route(record(0), least="a")
    fleet.load("a", 13)
    fleet.load("b", 5)  # 8 more, not more than 8 more: the prefix wins
    assert fleet.route(record(1), least="b") == ("a", Choice.PREFIX)
    fleet.load("a", 1)  # 14 vs 5: 9 more, and 2.8 times as many
    assert fleet.route(record(2), least="b") == ("b", Choice.BALANCE)
    fleet.load("b", 3)  # 14 vs 8 (b holds the request it was just sent): not 2 times
    fleet.load("c", 9)
    assert fleet.route(record(3), least="b")[0] in ("a", "b")
    assert fleet.route(record(4), least="b")[1] is Choice.PREFIX


def test_an_idle_lane_takes_the_request_from_a_busy_one() -> None:
    fleet = Fleet()
    fleet.route(record(0), least="a")
    fleet.load("a", 1)
    assert fleet.route(record(1), least="b") == ("b", Choice.BALANCE_IDLE)


# bound 4: a lane takes one past it; 64: the other two get one each (an idle lane's)
@pytest.mark.parametrize(("bound", "widest"), [(4, 5), (64, 24 - 3)])
def test_a_bound_of_a_lanes_batch_keeps_the_loads_that_close(bound: int, widest: int) -> None:
    # Lanes that run a few requests each, and one template's records only: the bound set
    # to a lane's batch keeps every lane within it of the busiest, where SGLang's default
    # lets the template's lane take almost all of them.
    fleet = Fleet(PrefixPolicy(balance_requests=bound, balance_ratio=1.0))
    lanes = [fleet.lane(name) for name in "abc"]
    gaps = []
    for i in range(24):
        least = min(lanes, key=lambda lane: lane.outstanding).info.instance
        fleet.lane(fleet.route(record(i), least=least)[0]).begin()
        loads = [lane.outstanding for lane in lanes]
        gaps.append(max(loads) - min(loads))
    assert max(gaps) == widest


def test_a_lane_that_holds_the_template_too_takes_the_load_its_first_lane_cannot() -> None:
    # A copy that load once made is used again only where load would otherwise send the
    # request to a lane that holds nothing of it (which would compute it once more).
    fleet = Fleet(PrefixPolicy(balance_requests=2, balance_ratio=1.0))
    fleet.route(record(0), least="a")
    fleet.load("a", 1)
    assert fleet.route(record(1), least="b") == ("b", Choice.BALANCE_IDLE)  # b holds it too
    fleet.load("a", 2)
    fleet.load("b", 1)
    fleet.load("c", 1)  # a 3, b 1, c 1: within the bound, the lane sent it first
    assert fleet.route(record(2), least="c") == ("a", Choice.PREFIX)
    fleet.load("a", 1)  # a 4: past it; b, level with a on the match, is not
    assert fleet.route(record(3), least="c") == ("b", Choice.PREFIX)
    fleet.load("b", 3)  # a 4, b 4, c 1: both past it
    assert fleet.route(record(4), least="c") == ("c", Choice.BALANCE)


def test_a_lane_that_queues_gives_way_to_one_that_does_not() -> None:
    fleet = Fleet()
    fleet.route(record(0), least="a")
    fleet.load("a", 2)
    fleet.load("b", 1)
    fleet.lane("a").record_sample(3, 10.0)
    fleet.lane("b").record_sample(0, 10.0)
    assert fleet.route(record(1), least="b", now=11.0) == ("b", Choice.BALANCE_QUEUE)
    fleet.lane("b").record_sample(1, 10.0)  # every lane queues: the prefix wins
    fleet.lane("c").record_sample(1, 10.0)
    fleet.load("b", 1)
    fleet.load("c", 1)
    assert fleet.route(record(2), least="c", now=11.0)[1] is Choice.PREFIX
    stale = Fleet()
    stale.route(record(0), least="a")
    stale.load("a", 2)
    stale.load("b", 1)
    stale.lane("a").record_sample(3, 0.0)  # older than STALE: ignored
    assert stale.route(record(1), least="b", now=10.0) == ("a", Choice.PREFIX)


def test_lanes_that_cannot_take_the_request_are_passed_over() -> None:
    fleet = Fleet()
    fleet.route(record(0), least="a")
    for name in "abc":
        fleet.load(name, 1)
    assert fleet.route(record(1), least="b", tried=("a",)) == ("b", Choice.NO_MATCH)
    fleet.load("b", 1)  # b holds the template too, and has more in flight than a
    assert fleet.route(record(2), least="c") == ("a", Choice.PREFIX)
    assert fleet.route(record(3), least="c", tried=("a",)) == ("b", Choice.PREFIX)
    a, b = fleet.lane("a"), fleet.lane("b")
    a.counts.mark(a.slot, EJECTED_UNTIL, int(50.0 * 1e6))  # ejected until t = 50 s
    assert fleet.route(record(4), least="c", now=10.0) == ("b", Choice.PREFIX)
    assert fleet.route(record(5), least="c", now=60.0) == ("a", Choice.PREFIX)
    a.record_sample(LIMIT, 60.0)  # a fresh sample: its own queue is full
    b.record_sample(LIMIT, 60.0)
    assert fleet.route(record(6), least="c", now=61.0) == ("c", Choice.NO_MATCH)


def test_a_lane_that_leaves_or_restarts_matches_nothing_it_was_sent_before() -> None:
    fleet = Fleet()
    fleet.route(record(0), least="a")
    for name in "abc":
        fleet.load(name, 1)
    fleet.table.remove("a")
    assert fleet.route(record(1), least="b") == ("b", Choice.NO_MATCH)
    fleet.table.remove("b")
    fleet.table.add(info("b", 8001))  # the same lane, a new start: its cache is empty
    fleet.load("b", 1)
    assert fleet.route(record(2), least="c") == ("c", Choice.NO_MATCH)
    fleet.table.add(info("a", 8000))
    fleet.load("a", 1)
    assert fleet.route(record(3), least="a")[0] == "c"


def test_a_lane_renamed_away_from_the_model_matches_nothing() -> None:
    fleet = Fleet()
    fleet.route(record(0), least="a")
    fleet.load("a", 1)
    fleet.load("b", 1)
    assert fleet.route(record(1), least="b")[0] == "a"
    a = fleet.lane("a")
    fleet.table._index.rename(a, frozenset({"other"}))
    assert fleet.route(record(2), least="b") == ("b", Choice.NO_MATCH)


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_a_whole_match_is_always_enough(share: float) -> None:
    fleet = Fleet(PrefixPolicy(min_match=share))
    fleet.route(record(0), least="a")
    fleet.load("a", 1)
    fleet.load("b", 1)
    assert fleet.route(record(0), least="b") == ("a", Choice.PREFIX)
    assert math.isclose(fleet.router.policy.min_match, share)


def test_the_match_of_a_waiting_request_lists_the_lanes_that_hold_most_of_it() -> None:
    """What a lane with a free slot asks of a waiting request: which lanes hold the most
    of its prompt, the one sent it first before the others, whatever their loads."""
    fleet = Fleet()
    other = {"model": "m", "prompt": "Summarise the meeting notes below. " * 20}
    fleet.route(record(0), least="a")  # a holds the template first
    fleet.load("a", 1)
    assert fleet.route(record(1), least="b") == ("b", Choice.BALANCE_IDLE)  # b: a copy
    a, b = fleet.lane("a"), fleet.lane("b")
    fleet.load("a", LIMIT)  # a full queue does not matter here

    def match(payload: dict[str, object], now: float = 0.0) -> tuple[str, ...]:
        held = fleet.router.match("m", prompt_keys(payload, "m"), now)
        return tuple(lane.info.instance for lane in held)

    assert match(record(2)) == ("a", "b")
    assert match(other) == ()
    a.counts.mark(a.slot, EJECTED_UNTIL, int(50.0 * 1e6))  # an ejected lane holds nothing
    assert match(record(2), now=10.0) == ("b",)
    fleet.table.remove("b")  # nor does one out of the rotation
    assert match(record(2), now=10.0) == ()
    assert match(record(2), now=60.0) == ("a",)
    assert b is not fleet.table.state_of("b")
