"""The endpoint's rotation as the run's state keeps it, event by event (pure, no I/O).

Which serving lanes (rank 0 of a lane replica) are ready, how many of each model (the
endpoint's quorum), and which of the ready ones the endpoint may send requests to: not
those a ``ddsup restart`` holds out (``_restarts``). An event touches one lane, or the
few a restart begins on; :meth:`LaneRotation.update` looks at those alone and says what
changed as one :class:`LanesChanged`, so an event costs the same at 8 lanes or 1,024
(before, every event rebuilt the whole set by walking the plan). A new subscriber of the
feed gets the whole set (:meth:`LaneRotation.snapshot`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ddsup.channel import LanesChanged, LanesUpdate, ReadyLane
from ddsup.plan import Plan
from ddsup.record import InstanceState
from ddsup.units import UnitSet


class LaneRotation:
    """Ready serving lanes and the rotation, kept as their instances change."""

    def __init__(self, units: UnitSet, plan: Plan, lane_models: Mapping[str, list[str]]) -> None:
        self._model_of = {i: m for m, names in lane_models.items() for i in names}
        self._models = tuple(sorted(lane_models))
        self._served_names = plan.served_names()
        self._keys = {u.name: u.lane.api_key_env for u in units.lanes if u.lane is not None}
        self._ready: set[str] = set()
        self._ready_count = dict.fromkeys(lane_models, 0)
        self._rotation: dict[str, ReadyLane] = {}
        self.use_plan(plan)

    def use_plan(self, plan: Plan) -> None:
        """The plan with its ports (preflight picks ``port = "auto"`` ones)."""
        self._plan = plan
        self._by_name = {p.instance: p for p in plan.instances}
        self._addresses = {node.name: node.address for node in plan.nodes}

    def ready_count(self, model: str) -> int:
        """Serving lanes of ``model`` ready now (in the rotation or held out)."""
        return self._ready_count[model]

    def short_of(self, min_ready: Mapping[str, int]) -> str | None:
        """The endpoint's ``min_ready`` not met yet, in words; None when it is, model by model."""
        short = [
            f"{model} {self._ready_count[model]} of {n} lanes ready"
            for model, n in min_ready.items()
            if self._ready_count[model] < n
        ]
        return "for min_ready: " + ", ".join(short) if short else None

    def update(
        self,
        instances: Iterable[str],
        state_of: Callable[[str], InstanceState],
        held_out: Callable[[str], bool],
    ) -> LanesChanged | None:
        """``instances`` may have changed (their state, or a restart's hold): what joined
        and left the rotation because of it, or None when nothing did."""
        added: list[ReadyLane] = []
        removed: list[str] = []
        for instance in dict.fromkeys(instances):
            model = self._model_of.get(instance)
            if model is None:
                continue  # not a serving lane
            ready = state_of(instance) is InstanceState.READY
            if ready != (instance in self._ready):
                self._ready.symmetric_difference_update((instance,))
                self._ready_count[model] += 1 if ready else -1
            serving = ready and not held_out(instance)
            if serving == (instance in self._rotation):
                continue
            if serving:
                lane = self._rotation[instance] = self._lane(instance, model)
                added.append(lane)
            else:
                del self._rotation[instance]
                removed.append(instance)
        if not added and not removed:
            return None
        return LanesChanged(added=tuple(added), removed=tuple(removed))

    def snapshot(self) -> LanesUpdate:
        """The whole rotation now, in plan order (what a new feed subscriber gets)."""
        lanes = self._rotation
        ready = tuple(lanes[p.instance] for p in self._plan.instances if p.instance in lanes)
        return LanesUpdate(ready, self._models, self._served_names)

    def _lane(self, instance: str, model: str) -> ReadyLane:
        planned = self._by_name[instance]
        return ReadyLane(
            instance,
            model,
            f"http://{self._addresses[planned.node]}:{planned.port}",
            api_key_env=self._keys.get(planned.unit),
            served_names=planned.served_names or (model,),
        )
