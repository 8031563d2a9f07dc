"""The replica policy: a multi-node replica lives and dies as one.

torch.distributed cannot continue with a rank missing. When one rank of a replica
restarts, its running peers get their unit's ``kill_signal`` and go through their own
restart policy (same unit, same policy), so the replica restarts as a whole; when one
fails for good, its peers are stopped, so it fails as a whole.

This is the one place that says so: :func:`take_down_peers` is called by the run's state
for every ``restarting`` or ``failed`` transition while the run is not stopping.
"""

from __future__ import annotations

from collections.abc import Mapping

from ddsup.plan._model import Plan
from ddsup.record._instance import InstanceRecord
from ddsup.record._states import RUNNING, InstanceState
from ddsup.run._run_inputs import Decision, Host, SignalOn, StopOn
from ddsup.units._model import UnitSet


def take_down_peers(
    units: UnitSet,
    plan: Plan,
    records: Mapping[str, InstanceRecord],
    instance: str,
    to_state: InstanceState,
) -> list[Decision]:
    """What ``instance`` going to ``to_state`` means for the other ranks of its replica."""
    if to_state not in (InstanceState.RESTARTING, InstanceState.FAILED):
        return []
    replica = instance.split(":", 1)[0]
    decisions: list[Decision] = []
    for peer in plan.instances:
        if peer.replica_name != replica or peer.instance == instance or peer.nnodes <= 1:
            continue
        record = records.get(peer.instance)
        if record is None or record.state not in RUNNING:
            continue
        host = Host(peer.node, agent=True)  # ranks are lanes: they run in node agents
        if to_state is InstanceState.FAILED:
            decisions.append(StopOn(host, (peer.instance,)))
        else:
            signum = int(units.by_name(peer.unit).service.kill_signal)
            decisions.append(SignalOn(host, (peer.instance,), signum))
    return decisions
