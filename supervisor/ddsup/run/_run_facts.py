"""What a run lends its processes: the facts of the run, and how agents reach it.

Pure functions of the run's values, shared by the controller's own node (the endpoint
and the worker), the agents' :class:`~ddsup.channel._messages.Setup` and the agents'
environment. Secrets appear in two places only: the worker's ``api_key`` and the agents'
``DDSUP_CONTROL_SECRET``; never in a ``Setup``, a plan or an event.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV
from ddsup.channel._messages import Setup
from ddsup.plan._model import Plan
from ddsup.plan._resolve import Allocation, LauncherKind
from ddsup.service._environment import INVOCATION_ENV, RunContext
from ddsup.units._model import UnitSet


def run_context(
    units: UnitSet,
    plan: Plan,
    *,
    invocation_id: str,
    state_dir: str,
    unit_dir: str,
    with_key: bool,
    environ: Mapping[str, str] = os.environ,
) -> RunContext:
    """Facts of the run for specifiers and environments; the key for the worker only."""
    api_key = None
    section = units.endpoint.endpoint if units.endpoint else None
    if with_key and section is not None and section.api_key_env:
        api_key = environ.get(section.api_key_env)
    return RunContext(
        invocation_id=invocation_id,
        state_dir=state_dir,
        unit_dir=unit_dir,
        job_id=environ.get("SLURM_JOB_ID", invocation_id[:12]),
        endpoint_url=plan.endpoint_url,
        api_key=api_key,
    )


def agent_setup(plan: Plan, run: RunContext) -> Setup:
    """What an admitted agent is told once the run has its plan (never a secret)."""
    return Setup(
        plan=plan,
        invocation_id=run.invocation_id,
        state_dir=run.state_dir,
        unit_dir=run.unit_dir,
        job_id=run.job_id,
        endpoint_url=run.endpoint_url,
    )


def agent_env(
    allocation: Allocation,
    *,
    invocation_id: str,
    control_port: int | None,
    secret: str,
    environ: Mapping[str, str] = os.environ,
) -> dict[str, str]:
    """The agents' environment: ddsup start's, their run's id and where to connect."""
    host = "127.0.0.1"
    if allocation.launcher is LauncherKind.SLURM:
        host = environ.get("DDSUP_CONTROL_HOST") or allocation.client_address
    return {
        **environ,
        INVOCATION_ENV: invocation_id,
        ADDRESS_ENV: f"{host}:{control_port}",
        SECRET_ENV: secret,
    }
