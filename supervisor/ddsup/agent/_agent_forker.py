"""``python -m ddsup agents …``: the simulated nodes' agents, forked from one import.

A local run of K simulated nodes (``--nodes K``, the rehearsal of a Slurm job on one
machine) has K agents on one machine. Started as K ``python -m ddsup agent``, each would
pay its own Python start-up (trio about half of it): at 128 nodes on a few CPUs, nearly
all of the start's overhead beyond its slowest lane. On a real
allocation each agent has its own node's CPUs, and Slurm starts one per node; here they
share the CPUs, so ``LocalLauncher`` starts this forker instead, once: it imports the
agent's code and works out what every agent would work out on its own (the run's units,
the codec: ``prepare_agents``), then forks one agent per node, which runs exactly what
``python -m ddsup agent --node N`` would run
(:func:`~ddsup.agent._agent_command.agent_main`), in its own session, with its node's
environment and its own log.

The forker was started with the agents' environment, so each agent's
``/proc/PID/environ`` carries the run's ``DDSUP_INVOCATION_ID`` as an exec'd one's does
(the sweeps find it by that); its node's own variables (``DDSUP_NODE``,
``CUDA_VISIBLE_DEVICES``) are in ``os.environ``, which every process it starts inherits.
Its command line is rewritten in place to an agent's (``process._title``), so ``ps``
names its node.

The protocol with ``ddsup start`` (``_launcher.LocalLauncher``, then
``_forked_agents``): on stdin a JSON object (:data:`SPEC_NODES`, :data:`SPEC_UNITS`), each node's log descriptor
(inherited) and environment, and the run's unit directory; on stdout one line per agent
forked, ``NODE PID``, in the order of the ``--node`` options; then the forker exits,
and the kernel reparents its agents to ``ddsup start``, a child subreaper. A failure is
said on stderr (the ``agents`` log), and the nodes it did not report have no agent.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import NoReturn

from ddsup.agent._process_end import end_process
from ddsup.process import retitle

# What ``ddsup start`` and this forker agree on: the agents' command lines, the spec. Here,
# not in ``controller._launcher``, so that the forker reads its spec having imported
# little: the launcher brings the allocation's resolution with it, which no agent uses,
# and every module the forker imports is one more in each forked agent and in the
# forker's start before its first fork.
AGENT_ARGV = (sys.executable, "-m", "ddsup", "agent")
FORKER_ARGV = (sys.executable, "-m", "ddsup", "agents")
# The forker's spec on stdin (JSON): each node's log descriptor and environment, by node;
# the run's unit directory, which the forker loads once for all its agents
SPEC_NODES, SPEC_UNITS = "nodes", "units"

EXIT_OSERR = 71  # sysexits' EX_OSERR: fork failed
EXIT_UNCAUGHT = 1  # what Python exits with on an uncaught exception, as an exec'd agent
NODE_OPTION = "--node"
AGENT_MODULE = "ddsup.agent._agent_command"  # imported by name, after the spec is read
# What every agent imports sooner or later, imported here once: the agent's entry (trio,
# the channel, the services), and psutil, which an agent imports when it first stops a
# unit (``process._child``), which every agent would pay for again when they stop at once.
PRELOADED = (AGENT_MODULE, "psutil")


def agent_argv(options: Sequence[str], node: str) -> tuple[str, ...]:
    """The command line of ``node``'s agent: exec'd by ``srun``, or shown by a forked one."""
    return (*AGENT_ARGV, *options, "--node", node)


def report_line(node: str, pid: int) -> bytes:
    """One forked agent, as the forker reports it on stdout."""
    return f"{node} {pid}\n".encode()


def parse_report(data: bytes) -> dict[str, int]:
    """Each node's agent PID from the forker's stdout (complete lines only)."""
    found: dict[str, int] = {}
    for line in data.split(b"\n")[:-1]:
        node, _, pid = line.decode().rpartition(" ")
        if node and pid.isdigit():
            found[node] = int(pid)
    return found


def split_forker_args(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the options every agent shares, the nodes): the forker's words after ``agents``."""
    shared: list[str] = []
    nodes: list[str] = []
    words = iter(argv)
    for word in words:
        if word == NODE_OPTION:
            nodes.append(next(words, ""))
        else:
            shared.append(word)
    return shared, nodes


def forker_main(argv: Sequence[str]) -> int:
    """Fork an agent per ``--node`` of ``argv`` (module docstring); the forker's status."""
    shared, nodes = split_forker_args(argv)
    spec = json.loads(sys.stdin.buffer.read())  # first: ddsup start's write never waits
    # The imports every agent would otherwise make on its own: the forker's whole point.
    for module in PRELOADED:
        importlib.import_module(module)
    agent_module = sys.modules[AGENT_MODULE]
    agent_module.prepare_agents(spec[SPEC_UNITS])  # and what each would work out
    agent_main = agent_module.agent_main
    gc.collect()
    gc.freeze()  # the agents' collector never walks (and so never copies) these pages
    for node in nodes:
        child = spec[SPEC_NODES][node]
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        try:
            pid = os.fork()
        except OSError as err:
            print(f"ddsup agents: cannot fork the agent of {node}: {err.strerror}", file=sys.stderr)
            return EXIT_OSERR
        if pid == 0:
            _become_agent(agent_argv(shared, node), int(child["log_fd"]), child["env"], agent_main)
        os.write(1, report_line(node, pid))
    return 0


def _become_agent(
    argv: tuple[str, ...],
    log_fd: int,
    env: Mapping[str, str],
    agent_main: Callable[[Sequence[str]], int],
) -> NoReturn:
    """In the forked child: what ``start_child`` gives an exec'd agent, then the agent
    that command line ``argv`` names (shown as its own).

    One difference: the agent leads a process group of its own (the terminal's signals
    and a ``killpg`` of it reach it alone) but stays in this forker's session, which
    ``start_child`` made for it. Linux's scheduler shares the CPU between sessions
    (autogroups) before processes, so the simulated nodes' agents count as one against
    ``ddsup start`` and its endpoint, not as 128: with a session each, the controller would
    get 1/129 of the CPU during a start's burst and a lane's ready would reach the
    endpoint's table seconds late."""
    status = EXIT_UNCAUGHT
    try:
        os.setpgid(0, 0)  # see the docstring
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # the report pipe, the others' logs
        os.environ.update(env)
        retitle(argv)
        status = agent_main(argv[len(AGENT_ARGV) :])
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        traceback.print_exc()
    end_process(status)
