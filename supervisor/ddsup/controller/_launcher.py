"""Launchers start the node agents: as local processes, or as one ``srun`` step.

The interface is deliberately narrow — "start agents on these nodes, give me the
processes to own" — so the controller is the same for a laptop rehearsal and a
128-node allocation. Under Slurm, all agents form ONE job step (``--ntasks=K
--ntasks-per-node=1``): job steps stay O(lane units), never one per lane or probe. The
step asks for no GPUs of its own, so Slurm gives each node's task all the job's GPUs of
that node (``CUDA_VISIBLE_DEVICES``, ``SLURM_STEP_GPUS``), which its agent reports.

The step is fail-fast by default (``--kill-on-bad-exit=1``: one agent's death ends the
others). When the run may survive losing a node (``_node_loss``: every unit there says
``on_failure = "continue"``), it is ``--kill-on-bad-exit=0 --no-kill`` instead, so the
other agents keep running, and the controller owns fail-fast for whatever may not be
lost.

Agents are started before trio runs (``_head_start``), with ``subprocess``
(:func:`~ddsup.process._popen.start_child`): :class:`StartedAgents` are adopted by the
controller once it runs (``_takeover``) and become :class:`AgentProcess` es. Local
agents are forked from one import by one forker process (``_agent_forker``): the
controller adopts each of them once the forker has named them (:class:`ForkedAgents`,
``_forked_agents``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Protocol

from ddsup._errors import UsageError
from ddsup.agent import AGENT_ARGV, FORKER_ARGV, SPEC_NODES, SPEC_UNITS, agent_argv
from ddsup.plan import Allocation, LauncherKind
from ddsup.process import open_log, start_child, start_forker
from ddsup.record import StateDir
from ddsup.units import UnitSet

if TYPE_CHECKING:  # trio's: the controller's side, imported after the launch
    from ddsup.process import ChildProcess

CONTROLLER = "controller"  # ddsup start's name among the run's supervisors


@dataclass(frozen=True)
class AgentProcess:
    """A process that hosts agents: one agent (local) or the srun step of all agents."""

    label: str
    nodes: tuple[str, ...]
    process: ChildProcess


@dataclass(frozen=True)
class StartedAgents:
    """A process that hosts agents, started before trio runs; adopted as an AgentProcess."""

    label: str
    nodes: tuple[str, ...]
    popen: subprocess.Popen[bytes]
    env: Mapping[str, str]


@dataclass(frozen=True)
class ForkedAgents:
    """The local agents' forker, started before trio runs: it forks the agent of each of
    ``nodes`` and names them on its stdout (``_agent_forker``); ``_forked_agents`` adopts
    them as AgentProcesses, one per node."""

    nodes: tuple[str, ...]
    forker: subprocess.Popen[bytes]
    env: Mapping[str, str]  # every agent's environment (the forker's)
    own_env: Mapping[str, Mapping[str, str]]  # what differs in each node's agent's
    options: tuple[str, ...]  # every agent's options but ``--node``
    log: os.PathLike[str]  # the forker's own output

    def agent_env(self, node: str) -> dict[str, str]:
        return {**self.env, **self.own_env[node]}

    def agent_argv(self, node: str) -> tuple[str, ...]:
        return agent_argv(self.options, node)


Launched = list[StartedAgents | ForkedAgents]


class Launcher(Protocol):
    name: str
    shared_address: bool
    # the agents run on this machine, inside ddsup start's containment: they start no
    # sentinel of their own, and the controller ends what a dead one left (_agents)
    covers_agents: bool

    def launch(self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir) -> Launched: ...


@dataclass
class LocalLauncher:
    """Simulated nodes on this machine: one agent per node, forked by one forker process.

    The forker (``_agent_forker``) imports the agent's code once and forks each node's
    agent from it, instead of K ``python -m ddsup agent`` each paying Python's start-up on
    the same CPUs. Each agent is then what an exec'd one was: its own session and log
    (``agent-NODE``), the agents' environment with ``DDSUP_NODE``, and a child of
    ``ddsup start`` (by reparenting, once the forker has exited).

    Each simulated node is handed its share of this machine's GPUs as
    ``CUDA_VISIBLE_DEVICES`` (``shares``), as Slurm hands a node's step its own, and its
    agent reports what it finds there; ``--gpus-per-node`` GPUs are simulated instead.

    The agents share this machine, its cgroup tree and the run's registry directory with
    ``ddsup start``, whose sentinel ends all of it if ``ddsup start`` dies: so each agent
    is told (``--covered-by controller``) to start no sentinel of its own, and the
    fleet ends a dead agent's units instead (``AgentFleet``).
    """

    simulated_gpus: int | None
    shares: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unit_dir: str | None = None  # the run's: the forker loads it once for its agents
    name: str = "local"
    shared_address: bool = True
    covers_agents: bool = True

    def launch(self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir) -> Launched:
        shared = (
            *_simulated(self.simulated_gpus),
            *(("--covered-by", CONTROLLER) if self.covers_agents else ()),
        )
        own = {node: self._node_env(node) for node in nodes}
        logs: dict[str, int] = {}
        try:
            for node in nodes:
                log = state.log(f"agent-{node}")
                logs[node] = open_log(
                    state.log_file(f"agent-{node}"), partial(state.faults.failed, log)
                )
            each = {node: {"log_fd": logs[node], "env": own[node]} for node in nodes}
            spec = {SPEC_NODES: each, SPEC_UNITS: self.unit_dir}
            forker_log = state.log("agents")
            forker = start_forker(
                (*FORKER_ARGV, *shared, *(w for node in nodes for w in ("--node", node))),
                env=env,
                cwd=".",
                log_path=state.log_file("agents"),
                on_log_error=partial(state.faults.failed, forker_log),
                spec=json.dumps(spec).encode(),
                pass_fds=tuple(logs.values()),
            )
        finally:
            for fd in logs.values():
                os.close(fd)
        return [ForkedAgents(tuple(nodes), forker, env, own, shared, forker_log)]

    def _node_env(self, node: str) -> dict[str, str]:
        """What differs in ``node``'s agent's environment from the others'."""
        own = {"DDSUP_NODE": node}
        if self.simulated_gpus is None and node in self.shares:
            own["CUDA_VISIBLE_DEVICES"] = ",".join(self.shares[node])
        return own


