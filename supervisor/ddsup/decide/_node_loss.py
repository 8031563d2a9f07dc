"""Losing a node: what it means is what its units' ``on_failure`` says. Pure functions.

A node is lost when its agent is (its connection ends, or its process does, or it says
nothing for ``--agent-timeout``). Nothing it ran can report any more, so:

- **Survivable or not.** When every instance the node's agent ran has
  ``on_failure = "continue"``, the run goes on without them; otherwise (the default,
  ``stop-all``) the loss ends the run with 70, the cause naming ``agent on NODE``.
- **Survived.** Each instance of the node that had not ended is recorded as ``failed``
  (``lost with its node: …``), exactly as if it had failed for good where it ran: it
  leaves the endpoint's rotation, the other ranks of a multi-node replica are stopped,
  units that ``require`` it are stopped.
- **Lanes left.** With an endpoint, every model must keep at least ``min_ready`` lane
  replicas that have not ended for good (failed, lost with a node, or exited): below
  that the endpoint could never again have its quorum, so the run ends with 70, the
  cause naming ``lanes of MODEL``. This holds for lanes that fail for good with
  ``on_failure = "continue"`` as much as for lost nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from ddsup.decide._ordering import agent_instances
from ddsup.plan import Plan
from ddsup.record import InstanceRecord, InstanceState, UnitFailure, UnitTransition
from ddsup.units import EndpointSection, UnitSet


def lost_transitions(
    units: UnitSet,
    plan: Plan,
    node: str,
    reason: str,
    records: Mapping[str, InstanceRecord],
    final: Collection[str],
) -> list[UnitTransition]:
    """``failed`` for every instance of the lost ``node`` that had not ended yet."""
    out = []
    for planned in agent_instances(units, plan, node):
        if planned.instance in final:
            continue
        record = records.get(planned.instance, InstanceRecord())
        out.append(
            UnitTransition(
                instance=planned.instance,
                node=node,
                from_state=record.state,
                to_state=InstanceState.FAILED,
                reason=f"lost with its node: {reason}",
                restarts=record.restarts,
            )
        )
    return out


def lanes_short(
    units: UnitSet, lanes: Mapping[str, Sequence[str]], final: Collection[str]
) -> UnitFailure | None:
    """The cause when some model has fewer lanes left than ``min_ready`` (None: enough)."""
    endpoint = units.endpoint
    if endpoint is None:
        return None
    min_ready = (endpoint.endpoint or EndpointSection()).min_ready
    for model, instances in sorted(lanes.items()):
        left = sum(1 for i in instances if i not in final)
        needed = min_ready.required(len(instances))
        if left < needed:
            return UnitFailure(
                f"lanes of {model}",
                f"{left} of {len(instances)} lanes of {model} are left "
                f"(the others failed for good or were lost with their node); "
                f"min_ready needs {needed}",
            )
    return None
