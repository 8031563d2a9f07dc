"""Launchers start the node agents: as local processes, or as one ``srun`` step.

The interface is deliberately narrow — "start agents on these nodes, give me the
processes to own" — so the controller is the same for a laptop rehearsal and a
128-node allocation. Under Slurm, all agents form ONE job step (``--ntasks=K
--ntasks-per-node=1``): job steps stay O(lane units), never one per lane or probe.

The step is fail-fast by default (``--kill-on-bad-exit=1``: one agent's death ends the
others). When the run may survive losing a node (``_node_loss``: every unit there says
``on_failure = "continue"``), it is ``--kill-on-bad-exit=0 --no-kill`` instead, so the
other agents keep running, and the controller owns fail-fast for whatever may not be
lost.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from ddsup._errors import UsageError
from ddsup.plan._resolve import Allocation, LauncherKind
from ddsup.process import ChildProcess, spawn
from ddsup.record._state_dir import StateDir
from ddsup.units._model import UnitSet

AGENT_ARGV = (sys.executable, "-m", "ddsup", "agent")


@dataclass(frozen=True)
class AgentProcess:
    """A process that hosts agents: one agent (local) or the srun step of all agents."""

    label: str
    nodes: tuple[str, ...]
    process: ChildProcess


class Launcher(Protocol):
    name: str
    shared_address: bool

    async def launch(
        self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir
    ) -> list[AgentProcess]: ...


@dataclass
class LocalLauncher:
    """Simulated nodes on this machine: one ``ddsup agent`` process per node."""

    gpus_per_node: int
    name: str = "local"
    shared_address: bool = True

    async def launch(
        self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir
    ) -> list[AgentProcess]:
        agents = []
        for node in nodes:
            argv = (*AGENT_ARGV, "--node", node, "--gpus", str(self.gpus_per_node))
            log = state.log(f"agent-{node}")
            child = await spawn(
                argv,
                env={**env, "DDSUP_NODE": node},
                cwd=".",
                log_path=log,
                on_log_error=partial(state.faults.failed, log),
            )
            agents.append(AgentProcess(f"agent on {node}", (node,), child))
        return agents


@dataclass
class SlurmLauncher:
    """All agents as one ``srun --overlap`` step spanning the lane nodes."""

    gpus_per_node: int | None
    srun_args: tuple[str, ...] = ()
    shared_address: bool = False
    name: str = "slurm"
    survivable: bool = False  # the run may go on without a node: agents outlive each other
    het_group: int | None = None  # a heterogeneous job: the component of the lane nodes

    async def launch(
        self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir
    ) -> list[AgentProcess]:
        srun = shutil.which("srun")
        if srun is None:
            raise UsageError("--launcher slurm needs srun on PATH")
        argv = [
            srun,
            "--overlap",
            *(() if self.het_group is None else (f"--het-group={self.het_group}",)),
            *self._fail_fast(),
            f"--nodes={len(nodes)}",
            f"--ntasks={len(nodes)}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(nodes)}",
            "--export=ALL",
            "--job-name=ddsup-agents",
            *self.srun_args,
            *AGENT_ARGV,
        ]
        if self.gpus_per_node is not None:
            argv += ["--gpus", str(self.gpus_per_node)]
        log = state.log("agents")
        child = await spawn(
            argv, env=env, cwd=".", log_path=log, on_log_error=partial(state.faults.failed, log)
        )
        return [AgentProcess("srun step of the agents", tuple(nodes), child)]

    def _fail_fast(self) -> tuple[str, ...]:
        """Slurm ends every agent when one dies, unless the run may lose a node."""
        return (
            ("--kill-on-bad-exit=0", "--no-kill") if self.survivable else ("--kill-on-bad-exit=1",)
        )


def launcher_for(
    allocation: Allocation, units: UnitSet, srun_args: Sequence[str], *, survivable: bool = False
) -> Launcher:
    """The launcher the allocation calls for; ``srun_args`` before the lane units' own."""
    if allocation.launcher is LauncherKind.LOCAL:
        return LocalLauncher(gpus_per_node=allocation.gpus_per_node)
    extra = tuple(srun_args) + tuple(a for u in units.lanes for a in u.slurm.srun_args)
    return SlurmLauncher(
        gpus_per_node=allocation.gpus_per_node,
        srun_args=extra,
        shared_address=allocation.shared_address,
        survivable=survivable,
        het_group=allocation.het_group,
    )
