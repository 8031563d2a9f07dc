"""Prefix-aware routing: a prompt goes to the lane that was sent the longest part of it.

vLLM keeps the KV cache of the prompts it computed (automatic prefix caching) and skips
the part of a new prompt that it holds, but only on the lane that computed it. A job
that puts the same system prompt, instructions and examples (a template) before every
record computes that prefix once on every lane least-load spreads the template over.
This module remembers, in each endpoint worker, which lanes were sent which prompt
prefixes, and sends a request to the lane that holds the longest part of its prompt, as
SGLang's ``cache_aware`` policy does: from what was sent, not from what the lanes say.

Three parts, none of which reads a clock or a socket:

- :func:`prompt_keys`: a request's prompt as a chain of keys, one per block of
  ``BLOCK_CHARS`` characters (``BLOCK_TOKENS`` ids for a prompt of token ids), each the
  hash of its block and of the key before it: two prompts share their first ``n`` keys
  when they share their first ``n`` blocks. A chat request is keyed on its messages
  rendered as role and text. Only the first ``MAX_BLOCKS`` blocks are keyed: they
  decide where a prompt goes, and the cost per request stays bounded. The keys are
  Python's string hashes, salted per process: nobody outside can aim for a collision,
  and one would cost a cache miss, never a wrong answer.
- :class:`PrefixIndex`: each key → the lanes it was sent to, in the order they were first
  sent it (at most ``HOLDERS``: the first, and the latest others), in two generations.
  Recording puts keys in the young one; once that holds half of ``max_blocks`` keys or
  is ``max_age / 2`` old, it becomes the old one and the old one is dropped. So a block
  is remembered for ``max_age / 2`` to ``max_age`` after it was last sent, at most
  ``max_blocks`` blocks are held (and one request's more), and each request costs a
  dictionary lookup or two per block.
- :class:`PrefixRouter`: the choice, given the lane least-load picked
  (:class:`~._admission.Admission`). The lane whose blocks match the longest part of the
  prompt wins if that part is at least ``min_match`` of the prompt's blocks and the lane
  may take a request (in the rotation, untried, not ejected, queue under the limit);
  among lanes that match as far, the one sent it first: a template stays on its lane,
  and a copy that load put on another lane is not kept warm for nothing, which would
  take that lane's cache from the templates it holds. Load balance wins instead when
  that lane is unbalanced against least-load's: least-load's has nothing in flight while
  it has some; it has ``balance_requests`` more requests in flight than least-load's and
  ``balance_ratio`` times as many (SGLang's thresholds, measured against the lane that
  would take the request rather than across the fleet); or a fresh sample says it has a
  queue of its own and least-load's has none. Then another lane level with it on the
  match that is not unbalanced gets the request (the least loaded of them): a copy is
  used where it saves computing the prefix again. Failing that, least-load's lane gets
  it, and is sent the prefix too. So a lane with nothing in flight is never passed
  over for a busy one, nor one without a queue for one with a queue. SGLang's
  thresholds suit lanes that run hundreds of requests at once; where a lane runs a few
  (``max_num_seqs``) and every lane queues, the imbalance they let build up is left
  queued on one lane when the others run dry, and ``balance_requests`` of about a
  lane's batch with ``balance_ratio = 1`` bounds it, at the cost of the prefixes that
  the balance choices compute again.

A lane that leaves the rotation matches nothing from then on, and one that comes back
(a restart, a new :class:`~._lanes.LaneState`) matches only what it was sent
since: its old blocks go out with their generation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ddsup.endpoint._lanes import LaneState, LaneTable

BLOCK_CHARS = 128  # characters of a prompt per key: about 32 tokens of English
BLOCK_TOKENS = 32  # token ids per key, for a prompt given as ids
MAX_BLOCKS = 64  # keys of one request at most: its first 8,192 characters
HOLDERS = 4  # lanes remembered per block: the first sent it, and the latest others

Holders = tuple[LaneState, ...]


def prompt_keys(payload: Mapping[str, Any], name: str) -> list[int]:
    """The chain of keys of the request's prompt for model ``name`` (empty: none to key).

    The prompt is the ``messages`` of a chat request (each message's role and text, with
    a ``system`` field first), else a ``prompt`` (text, token ids, or a batch of either:
    its first), else a text ``input``.
    """
    prompt = _prompt(payload)
    if not prompt:
        return []
    key = hash(name)
    keys = []
    if isinstance(prompt, str):
        for block in _CHAR_BLOCKS[: (len(prompt) + BLOCK_CHARS - 1) // BLOCK_CHARS]:
            key = hash((key, prompt[block]))
            keys.append(key)
        return keys
    try:
        for block in _TOKEN_BLOCKS[: (len(prompt) + BLOCK_TOKENS - 1) // BLOCK_TOKENS]:
            key = hash((key, tuple(prompt[block])))
            keys.append(key)
    except TypeError:  # not ids: a list holding lists or objects; vLLM says what is wrong
        return []
    return keys


# The keyed blocks' bounds, built once: a slice object per block costs less per request
# than the arithmetic and the slice built from it.
_CHAR_BLOCKS = tuple(
    slice(s, s + BLOCK_CHARS) for s in range(0, BLOCK_CHARS * MAX_BLOCKS, BLOCK_CHARS)
)
_TOKEN_BLOCKS = tuple(
    slice(s, s + BLOCK_TOKENS) for s in range(0, BLOCK_TOKENS * MAX_BLOCKS, BLOCK_TOKENS)
)


def _prompt(payload: Mapping[str, Any]) -> str | list[Any] | None:
    messages = payload.get("messages")
    if isinstance(messages, list):
        return _rendered(payload.get("system"), messages)
    prompt = payload.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch: its first prompt
    if isinstance(prompt, (str, list)):
        return prompt
    text = payload.get("input")
    return text if isinstance(text, str) else None


def _rendered(system: object, messages: list[Any]) -> str:
    """Role and text of each message, as far as the keyed blocks reach."""
    parts = [system] if isinstance(system, str) else []
    size = len(parts[0]) if parts else 0
    for message in messages:
        if size >= BLOCK_CHARS * MAX_BLOCKS or not isinstance(message, dict):
            break
        content = message.get("content")
        if isinstance(content, list):  # parts: their text, in order
            content = "".join(
                p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        elif not isinstance(content, str):
            content = ""
        part = f"\x1e{message.get('role')}\x1f{content}"
        parts.append(part)
        size += len(part)
    return "".join(parts)


class PrefixIndex:
    """Which lanes were sent which blocks, in two generations (see the module docstring)."""

    def __init__(self, max_blocks: int, max_age: float) -> None:
        self.half = max(1, max_blocks // 2)
        self.max_age = max_age
        self._half_age = max_age / 2
        self._young: dict[int, Holders] = {}
        self._old: dict[int, Holders] = {}
        self._born = -math.inf  # when the young generation began
        self._alone: dict[LaneState, Holders] = {}  # each lane's one-lane tuple, shared
        # blocks recorded as sent to a lane besides the lanes sent them before: a match
        # made before this changed may leave out a lane that holds the prompt now
        self.copies = 0

    def __len__(self) -> int:
        return len(self._young) + len(self._old)

    def holders(self, keys: Sequence[int], now: float) -> list[Holders]:
        """The lanes sent each of the first blocks of ``keys``, as far as any was."""
        return self.walk(keys, now)[0]

    def walk(self, keys: Sequence[int], now: float) -> tuple[list[Holders], int]:
        """:meth:`holders`, and how many of them, from the first, are the young
        generation's: what :meth:`record` need not look up again."""
        age = now - self._born
        if age >= self._half_age:
            # a new young generation; the old one is dropped, and the young one too
            # when both are too old
            self._old = {} if age >= self.max_age else self._young
            self._young, self._born = {}, now
        young, old = self._young, self._old
        found: list[Holders] = []
        fresh = -1  # the first block found in the old generation only
        for key in keys:
            lanes = young.get(key)
            if lanes is None:
                lanes = old.get(key)
                if lanes is None:
                    break
                if fresh < 0:
                    fresh = len(found)
            found.append(lanes)
        return found, len(found) if fresh < 0 else fresh

    def record(
        self,
        keys: Sequence[int],
        lane: LaneState,
        now: float,
        found: Sequence[Holders] | None = None,
        fresh: int = 0,
    ) -> None:
        """``lane`` was sent the blocks of ``keys``; ``found`` and ``fresh``: what
        :meth:`walk` said of them at ``now``, with nothing recorded since, if it was
        asked (else it is asked here)."""
        if found is None:
            found, fresh = self.walk(keys, now)
        alone = self._alone.get(lane)
        if alone is None:
            alone = self._alone[lane] = (lane,)
        # The young blocks the walk found that hold the lane already stay as they are: a
        # template sent again to its lane costs no lookup of them. Most hold it alone.
        held = fresh if fresh == len(found) and found.count(alone) == fresh else 0
        if held < fresh:
            for sent in found[:fresh]:
                if sent is not alone and lane not in sent:
                    break
                held += 1
        if held == len(keys):
            return
        young, old = self._young, self._old
        if len(young) >= self.half:  # a new young generation; the old one is dropped
            self._old, self._young, self._born = young, {}, now
            young, old, held = self._young, young, 0
        for key in keys[held:] if held else keys:
            lanes = young.get(key)
            if lanes is not None:
                if lanes is alone or lane in lanes:
                    continue
            elif (lanes := old.get(key)) is None or lanes is alone or lane in lanes:
                young[key] = lanes or alone  # kept, in its order
                continue
            young[key] = (lanes[0], *lanes[1:][2 - HOLDERS :], lane)
            self.copies += 1

    def keep(self, lanes: Callable[[LaneState], bool]) -> None:
        """Forget the shared tuples of lanes ``lanes`` says no to (they left)."""
        self._alone = {lane: alone for lane, alone in self._alone.items() if lanes(lane)}


