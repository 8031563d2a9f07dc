"""What ``ddsup start`` and its agents' forker agree on: the agents' command lines, the spec.

Apart from ``_launcher`` so that the forker (``_agent_forker``) reads its spec having
imported only this: the launcher brings the allocation's resolution with it, which no
agent uses, and every module the forker imports is one more in each forked agent and in
the forker's start before its first fork.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

AGENT_ARGV = (sys.executable, "-m", "ddsup", "agent")
FORKER_ARGV = (sys.executable, "-m", "ddsup", "agents")  # _agent_forker
# The forker's spec on stdin (JSON): each node's log descriptor and environment, by node;
# the run's unit directory, which the forker loads once for all its agents
SPEC_NODES, SPEC_UNITS = "nodes", "units"


def agent_argv(options: Sequence[str], node: str) -> tuple[str, ...]:
    """The command line of ``node``'s agent: exec'd by ``srun``, or shown by a forked one."""
    return (*AGENT_ARGV, *options, "--node", node)
