"""Launchers start the node agents: as local processes, or as one ``srun`` step.

The interface is deliberately narrow — "start agents on these nodes, give me the
processes to own" — so the controller is the same for a laptop rehearsal and a
128-node allocation. Under Slurm, all agents form ONE job step (``--ntasks=K
--ntasks-per-node=1``): job steps stay O(lane units), never one per lane or probe.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
            child = await spawn(
                argv, env={**env, "DDSUP_NODE": node}, cwd=".", log_path=state.log(f"agent-{node}")
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

    async def launch(
        self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir
    ) -> list[AgentProcess]:
        srun = shutil.which("srun")
        if srun is None:
            raise UsageError("--launcher slurm needs srun on PATH")
        argv = [
            srun,
            "--overlap",
            "--kill-on-bad-exit=1",
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
        child = await spawn(argv, env=env, cwd=".", log_path=state.log("agents"))
        return [AgentProcess("srun step of the agents", tuple(nodes), child)]


def launcher_for(allocation: Allocation, units: UnitSet, srun_args: Sequence[str]) -> Launcher:
    """The launcher the allocation calls for; ``srun_args`` before the lane units' own."""
    if allocation.launcher is LauncherKind.LOCAL:
        return LocalLauncher(gpus_per_node=allocation.gpus_per_node)
    extra = tuple(srun_args) + tuple(a for u in units.lanes for a in u.slurm.srun_args)
    return SlurmLauncher(
        gpus_per_node=allocation.gpus_per_node,
        srun_args=extra,
        shared_address=allocation.shared_address,
    )
