"""The names each lane answers to, learned from its own ``GET /v1/models``.

vLLM serves its model under every ``--served-model-name`` and each LoRA adapter of
``--lora-modules`` under the adapter's name; a request may name any of them, and
``/v1/models`` lists them all (adapters loaded at run time too). The endpoint asks each
lane when it joins the rotation (again when it joins again), then every ``REFRESH``
seconds, so that a request for an alias or an adapter is routed to the lanes that serve
it. ``/health`` answers 503 until every ready lane has been asked once (answered or not), so a worker
started when the endpoint is ready never meets a name the endpoint has not learned yet.

A lane that does not answer (an older server, a key the endpoint lacks) is asked again
at the next refresh; meanwhile it answers to its unit's names. One process asks for all
(the endpoint, or the parent of its workers, which passes the names on).
"""

from __future__ import annotations

import heapq
import itertools
import json
import logging
import math

import trio

from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneState, LaneTable, Names
from ddsup.endpoint._upstream import UpstreamError, fetch

log = logging.getLogger("ddsup.endpoint")

REFRESH = 30.0  # seconds between two askings of one lane
MAX_NAMES = 1024  # names kept per lane
MAX_NAME = 512  # characters per name


async def learn_lane_names(
    config: EndpointConfig,
    lanes: LaneTable,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Ask each lane when it joins and every ``REFRESH`` seconds after, until cancelled.

    The lanes that join come from the table as they join (``watch_changes``), the
    refreshes from a heap of due times, so a wake-up costs the lanes it asks, not a walk
    of the table (quadratic in a start whose lanes join one by one). A lane that joins
    again is asked again.
    ``task_status.started()`` once the lanes of the table as it was at the start were
    asked, so that an endpoint that serves has learned its static lanes' names.
    """
    refreshes: list[tuple[float, int, LaneState]] = []  # (due, order of asking, lane)
    order = itertools.count()
    started = False
    due = lanes.states()  # the lanes of the start
    with lanes.watch_changes() as touched:
        while True:
            now = trio.current_time()
            for instance in touched.instances:  # a lane there now joined since: ask it
                if (state := lanes.state_of(instance)) is not None:
                    due.append(state)
            touched.instances.clear()
            touched.learned.clear()  # what asking taught the table: not the learner's
            while refreshes and refreshes[0][0] <= now:
                state = heapq.heappop(refreshes)[2]
                if lanes.state_of(state.info.instance) is state:  # not left or replaced
                    due.append(state)
            if due:
                async with trio.open_nursery() as nursery:
                    for state in due:
                        heapq.heappush(refreshes, (now + REFRESH, next(order), state))
                        nursery.start_soon(_ask, config, lanes, state)
            due = []
            if not started:
                task_status.started()
                started = True
            if touched.instances:
                continue  # joined (or left) while others were asked: look at once
            with trio.move_on_at(refreshes[0][0] if refreshes else math.inf):
                await lanes.wait_changed()


async def _ask(config: EndpointConfig, lanes: LaneTable, state: LaneState) -> None:
    names: Names | None = None
    with trio.move_on_after(config.metrics_timeout):
        try:
            status, body = await fetch(state.pool, "/v1/models", config.metrics_timeout)
            if status == 200:
                names = parse_model_list(body)
            else:
                log.debug("lane %s: /v1/models answered %d", state.info.instance, status)
        except UpstreamError as err:
            log.debug("lane %s: /v1/models failed: %s", state.info.instance, err)
    lanes.learn_names(state.info, names)


def parse_model_list(body: bytes) -> Names | None:
    """The ``id`` of each card of an OpenAI model list, ``None`` when it is not one."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        return None
    names = [card.get("id") for card in cards if isinstance(card, dict)]
    kept = [n for n in names if isinstance(n, str) and 0 < len(n) <= MAX_NAME and n.isprintable()]
    return tuple(dict.fromkeys(kept))[:MAX_NAMES]
