"""The lanes the endpoint sees: the quorum it starts on, and the set it routes to.

Pure functions of the run's facts, for :class:`~ddsup.run._run_state.RunState`: which
lanes are ready (rank 0 of each lane replica, the one that serves HTTP) is the run's
state; what the endpoint is told of them (address, model, names, the name of the
variable with the lane's key, never its value) is decided here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ddsup.channel._messages import LanesUpdate, ReadyLane
from ddsup.plan._model import Plan
from ddsup.units._model import EndpointSection, UnitSet


def quorum(
    units: UnitSet, lane_models: Mapping[str, Sequence[str]], ready: Callable[[str], bool]
) -> bool:
    """``min_ready`` lanes of every model ready now (the endpoint's condition to start)."""
    endpoint = units.endpoint
    section = (endpoint.endpoint if endpoint else None) or EndpointSection()
    for instances in lane_models.values():
        if sum(1 for i in instances if ready(i)) < section.min_ready.required(len(instances)):
            return False
    return True


def lanes_update(
    plan: Plan,
    models: tuple[str, ...],
    model_of: Mapping[str, str],
    lane_keys: Mapping[str, str | None],
    served_names: tuple[str, ...],
    in_rotation: Callable[[str], bool],
) -> LanesUpdate:
    """The set the endpoint routes to: each serving lane in the rotation, in plan order."""
    lanes = tuple(
        ReadyLane(
            p.instance,
            model_of[p.instance],
            f"http://{plan.node(p.node).address}:{p.port}",
            api_key_env=lane_keys.get(p.unit),
            served_names=p.served_names or (model_of[p.instance],),
        )
        for p in plan.instances
        if p.instance in model_of and in_rotation(p.instance)
    )
    return LanesUpdate(lanes, models, served_names)