class Choice:
    """How a request's lane was chosen: the ``choice`` label of the endpoint's
    ``prefix_routed_total``. Plain strings, not an enum: a member's ``.value`` is a
    descriptor call, and every request routed by prefix is counted by its choice."""

    PREFIX: Final = "prefix"  # the lane that holds the longest part of the prompt
    NO_MATCH: Final = "no_match"  # no lane holds enough of it: least-load's lane
    # a lane holds it, but load balance won and least-load's lane got it, because ...
    BALANCE: Final = "balance"  # ... the thresholds held
    BALANCE_IDLE: Final = "balance_idle"  # ... that lane had nothing in flight, the matched one had
    BALANCE_QUEUE: Final = "balance_queue"  # ... a fresh sample: the matched one alone queued
    # a request that waited for a free slot (max_in_flight_per_lane) went to a lane that
    FREE_SLOT: Final = "free_slot"  # ... held less of it than another, which had no slot


@dataclass(frozen=True)
class PrefixPolicy:
    """The thresholds (``[endpoint]`` keys of the same names, ``prefix_`` before each)."""

    min_match: float = 0.3
    balance_requests: int = 64
    balance_ratio: float = 1.5

    def outweighs(self, busy: int, idle: int) -> bool:
        """Whether a lane with ``busy`` requests in flight is unbalanced against one with
        ``idle``: ``balance_requests`` more, and ``balance_ratio`` times as many."""
        return busy > idle + self.balance_requests and busy > idle * self.balance_ratio


