"""The names each lane answers to, learned from its own ``GET /v1/models``.

vLLM serves its model under every ``--served-model-name`` and each LoRA adapter of
``--lora-modules`` under the adapter's name; a request may name any of them, and
``/v1/models`` lists them all (adapters loaded at run time too). The endpoint asks each
lane when it joins the rotation, then every ``REFRESH`` seconds, so that a request for
an alias or an adapter is routed to the lanes that serve it (issue 20). ``/health``
answers 503 until every ready lane has been asked once (answered or not), so a worker
started when the endpoint is ready never meets a name the endpoint has not learned yet.

A lane that does not answer (an older server, a key the endpoint lacks) is asked again
at the next refresh; meanwhile it answers to its unit's names. One process asks for all
(the endpoint, or the parent of its workers, which passes the names on).
"""

from __future__ import annotations

import json
import logging
import math
import time

import trio

from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneInfo, LaneState, LaneTable, Names
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
    """Ask each lane that is due, wait for a change or the next due time, until cancelled.

    ``task_status.started()`` once the lanes of the table as it was at the start were
    asked, so that an endpoint that serves has learned its static lanes' names.
    """
    asked: dict[LaneInfo, float] = {}
    started = False
    while True:
        now = time.monotonic()
        due = [s for s in lanes.states() if now - asked.get(s.info, -math.inf) >= REFRESH]
        if due:
            async with trio.open_nursery() as nursery:
                for state in due:
                    asked[state.info] = now
                    nursery.start_soon(_ask, config, lanes, state)
        if not started:
            task_status.started()
            started = True
        next_due = min((asked[s.info] + REFRESH for s in lanes.states()), default=math.inf)
        with trio.move_on_at(trio.current_time() + max(0.0, next_due - time.monotonic())):
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
