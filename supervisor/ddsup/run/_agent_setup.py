"""What a node agent is given: its environment (where to connect back, with what secret)
and, once it said hello, its :class:`~ddsup.channel._messages.Setup`.

Kept apart from the controller so that what reaches an agent is in one place: the
secret travels only in the environment, never in a message, a plan or a log.
"""

from __future__ import annotations

import os

from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV
from ddsup.channel._messages import Setup
from ddsup.plan._model import Plan
from ddsup.plan._resolve import Allocation, LauncherKind
from ddsup.service._environment import INVOCATION_ENV, RunContext


def agent_env(
    allocation: Allocation, invocation_id: str, control_port: int | None, secret: str
) -> dict[str, str]:
    """The agents' environment: ddsup start's, their run's id and where to connect."""
    host = "127.0.0.1"
    if allocation.launcher is LauncherKind.SLURM:
        host = os.environ.get("DDSUP_CONTROL_HOST") or allocation.client_address
    return {
        **os.environ,
        INVOCATION_ENV: invocation_id,
        ADDRESS_ENV: f"{host}:{control_port}",
        SECRET_ENV: secret,
    }


def agent_setup(run: RunContext, node_plan: Plan) -> Setup:
    """What the agent of one node is told: the run's facts (never a secret) and its node's
    part of the plan (``node_plan``), so an agent's set-up costs the same at 8 nodes or
    1,000."""
    return Setup(
        plan=node_plan,
        invocation_id=run.invocation_id,
        state_dir=run.state_dir,
        unit_dir=run.unit_dir,
        job_id=run.job_id,
        endpoint_url=run.endpoint_url,
    )
