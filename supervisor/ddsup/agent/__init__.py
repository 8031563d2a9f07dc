"""What a node agent runs, and the node-side pieces the controller's own node shares.

``_agent_command`` (``python -m ddsup agent``: the entry, without ``_cli`` or argparse),
``_agent`` (one node's agent: hello, inventory, setup, preflight, then the controller's
orders), ``_agent_forker`` (``python -m ddsup agents``: simulated nodes' agents forked
from one import, and the command lines it and ``ddsup start`` agree on),
``_preflight`` (the checks on a node; ``_node_checks``: a submitted job's ddsup, Python
and room), ``_ports`` (free ports on a node, held until used), ``_node_runner`` (the
services of one node: also the controller's own node), ``_held_signals`` and
``_signals`` (stop signals, held before trio and received in it: the controller's too),
``_process_end`` (how a ddsup process ends). docs/architecture.md tells how they fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.agent._agent_command import agent_main as agent_main
    from ddsup.agent._agent_forker import AGENT_ARGV as AGENT_ARGV
    from ddsup.agent._agent_forker import FORKER_ARGV as FORKER_ARGV
    from ddsup.agent._agent_forker import SPEC_NODES as SPEC_NODES
    from ddsup.agent._agent_forker import SPEC_UNITS as SPEC_UNITS
    from ddsup.agent._agent_forker import agent_argv as agent_argv
    from ddsup.agent._agent_forker import forker_main as forker_main
    from ddsup.agent._agent_forker import parse_report as parse_report
    from ddsup.agent._held_signals import HeldSignals as HeldSignals
    from ddsup.agent._held_signals import held_signals as held_signals
    from ddsup.agent._node_checks import SUBMIT_ENVIRONMENT as SUBMIT_ENVIRONMENT
    from ddsup.agent._node_checks import space_problem as space_problem
    from ddsup.agent._node_checks import version_problem as version_problem
    from ddsup.agent._node_runner import NodeRunner as NodeRunner
    from ddsup.agent._process_end import end_process as end_process
    from ddsup.agent._signals import receive_held as receive_held
    from ddsup.agent._signals import watch_signals as watch_signals

_LAZY = {
    "AGENT_ARGV": "ddsup.agent._agent_forker",
    "FORKER_ARGV": "ddsup.agent._agent_forker",
    "SPEC_NODES": "ddsup.agent._agent_forker",
    "SPEC_UNITS": "ddsup.agent._agent_forker",
    "agent_argv": "ddsup.agent._agent_forker",
    "agent_main": "ddsup.agent._agent_command",
    "forker_main": "ddsup.agent._agent_forker",
    "parse_report": "ddsup.agent._agent_forker",
    "HeldSignals": "ddsup.agent._held_signals",
    "held_signals": "ddsup.agent._held_signals",
    "SUBMIT_ENVIRONMENT": "ddsup.agent._node_checks",
    "space_problem": "ddsup.agent._node_checks",
    "version_problem": "ddsup.agent._node_checks",
    "NodeRunner": "ddsup.agent._node_runner",
    "end_process": "ddsup.agent._process_end",
    "receive_held": "ddsup.agent._signals",
    "watch_signals": "ddsup.agent._signals",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
