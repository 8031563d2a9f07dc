"""What an agent that said hello is told once the run has a plan (:class:`Setup`).

Apart from ``_run_facts`` because it needs the channel's messages, which ``ddsup start``
imports only once its agents are launched (``_head_start``).
"""

from __future__ import annotations

import os

from ddsup.channel import Setup
from ddsup.controller._run_facts import RunFacts, run_context
from ddsup.plan import Plan
from ddsup.units import UnitSet


def agent_setup(facts: RunFacts, units: UnitSet, plan: Plan) -> Setup:
    """What an agent that said hello is told: the run's facts (never a secret) and
    ``plan``, its node's part of the plan (``RunState.node_plan``), so an agent's set-up
    costs the same at 8 nodes or 1,000 (the whole plan is 2 MB at 1,000 × 8)."""
    run = run_context(facts, units, plan, os.environ, with_key=False)
    return Setup(
        plan=plan,
        invocation_id=run.invocation_id,
        state_dir=run.state_dir,
        unit_dir=run.unit_dir,
        job_id=run.job_id,
        endpoint_url=run.endpoint_url,
        agent_timeout=facts.agent_timeout,
        attempt=run.attempt,
        rehearse=facts.rehearse,
    )
