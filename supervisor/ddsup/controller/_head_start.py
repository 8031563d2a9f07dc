"""``ddsup start``'s head start: the agents are launched before trio is imported.

An agent's Python start-up (trio, the channel, the services) would begin only once
``ddsup start`` had finished its own if the controller, or even trio's own import,
came before the ``srun`` step of the agents. Here is what launching the agents needs,
with the standard library and no trio, so that ``controller._start`` can launch them first and import trio and the controller
(``_takeover``, ``_controller``) while they import theirs:

- the units, parsed and validated, the allocation and the plan (``_prepare``): a bad unit
  file or a plan that does not fit still fails before anything is spawned or written;
- the state directory (the agents' log is in it);
- the signals held (``_held_signals``): a ``scancel`` that arrives before trio's
  receiver runs waits for it rather than killing ``ddsup start`` mid-start;
- the containment's layers (``process._opening``: subreaper, registry, sentinel, cgroup),
  so the sentinel covers the ``srun`` from its first instant;
- the control socket, bound and listening (the agents' connections wait in its backlog
  until the controller serves it), the run's id and secret, and so the agents' env.

The controller then owns all of it (``_takeover``): the layers become its containment,
trio's receiver takes the held signals, the socket becomes its listener, and the agents'
processes are adopted. A failure to resolve the control address or to launch the agents
is kept in ``failed`` and ends the run the way it did before (``StartupFailed``:
result.json, exit status).
"""

from __future__ import annotations

import os
import resource
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddsup._errors import DdsupError, PreflightError, UsageError
from ddsup.agent import HeldSignals, held_signals
from ddsup.channel import new_secret
from ddsup.controller._launcher import CONTROLLER, Launched, Launcher, launcher_for
from ddsup.controller._prepare import PreparedRun
from ddsup.controller._run_facts import RunFacts, agent_environment
from ddsup.decide import agent_nodes, survives_node_loss
from ddsup.plan import LOCAL_ADDRESS, Allocation, LauncherKind, Plan
from ddsup.process import OpenedLayers, open_layers
from ddsup.record import ControlAddress, StateDir
from ddsup.units import printable


@dataclass
class HeadStart:
    """What ``ddsup start`` set up before trio was imported (module docstring)."""

    invocation_id: str
    secret: str = field(repr=False)
    signals: HeldSignals
    layers: OpenedLayers
    attempt: int  # the job's attempt in its state dir (``record._attempts``)
    listening: socket.socket | None = None  # None: failed says why
    facts: RunFacts | None = None  # once the control address is known
    launcher: Launcher | None = None
    nodes: tuple[str, ...] = ()  # the nodes whose agents were launched
    agents: Launched = field(default_factory=list)
    failed: DdsupError | None = None


def head_start(prepared: PreparedRun, state: StateDir, attempt: int = 0) -> HeadStart:
    """Hold the signals, open the containment's layers, bind the control socket, launch
    the agents; the caller hands the result to ``_takeover`` (which owns it from then on)."""
    invocation_id = uuid.uuid4().hex
    forwarded = {s for u in prepared.units.units for s in u.service.forward_signals}
    signals = held_signals(forwarded)
    signals.hold()
    try:
        held = None if state.held is None else state.held.fd
        layers = open_layers(
            invocation_id, state_dir=state.path, state_dir_fd=held, name=CONTROLLER, root=True
        )
    except BaseException:
        signals.restore()
        raise
    head = HeadStart(invocation_id, new_secret(), signals, layers, attempt)
    try:
        _listen(head, prepared, state)
        _launch(head, prepared, state)
    except DdsupError as err:
        head.failed = err
    return head


def _listen(head: HeadStart, prepared: PreparedRun, state: StateDir) -> None:
    """Bind the control socket where the agents will reach it; the run's facts with it."""
    host = control_host(prepared.allocation, os.environ)
    head.listening = control_socket(host)
    options = prepared.options
    head.facts = RunFacts(
        invocation_id=head.invocation_id,
        state_dir=str(state.path),
        unit_dir=str(options.directory.resolve()),
        control=ControlAddress(host, head.listening.getsockname()[1]),
        agent_timeout=options.agent_timeout,
        attempt=head.attempt,
        rehearse=options.rehearse,
        secret=head.secret,
    )