def _simulated(gpus: int | None) -> tuple[str, ...]:
    return () if gpus is None else ("--gpus-per-node", str(gpus))


@dataclass
class SlurmLauncher:
    """All agents as one ``srun --overlap`` step spanning the lane nodes."""

    simulated_gpus: int | None
    srun_args: tuple[str, ...] = ()
    shared_address: bool = False
    name: str = "slurm"
    covers_agents: bool = False  # each node's agent has its own sentinel
    survivable: bool = False  # the run may go on without a node: agents outlive each other
    het_group: int | None = None  # a heterogeneous job: the component of the lane nodes

    def launch(self, nodes: Sequence[str], env: Mapping[str, str], state: StateDir) -> Launched:
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
            *_simulated(self.simulated_gpus),
        ]
        log = state.log("agents")
        child = start_child(
            argv,
            env=env,
            cwd=".",
            log_path=state.log_file("agents"),
            on_log_error=partial(state.faults.failed, log),
        )
        return [StartedAgents("srun step of the agents", tuple(nodes), child, env)]

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
        shares = {n.name: n.devices for n in allocation.nodes}
        return LocalLauncher(
            simulated_gpus=allocation.simulated_gpus, shares=shares, unit_dir=units.directory
        )
    extra = tuple(srun_args) + tuple(a for u in units.lanes for a in u.slurm.srun_args)
    return SlurmLauncher(
        simulated_gpus=allocation.simulated_gpus,
        srun_args=extra,
        shared_address=allocation.shared_address,
        survivable=survivable,
        het_group=allocation.het_group,
    )
