"""What a unit process sees: its environment and the values of its ``{specifiers}``.

Units inherit the environment of ``ddsup start`` (as ``srun --export=ALL`` does), then
``environment`` is added, ``unset_environment`` removed, and ddsup's own variables set
last so a unit cannot accidentally fake its identity. Variables that only ddsup's own
processes need (the control secret) are never passed on.

API keys reach only the processes that use them (docs/security.md): the variable an
``[endpoint] api_key_env`` names reaches the endpoint and the worker, the one a
``[lane] api_key_env`` names reaches that lane and the endpoint; every other unit, and
every node agent, is started without them (:func:`withheld_variables`).

``SPT_NOENV=1`` is set too: it keeps the ``setproctitle`` package (vLLM names its engine
processes with it) from overwriting ``/proc/PID/environ``, where the run's tag is read
(docs/no-orphans.md). A unit can still clear it; the other no-orphan layers do not rely
on the tag.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from ddsup._errors import EXIT_REQUEUE
from ddsup.channel import ADDRESS_ENV, SECRET_ENV
from ddsup.plan import Node, Plan, PlannedInstance
from ddsup.units import Unit, UnitSet, UnitType, resolve_specifiers

INVOCATION_ENV = "DDSUP_INVOCATION_ID"
NO_KEY = "ddsup-no-key"
"""The worker's ``OPENAI_API_KEY`` when the endpoint requires none: the stock OpenAI
client refuses to start without a key, and the endpoint ignores one it does not ask for."""
PRIVATE_VARIABLES = (SECRET_ENV, ADDRESS_ENV)


@dataclass(frozen=True)
class RunContext:
    """Facts about the run that every unit instance's specifiers and environment use."""

    invocation_id: str
    state_dir: str
    unit_dir: str
    job_id: str
    endpoint_url: str | None = None
    api_key: str | None = None  # the endpoint's key, handed to the worker only
    attempt: int = 0  # the Slurm job's attempt: 0, then 1, 2, … after each requeue


def specifier_context(
    unit: Unit, planned: PlannedInstance, plan: Plan, run: RunContext
) -> dict[str, str]:
    """Values of every specifier for one instance (see docs/units.md)."""
    node = plan.node(planned.node)
    values: dict[str, str] = {
        "unit": unit.base_name,
        "instance": planned.instance,
        "node": node.name,
        "host": node.address,
        "port": "" if planned.port is None else str(planned.port),
        "gpus": str(len(planned.gpus)),
        "replica": "" if planned.replica is None else str(planned.replica),
        "rank": "" if planned.rank is None else str(planned.rank),
        "nnodes": str(planned.nnodes),
        "master_addr": planned.master_addr or "",
        "master_port": "" if planned.master_port is None else str(planned.master_port),
        "model": unit.lane.model if unit.lane else "",
        "state_dir": run.state_dir,
        "job_id": run.job_id,
        "endpoint_url": run.endpoint_url or "",
        "unit_dir": run.unit_dir,
        "attempt": str(run.attempt),
    }
    if unit.lane is not None:
        lane = unit.lane
        values.setdefault("model_path", lane.model_path or "")
        values["model_path"] = lane.model_path or ""
        values["stagger"] = f"{lane.stagger:g}s"
        values["lead_standoff"] = f"{lane.lead_standoff:g}s"
        values["replicas"] = "auto" if lane.replicas is None else str(lane.replicas)
        values["nodes"] = str(lane.nodes)
        values["api_key_env"] = lane.api_key_env or ""
    return values


def key_grants(units: UnitSet) -> dict[str, frozenset[str]]:
    """Each variable that names an API key → the units that may see it."""
    grants: dict[str, set[str]] = {}
    endpoint, worker = units.endpoint, units.worker
    section = endpoint.endpoint if endpoint is not None else None
    if endpoint is not None and section is not None and section.api_key_env:
        users = {endpoint.name} | ({worker.name} if worker is not None else set())
        grants.setdefault(section.api_key_env, set()).update(users)
    for lane in units.lanes:
        if lane.lane is not None and lane.lane.api_key_env:
            users = {lane.name} | ({endpoint.name} if endpoint is not None else set())
            grants.setdefault(lane.lane.api_key_env, set()).update(users)
    return {name: frozenset(users) for name, users in grants.items()}


def withheld_variables(units: UnitSet, unit: Unit | None = None) -> frozenset[str]:
    """Key variables ``unit`` may not see; ``None``: a node agent (it runs lanes only)."""
    users = {unit.name} if unit is not None else {lane.name for lane in units.lanes}
    return frozenset(name for name, granted in key_grants(units).items() if not granted & users)


def unit_environment(
    base: Mapping[str, str],
    unit: Unit,
    planned: PlannedInstance,
    context: Mapping[str, str],
    run: RunContext,
    withheld: Collection[str] = (),
    *,
    node: Node | None = None,
) -> dict[str, str]:
    """The full environment of one unit instance's process (without ``withheld``).

    A lane's ``CUDA_VISIBLE_DEVICES`` holds its GPUs as the job was given them on
    ``node`` (its planned node): position ``i`` is the node's ``i``-th entry, verbatim.
    """
    hidden = {*PRIVATE_VARIABLES, *withheld}
    env = {k: v for k, v in base.items() if k not in hidden}
    for key, value in unit.service.environment.items():
        env[key] = resolve_specifiers(value, context)
    for key in unit.service.unset_environment:
        env.pop(key, None)
    env.update(
        {
            INVOCATION_ENV: run.invocation_id,
            "DDSUP_UNIT": unit.base_name,
            "DDSUP_INSTANCE": planned.instance,
            "DDSUP_NODE": planned.node,
            "DDSUP_STATE_DIR": run.state_dir,
            "DDSUP_ATTEMPT": str(run.attempt),
            "SPT_NOENV": "1",
        }
    )
    if unit.type is UnitType.LANE:
        device = node.device if node is not None else str
        env["CUDA_VISIBLE_DEVICES"] = ",".join(device(g) for g in planned.gpus)
        env["DDSUP_LANE_REPLICA"] = str(planned.replica)
        env["DDSUP_LANE_RANK"] = str(planned.rank or 0)
        env["DDSUP_LANE_PORT"] = "" if planned.port is None else str(planned.port)
    if unit.type is UnitType.WORKER:
        env["DDSUP_REQUEUE_EXIT"] = str(EXIT_REQUEUE)  # exit with it to ask for a requeue
    if unit.type is UnitType.WORKER and run.endpoint_url:
        env["DDSUP_ENDPOINT_URL"] = run.endpoint_url
        env["OPENAI_BASE_URL"] = run.endpoint_url.rstrip("/") + "/v1"
        env["OPENAI_API_KEY"] = NO_KEY if run.api_key is None else run.api_key
    return env
