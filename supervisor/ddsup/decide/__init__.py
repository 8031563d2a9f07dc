"""The run's decisions: pure, with no I/O, no trio and no processes.

What the run hears (``_run_inputs``: the inputs and the decisions), what it decides from
them (``_run_state``: ``RunState``, start readiness, the endpoint's quorum, finality, the
first cause, the preflight verdict), the plan indexed once (``_run_layout``), start and
stop order (``_ordering``; one stop level: ``_run_layout``), a multi-node replica as
one (``_replicas``), ``ddsup restart``'s targets and steps (``_restarts``), ready lanes
and the endpoint's rotation (``_lane_rotation``), ``max_loading`` (``_loading``), what an
instance not started yet waits for (``_waiting``), a lost node (``_node_loss``), and the
lanes' commands in a rehearsal (``_rehearsal_units``, applied by the controller and by
each agent). The controller (``ddsup.controller``) feeds it and carries its decisions
out; tests drive it directly. docs/architecture.md tells how they fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.decide._ordering import agent_nodes as agent_nodes
    from ddsup.decide._ordering import survives_node_loss as survives_node_loss
    from ddsup.decide._rehearsal_units import rehearsal_units as rehearsal_units
    from ddsup.decide._restarts import RestartRefused as RestartRefused
    from ddsup.decide._run_inputs import AgentGone as AgentGone
    from ddsup.decide._run_inputs import AgentProcessExited as AgentProcessExited
    from ddsup.decide._run_inputs import AgentSignalled as AgentSignalled
    from ddsup.decide._run_inputs import AwaitDrain as AwaitDrain
    from ddsup.decide._run_inputs import Decision as Decision
    from ddsup.decide._run_inputs import Drained as Drained
    from ddsup.decide._run_inputs import EndNear as EndNear
    from ddsup.decide._run_inputs import EndRun as EndRun
    from ddsup.decide._run_inputs import FailOn as FailOn
    from ddsup.decide._run_inputs import Host as Host
    from ddsup.decide._run_inputs import Input as Input
    from ddsup.decide._run_inputs import KillEverything as KillEverything
    from ddsup.decide._run_inputs import NodeDecision as NodeDecision
    from ddsup.decide._run_inputs import Observed as Observed
    from ddsup.decide._run_inputs import PlanPorted as PlanPorted
    from ddsup.decide._run_inputs import PreflightOver as PreflightOver
    from ddsup.decide._run_inputs import PreflightReported as PreflightReported
    from ddsup.decide._run_inputs import PublishLanes as PublishLanes
    from ddsup.decide._run_inputs import Record as Record
    from ddsup.decide._run_inputs import RestartOn as RestartOn
    from ddsup.decide._run_inputs import RestartRequested as RestartRequested
    from ddsup.decide._run_inputs import ResumeOn as ResumeOn
    from ddsup.decide._run_inputs import SignalOn as SignalOn
    from ddsup.decide._run_inputs import SignalToForward as SignalToForward
    from ddsup.decide._run_inputs import StartOn as StartOn
    from ddsup.decide._run_inputs import StartupFailed as StartupFailed
    from ddsup.decide._run_inputs import StopBegins as StopBegins
    from ddsup.decide._run_inputs import StopOn as StopOn
    from ddsup.decide._run_inputs import StopRequested as StopRequested
    from ddsup.decide._run_inputs import StopSignalled as StopSignalled
    from ddsup.decide._run_inputs import TakeDownOn as TakeDownOn
    from ddsup.decide._run_state import RunState as RunState

_LAZY = {
    "agent_nodes": "ddsup.decide._ordering",
    "survives_node_loss": "ddsup.decide._ordering",
    "rehearsal_units": "ddsup.decide._rehearsal_units",
    "RestartRefused": "ddsup.decide._restarts",
    "AgentGone": "ddsup.decide._run_inputs",
    "AgentProcessExited": "ddsup.decide._run_inputs",
    "AgentSignalled": "ddsup.decide._run_inputs",
    "AwaitDrain": "ddsup.decide._run_inputs",
    "Decision": "ddsup.decide._run_inputs",
    "Drained": "ddsup.decide._run_inputs",
    "EndNear": "ddsup.decide._run_inputs",
    "EndRun": "ddsup.decide._run_inputs",
    "FailOn": "ddsup.decide._run_inputs",
    "Host": "ddsup.decide._run_inputs",
    "Input": "ddsup.decide._run_inputs",
    "KillEverything": "ddsup.decide._run_inputs",
    "NodeDecision": "ddsup.decide._run_inputs",
    "Observed": "ddsup.decide._run_inputs",
    "PlanPorted": "ddsup.decide._run_inputs",
    "PreflightOver": "ddsup.decide._run_inputs",
    "PreflightReported": "ddsup.decide._run_inputs",
    "PublishLanes": "ddsup.decide._run_inputs",
    "Record": "ddsup.decide._run_inputs",
    "RestartOn": "ddsup.decide._run_inputs",
    "RestartRequested": "ddsup.decide._run_inputs",
    "ResumeOn": "ddsup.decide._run_inputs",
    "SignalOn": "ddsup.decide._run_inputs",
    "SignalToForward": "ddsup.decide._run_inputs",
    "StartOn": "ddsup.decide._run_inputs",
    "StartupFailed": "ddsup.decide._run_inputs",
    "StopBegins": "ddsup.decide._run_inputs",
    "StopOn": "ddsup.decide._run_inputs",
    "StopRequested": "ddsup.decide._run_inputs",
    "StopSignalled": "ddsup.decide._run_inputs",
    "TakeDownOn": "ddsup.decide._run_inputs",
    "RunState": "ddsup.decide._run_state",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
