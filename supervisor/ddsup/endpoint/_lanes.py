"""The live set of lanes the endpoint routes to, and each lane's load.

The controller's feed (or a static list) changes the set at any time with
:meth:`LaneTable.set_ready`, :meth:`LaneTable.change`, :meth:`LaneTable.add` and
:meth:`LaneTable.remove`; the
request path only reads a per-model tuple that is rebuilt on each change, so a lane that
stops being ready leaves the rotation at once while requests already sent to it finish
on the :class:`LaneState` they hold.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ddsup.endpoint._upstream import ConnectionPool


@dataclass(frozen=True)
class LaneInfo:
    """One lane as the endpoint sees it: ``url`` is its base URL, ``http://host:port``."""

    instance: str
    model: str
    url: str


class LaneState:
    """A lane's mutable load: requests in flight through us and its last queue sample."""

    __slots__ = ("info", "outstanding", "pool", "sampled_at", "waiting")

    def __init__(self, info: LaneInfo, max_idle: int) -> None:
        self.info = info
        self.outstanding = 0
        self.waiting: int | None = None  # vllm:num_requests_waiting, None = no good sample
        self.sampled_at = float("-inf")
        self.pool = ConnectionPool(info.url, max_idle)

    def queue(self, now: float, stale_after: float) -> int:
        """Outstanding requests, or the lane's own waiting count when a fresh sample says more."""
        waiting = self.waiting
        if waiting is not None and now - self.sampled_at <= stale_after:
            return max(self.outstanding, waiting)
        return self.outstanding

    def record_sample(self, waiting: int | None, now: float) -> None:
        """A good sample (``waiting``), or ``None`` when the lane's /metrics failed."""
        self.waiting = waiting
        self.sampled_at = now


class LaneTable:
    """Ready lanes by model, plus every model the deployment is known to serve.

    A model stays known after its last lane leaves, so requests for it get "no ready
    lane" (503, retry later) rather than "unknown model" (404, a client bug).
    """

    def __init__(
        self, lanes: Iterable[LaneInfo] = (), *, models: Iterable[str] = (), max_idle: int = 256
    ) -> None:
        self._max_idle = max_idle
        self._lanes: dict[str, LaneState] = {}
        self._by_model: dict[str, tuple[LaneState, ...]] = {}
        self._known: set[str] = set(models)
        self._turns: dict[str, int] = {}
        self.set_ready(lanes)

    def set_ready(self, lanes: Iterable[LaneInfo]) -> None:
        """Make exactly ``lanes`` the ready set; lanes kept keep their load and connections."""
        wanted = {lane.instance: lane for lane in lanes}
        for instance, state in list(self._lanes.items()):
            if wanted.get(instance) != state.info:
                self._drop(instance)
        for lane in wanted.values():
            if lane.instance not in self._lanes:
                self._lanes[lane.instance] = LaneState(lane, self._max_idle)
        self._rebuild()

    def change(self, added: Iterable[LaneInfo], removed: Iterable[str]) -> None:
        """Lanes joined (replacing any of the same instance name) and left, at once."""
        for instance in removed:
            if instance in self._lanes:
                self._drop(instance)
        for lane in added:
            if lane.instance in self._lanes:
                self._drop(lane.instance)
            self._lanes[lane.instance] = LaneState(lane, self._max_idle)
        self._rebuild()

    def add(self, lane: LaneInfo) -> None:
        """One lane became ready (a lane with the same instance name is replaced)."""
        if lane.instance in self._lanes:
            self._drop(lane.instance)
        self._lanes[lane.instance] = LaneState(lane, self._max_idle)
        self._rebuild()

    def remove(self, instance: str) -> None:
        """One lane stopped being ready; unknown names are ignored (the feed may repeat)."""
        if instance in self._lanes:
            self._drop(instance)
            self._rebuild()

    def declare_models(self, models: Iterable[str]) -> None:
        """Models the deployment serves even while none of their lanes is ready."""
        self._known.update(models)

    def _drop(self, instance: str) -> None:
        self._lanes.pop(instance).pool.close_idle(retire=True)

    def _rebuild(self) -> None:
        by_model: dict[str, list[LaneState]] = {}
        for state in self._lanes.values():
            by_model.setdefault(state.info.model, []).append(state)
        self._by_model = {model: tuple(states) for model, states in by_model.items()}
        self._known.update(by_model)

    def ready(self, model: str) -> tuple[LaneState, ...]:
        """The ready lanes of ``model`` (empty when none or unknown)."""
        return self._by_model.get(model, ())

    def is_known(self, model: str) -> bool:
        return model in self._known

    def known_models(self) -> list[str]:
        return sorted(self._known)

    def ready_models(self) -> list[str]:
        return sorted(self._by_model)

    def states(self) -> list[LaneState]:
        """Every ready lane (for the metrics sampler and /metrics)."""
        return list(self._lanes.values())

    def next_turn(self, model: str) -> int:
        """A per-model counter that rotates the choice among equally loaded lanes."""
        turn = self._turns.get(model, 0)
        self._turns[model] = turn + 1
        return turn

    def close(self) -> None:
        """Close every idle upstream connection (the server is shutting down)."""
        for state in self._lanes.values():
            state.pool.close_idle(retire=False)