class PrefixRouter:
    """The choice over one :class:`LaneTable` (see the module docstring); one per process.

    ``limit`` and ``stale_after``: least-load's, the same for every request (a lane may
    take one while its queue, by a sample no older than ``stale_after``, is under
    ``limit``).
    """

    def __init__(
        self,
        table: LaneTable,
        policy: PrefixPolicy,
        index: PrefixIndex,
        *,
        limit: int,
        stale_after: float,
    ) -> None:
        self.table = table
        self.policy = policy
        self.index = index
        self.limit = limit
        self.stale_after = stale_after
        self._generation = -1  # the table's generation that ``_ready`` is of
        self._ready: frozenset[LaneState] = frozenset()  # the lanes in the rotation
        self._level: Holders = ()  # the lanes level with the last match
        self._enough = [self._least(blocks) for blocks in range(MAX_BLOCKS + 1)]

    def _least(self, blocks: int) -> int:
        """The fewest blocks of ``blocks`` that a lane must hold to be matched."""
        return max(1, math.ceil(self.policy.min_match * blocks - 1e-9))

    def choose(
        self, name: str, least: LaneState, keys: Sequence[int], tried: Collection[str], now: float
    ) -> tuple[LaneState, str]:
        """The lane for a request for ``name`` with prompt ``keys``, and why; the lane is
        recorded as sent those blocks. ``least`` is least-load's choice, under the same
        ``tried`` and ``now`` (:func:`time.monotonic`)."""
        if self.table.generation != self._generation:
            self._follow_table()
        index = self.index
        found, fresh = index.walk(keys, now)
        lane = self._matched(found, len(keys), name, least, tried, now) if found else None
        if lane is None:
            choice, lane = Choice.NO_MATCH, least
        elif lane is least or (why := self._unbalanced(lane, least, now)) is None:
            choice = Choice.PREFIX
        elif (spare := self._spare(name, lane, least, tried, now)) is not None:
            choice, lane = Choice.PREFIX, spare
        else:
            choice, lane = why, least
        index.record(keys, lane, now, found, fresh)
        return lane, choice

    def _follow_table(self) -> None:
        """Learn which lanes are in the rotation now that the table changed, and forget
        the ones that left (a set of them: a lookup per lane the index names is cheaper
        than asking the table). Callers compare the generation first, per request; this
        runs only when it changed."""
        table = self.table
        self._generation = table.generation
        self._ready = frozenset(table.states())
        self.index.keep(self._ready.__contains__)

    def _matched(
        self,
        found: list[Holders],
        blocks: int,
        name: str,
        least: LaneState,
        tried: Collection[str],
        now: float,
    ) -> LaneState | None:
        """The lane that may take the request and holds the most of its ``blocks`` (at
        least ``min_match``; ``found``: the index's holders); among lanes level with it,
        the one sent it first. ``least``: least-load's lane, which may take it."""
        depth = len(found)
        enough = self._enough[blocks] if blocks <= MAX_BLOCKS else self._least(blocks)
        ready, micros = self._ready, now * 1e6
        while depth >= enough:
            level = found[depth - 1]
            for lane in level:
                # _may_take, inlined: it runs for every request that matches
                if lane is least or (
                    lane in ready
                    and name in lane.names
                    and lane.info.instance not in tried
                    and lane.ejected_until <= micros
                    and lane.queue(now, self.stale_after) < self.limit
                ):
                    self._level = level
                    return lane
            depth -= 1
        return None

    def _spare(
        self,
        name: str,
        lane: LaneState,
        least: LaneState,
        tried: Collection[str],
        now: float,
    ) -> LaneState | None:
        """Another lane level with ``lane`` on the match that load lets take the request
        (the least loaded of them), or ``None``."""
        spare: LaneState | None = None
        for other in self._level:
            if (
                other is not lane
                and (spare is None or other.outstanding < spare.outstanding)
                and self._may_take(other, name, tried, now)
            ):
                spare = other
        if spare is None or (
            spare is not least and self._unbalanced(spare, least, now) is not None
        ):
            return None
        return spare

    def _may_take(self, lane: LaneState, name: str, tried: Collection[str], now: float) -> bool:
        """Whether ``lane`` may take a request for ``name``, as least-load's rules say."""
        return (
            lane in self._ready
            and name in lane.names
            and lane.info.instance not in tried
            and lane.ejected_until <= now * 1e6
            and lane.queue(now, self.stale_after) < self.limit
        )

    def _unbalanced(self, lane: LaneState, least: LaneState, now: float) -> str | None:
        """Why least-load's lane should have the request rather than ``lane`` (``None``:
        it should not)."""
        busy, idle = lane.outstanding, least.outstanding
        if busy > 0 and idle == 0:
            return Choice.BALANCE_IDLE
        if self.policy.outweighs(busy, idle):
            return Choice.BALANCE
        stale = self.stale_after
        if _waiting(lane, now, stale) > 0 and _waiting(least, now, stale) == 0:
            return Choice.BALANCE_QUEUE
        return None

    def match(self, name: str, keys: Sequence[int], now: float) -> Holders:
        """The lanes that hold the most of the prompt (at least ``min_match``), the one
        sent it first before the others; ``()`` when none does. Only lanes in the rotation,
        not ejected and serving ``name`` count; their queues do not (:mod:`._lane_slots`
        asks which lanes a waiting request suits, whatever they have in flight)."""
        if self.table.generation != self._generation:
            self._follow_table()
        found = self.index.holders(keys, now)
        enough = self._least(len(keys))
        ready, now_us = self._ready, now * 1e6
        for depth in range(len(found), enough - 1, -1):
            held = tuple(
                lane
                for lane in found[depth - 1]
                if lane in ready and name in lane.names and lane.ejected_until <= now_us
            )
            if held:
                return held
        return ()


def _waiting(lane: LaneState, now: float, stale_after: float) -> int:
    """The lane's own queue by a fresh sample (0 without one)."""
    waiting = lane.waiting
    if waiting is None or now - lane.sampled_at > stale_after:
        return 0
    return waiting
