"""What a run lends its processes: specifier values and the agents' environment.

Pure functions of the run's facts (:class:`RunFacts`), its units and its plan, so the
controller stays a shell. Imported before the agents are launched (``_head_start``), so
no channel messages here: an agent's :class:`~ddsup.channel._messages.Setup` is
``_controller.agent_setup``'s. Keys go only where they are used (``service._environment``):
the endpoint's key to the worker as ``OPENAI_API_KEY``, never to an agent; the control
secret to the agents and the endpoint's feed, never into a unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ddsup.channel import ADDRESS_ENV, SECRET_ENV
from ddsup.plan import Plan
from ddsup.record import ControlAddress
from ddsup.service import INVOCATION_ENV, RunContext, withheld_variables
from ddsup.units import UnitSet


@dataclass(frozen=True)
class RunFacts:
    """One run's identity and where its processes reach it."""

    invocation_id: str
    state_dir: str
    unit_dir: str
    control: ControlAddress
    agent_timeout: float  # how long an agent's silence is tolerated (--agent-timeout)
    attempt: int  # the job's attempt in its state dir (``record._attempts``)
    rehearse: bool  # lanes run fake-vllm (``ddsup start --rehearse``)
    secret: str = field(repr=False)


def attempt_of(environ: Mapping[str, str]) -> int:
    """Slurm's count of the job's requeues: ``SLURM_RESTART_COUNT`` (0 on its first run,
    or outside Slurm). ``DDSUP_ATTEMPT`` counts the attempts in the state dir instead."""
    value = environ.get("SLURM_RESTART_COUNT", "").strip()
    return int(value) if value.isdigit() else 0


def run_context(
    facts: RunFacts, units: UnitSet, plan: Plan, environ: Mapping[str, str], *, with_key: bool
) -> RunContext:
    """Facts for specifiers and environments; the endpoint's key (for the worker) if asked."""
    api_key = None
    section = units.endpoint.endpoint if units.endpoint else None
    if with_key and section is not None and section.api_key_env:
        api_key = environ.get(section.api_key_env)
    return RunContext(
        invocation_id=facts.invocation_id,
        state_dir=facts.state_dir,
        unit_dir=facts.unit_dir,
        job_id=environ.get("SLURM_JOB_ID", facts.invocation_id[:12]),
        endpoint_url=plan.endpoint_url,
        api_key=api_key,
        attempt=facts.attempt,
    )


def agent_environment(
    facts: RunFacts, units: UnitSet, environ: Mapping[str, str]
) -> dict[str, str]:
    """The agents' environment: ddsup start's (no key they do not run), id, where to connect."""
    withheld = withheld_variables(units)  # agents run lanes: their keys only
    return {
        **{k: v for k, v in environ.items() if k not in withheld},
        INVOCATION_ENV: facts.invocation_id,
        **feed_environment(facts),
    }


def feed_environment(facts: RunFacts) -> dict[str, str]:
    """Where to reach ``ddsup start`` and how to authenticate (agents, the endpoint's feed)."""
    return {ADDRESS_ENV: str(facts.control), SECRET_ENV: facts.secret}