def _launch(head: HeadStart, prepared: PreparedRun, state: StateDir) -> None:
    """The agents of every node that needs one; without a plan yet, of every node that may
    hold lanes (the plan is then made from the GPUs they report, and the launcher's
    fail-fast is Slurm's default: whether a node may be lost is the plan's to say)."""
    units, allocation, plan = prepared.units, prepared.allocation, prepared.plan
    nodes = agent_nodes(units, plan) if plan is not None else tuple(allocation.lane_nodes())
    if not nodes:
        return
    assert head.facts is not None
    survivable = plan is not None and survives_node_loss(units, plan)
    launcher = launcher_for(allocation, units, prepared.options.srun_args, survivable=survivable)
    ensure_open_files(open_files_needed(len(nodes), _client_instances(plan)))
    env = agent_environment(head.facts, units, os.environ)
    head.launcher, head.nodes = launcher, nodes
    head.agents = launcher.launch(nodes, env, state)


def _client_instances(plan: Plan | None) -> int:
    return 0 if plan is None else len(plan.on_node(plan.client))


# --- where ddsup start listens for its agents, its endpoint's feed and its operators -------
# Locally the agents are processes on this machine: ``127.0.0.1``. Under Slurm it is the
# client node's address in the allocation (its ``NodeAddr``), or ``DDSUP_CONTROL_HOST``
# when another interface must be used, resolved once to the one IP address that the
# agents are given too. Never ``0.0.0.0``: the port is not opened on interfaces the job
# does not use (docs/security.md).
#
# Resolved and bound before trio runs (the agents are launched first), so with the ``socket`` module alone; the controller serves the socket with trio later.

CONTROL_HOST_ENV = "DDSUP_CONTROL_HOST"
BACKLOG = 0xFFFF  # as trio's listeners ask (the kernel caps it at somaxconn): K agents at once


def control_host(allocation: Allocation, environ: Mapping[str, str]) -> str:
    """The IP address to listen on; UsageError when the name does not resolve."""
    if allocation.launcher is LauncherKind.LOCAL:
        return LOCAL_ADDRESS
    name = environ.get(CONTROL_HOST_ENV) or allocation.client_address
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise UsageError(
            f"cannot resolve {printable(name)}, the address agents would reach ddsup start at "
            f"({err}): set {CONTROL_HOST_ENV} to an address of this node"
        ) from err
    return str(found[0][4][0])


def control_socket(host: str) -> socket.socket:
    """A listening TCP socket on ``host`` at a port the kernel picks (not inherited by
    children); the agents' connections wait in its backlog until the controller serves it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=BACKLOG)


# --- the controller's open files: one connection (and one pidfd, locally) per agent -------
# Many clusters give jobs a soft ``RLIMIT_NOFILE`` of 1,024 (with a far higher hard
# limit): at ~500 nodes the controller's connections to its agents alone would reach it,
# and the next ``accept`` fails (trio retries it, so the run would sit in preflight until
# the agents' wait times out). As systemd's documentation recommends for a program that
# needs more, ``ddsup start`` raises its own soft limit to what its run needs, up to the
# hard limit, and says so when the hard limit itself is too low.

PER_AGENT = 2  # its connection, and its process's pidfd (local agents)
BASE = 64  # listening socket, events.jsonl, logs being opened, the feed, operators, trio's own


def open_files_needed(agents: int, local_instances: int) -> int:
    return BASE + PER_AGENT * agents + 2 * local_instances


def ensure_open_files(needed: int) -> int:
    """Raise the soft limit to ``needed`` (never lower it); the soft limit now.

    PreflightError when the hard limit is below ``needed``: ``ulimit -Hn`` is the
    administrator's, and the run would fail later in a less clear way.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed <= soft or soft == resource.RLIM_INFINITY:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise PreflightError(
            f"this run needs {needed} open files in ddsup start (one connection per node "
            f"agent), but the hard limit is {hard}: ask for a higher one (ulimit -Hn)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed
