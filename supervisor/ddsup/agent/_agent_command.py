"""``python -m ddsup agent …``: the node agent's own entry, without ``ddsup._cli``.

``ddsup start`` spawns one agent per node (``_agent_forker.AGENT_ARGV``), many at once on a
large allocation (128 on one machine when simulated), and whatever an agent imports
before it can connect is on the run's path to its first lane. ``ddsup._cli`` builds an
argparse parser for them: argparse itself, gettext and its patterns, a visible share of
an agent's start-up, for three options that only ``ddsup start`` ever writes. So
``ddsup/__main__`` hands an ``agent`` command line to :func:`agent_main`, which reads
those options by hand (``--name value`` or ``--name=value``, as argparse does) and ends
like ``_cli.main`` does: a usage error exits 64 with a ``usage:`` line, a
:class:`~ddsup._errors.DdsupError` its own status. ``ddsup agent`` through the console
script still goes through ``_cli`` and argparse, with the same options.
"""

from __future__ import annotations

import codecs
import contextlib
import sys
from collections.abc import Sequence

from ddsup._errors import EXIT_NO_PERMISSION, EXIT_USAGE, DdsupError
from ddsup.agent._agent import start_agent
from ddsup.channel import prepare_agent_decoding
from ddsup.units import load_unit_set

USAGE = "usage: ddsup agent [-h] [--node NODE] [--gpus-per-node N] [--covered-by SUPERVISOR]"
HELP = f"""{USAGE}

The node agent of a run: started by ddsup start (through srun), never by hand.

options:
  -h, --help            show this help message and exit
  --node NODE           simulated node: its name in the plan (default: $SLURMD_NODENAME)
  --gpus-per-node N     simulated GPUs (default: detected)
  --covered-by SUPERVISOR
                        a supervisor on this machine whose sentinel covers this agent
"""
_OPTIONS = ("--node", "--gpus-per-node", "--covered-by")


class AgentUsage(Exception):
    """A command line the agent cannot read (the message says why)."""


def parse_agent_args(argv: Sequence[str]) -> dict[str, str]:
    """Each option given (``--node`` …) and its value, the last one winning (as in
    argparse); AgentUsage for anything else. ``-h``/``--help`` are :func:`agent_main`'s."""
    given: dict[str, str] = {}
    words = iter(argv)
    for word in words:
        name, equals, value = word.partition("=")
        if name not in _OPTIONS:
            raise AgentUsage(f"unrecognized arguments: {word}")
        if not equals:
            value = next(words, "")
            if not value or value.startswith("--"):
                raise AgentUsage(f"argument {name}: expected one argument")
        given[name] = value
    return given


def agent_main(argv: Sequence[str]) -> int:
    """Run the agent that ``argv`` (the words after ``agent``) describes; its exit status."""
    if "-h" in argv or "--help" in argv:
        print(HELP, end="")
        return 0
    try:
        given = parse_agent_args(argv)
        gpus = given.get("--gpus-per-node")
        if gpus is not None and not gpus.lstrip("-").isdigit():
            raise AgentUsage(f"argument --gpus-per-node: invalid int value: {gpus!r}")
    except AgentUsage as err:
        print(USAGE, file=sys.stderr)
        print(f"ddsup agent: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    try:
        start_agent(
            given.get("--node"), None if gpus is None else int(gpus), given.get("--covered-by")
        )
    except DdsupError as err:
        print(f"ddsup: error: {err}", file=sys.stderr)
        return err.exit_status
    except PermissionError as err:  # as ``_cli.main``: a file another user's run left
        where = f" on {err.filename!r}" if err.filename else ""
        print(f"ddsup: error: permission denied{where}", file=sys.stderr)
        return EXIT_NO_PERMISSION
    except KeyboardInterrupt:
        return 130


def prepare_agents(unit_dir: str | None) -> None:
    """Work out now what every agent of this process's forks would work out on its own.

    The agents' forker (``_agent_forker``) calls this once before it forks: the IDNA
    codec, which the agent's connect imports on first use (``getaddrinfo`` encodes the
    controller's host with it), the shapes of what the controller sends an agent, and
    the run's units (``unit_dir``, which each agent loads from its Setup: the same bytes
    are the same set, not parsed again). With many simulated nodes on few CPUs each
    agent would pay for these before its node's preflight, and the run's lanes wait on the
    slowest. A unit directory that does not load is left to each agent
    to report, as it would without this."""
    codecs.lookup("idna")
    prepare_agent_decoding()
    if unit_dir is not None:
        with contextlib.suppress(DdsupError, OSError):
            load_unit_set(unit_dir)
