"""What a run lends its processes: the facts for specifiers and environments, an agent's
:class:`Setup`, and the agents' environment.

One place decides what each kind of process is told: units get the run's facts (the
endpoint's key only for the worker), agents get the same facts and the silence limit of
their connection, never a secret in :class:`Setup`; the control secret and address reach
agents through their environment only.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ddsup.channel._channel import ADDRESS_ENV, SECRET_ENV
from ddsup.channel._messages import Setup
from ddsup.plan._model import Plan
from ddsup.plan._resolve import Allocation, LauncherKind
from ddsup.service._environment import INVOCATION_ENV, RunContext
from ddsup.units._model import UnitSet


@dataclass(frozen=True)
class RunFacts:
    """The facts of one ``ddsup start`` that its processes are given."""

    invocation_id: str
    state_dir: str
    unit_dir: str
    agent_timeout: float
    attempt: int  # the Slurm job's attempt (``SLURM_RESTART_COUNT``)

    def context(self, units: UnitSet, plan: Plan, *, with_key: bool) -> RunContext:
        """Facts for specifiers and environments; the endpoint's key for the worker only."""
        api_key = None
        section = units.endpoint.endpoint if units.endpoint else None
        if with_key and section is not None and section.api_key_env:
            api_key = os.environ.get(section.api_key_env)
        return RunContext(
            invocation_id=self.invocation_id,
            state_dir=self.state_dir,
            unit_dir=self.unit_dir,
            job_id=os.environ.get("SLURM_JOB_ID", self.invocation_id[:12]),
            endpoint_url=plan.endpoint_url,
            api_key=api_key,
            attempt=self.attempt,
        )

    def setup(self, units: UnitSet, plan: Plan) -> Setup:
        """What an agent that said hello is told (the run's facts, never a secret)."""
        run = self.context(units, plan, with_key=False)
        return Setup(
            plan=plan,
            invocation_id=run.invocation_id,
            state_dir=run.state_dir,
            unit_dir=run.unit_dir,
            job_id=run.job_id,
            endpoint_url=run.endpoint_url,
            agent_timeout=self.agent_timeout,
            attempt=run.attempt,
        )

    def agent_env(self, allocation: Allocation, port: int | None, secret: str) -> Mapping[str, str]:
        """The agents' environment: ddsup start's, their run's id and where to connect."""
        host = "127.0.0.1"
        if allocation.launcher is LauncherKind.SLURM:
            host = os.environ.get("DDSUP_CONTROL_HOST") or allocation.client_address
        return {
            **os.environ,
            INVOCATION_ENV: self.invocation_id,
            ADDRESS_ENV: f"{host}:{port}",
            SECRET_ENV: secret,
        }
