"""One run: the controller of ``ddsup start``, the node agents, and the run's decisions.

``_options`` (the command line as a value), ``_start`` (the command), ``_head_start``
(what it does before it imports trio: the agents launched; ``_held_signals``: its signals
held meanwhile), ``_takeover`` (trio runs: the controller takes it all over), ``_run_inputs``
and ``_run_state`` (what the run hears and decides: pure), ``_replicas`` (a multi-node
replica lives and dies as one), ``_ordering`` (start and stop order), ``_controller``
(the trio shell that feeds the state and carries out its decisions), ``_connections``
(agents, the lane feed, operators), ``_nodes`` (``LocalNode``/``RemoteNode``),
``_node_runner`` (the services of one node), ``_agents`` and ``_launcher`` (the agent
processes: local or srun), ``_agent`` and ``_preflight`` (a node agent; ``_run_facts`` and
``_agent_setup``: what it is given), ``_signals``,
``_lane_rotation`` (ready lanes and the endpoint's rotation, kept per event),
``_lane_feed`` (the endpoint's settings and ready lanes), ``_console`` (what
``ddsup start`` prints), ``_open_files`` (its file limit for K agents), ``_process_end``
(how its processes end).
docs/architecture.md tells how they fit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddsup._lazy import lazy_names

if TYPE_CHECKING:
    from ddsup.run._agent_command import agent_main as agent_main
    from ddsup.run._agent_forker import forker_main as forker_main
    from ddsup.run._node_checks import SUBMIT_ENVIRONMENT as SUBMIT_ENVIRONMENT
    from ddsup.run._node_checks import space_problem as space_problem

_LAZY = {
    "agent_main": "ddsup.run._agent_command",
    "forker_main": "ddsup.run._agent_forker",
    "SUBMIT_ENVIRONMENT": "ddsup.run._node_checks",
    "space_problem": "ddsup.run._node_checks",
}

__getattr__ = lazy_names(__name__, _LAZY, globals())
