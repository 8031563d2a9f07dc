"""Fuzz a live node agent: whatever its controller sends, it stops cleanly and leaves nothing.

An agent's only peer is the controller it connects to. Here the test is that
controller: it accepts a real ``ddsup agent``, sends it a real plan, starts its lane,
then sends junk (raw bytes, JSON of any shape, every message kind with fields of any
type, commands for instances of other nodes, deep nesting) followed by ``shutdown``.
Whatever the junk was, the agent either carried it out (it was a valid command) or
dropped the connection; either way it stops its lane, says ``stopped``, exits 0, prints
no traceback, and no process of its lane is left.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import uuid
from collections import Counter
from pathlib import Path

from hostile_helpers import Junk, examples, labelled, messages, nested, unauthenticated
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ddsup.channel import ADDRESS_ENV, SECRET_ENV, decode, encode
from ddsup.channel._messages import (
    AgentStopped,
    EventReport,
    Heartbeat,
    Hello,
    Inventory,
    Message,
    PreflightReport,
    Setup,
    Shutdown,
    Start,
)
from ddsup.plan import Plan
from ddsup.plan._resolve import AllocationRequest, LauncherChoice, plan_for, resolve_allocation
from ddsup.record import InstanceState, ProcessStarted, UnitTransition
from ddsup.record._events import Contained
from ddsup.units import load_unit_set
from support import procs
from support.runs import PY, start_env
from support.unit_dirs import UnitDir

SECRET = "agent-fuzz-secret"
NODE = "node1"


def _plan(units: Path) -> Plan:
    request = AllocationRequest(launcher=LauncherChoice.LOCAL, nodes=2, gpus_per_node=1)
    return plan_for(load_unit_set(units), resolve_allocation(request, {}))


class _Controller:
    """The test's side of one agent's connection: JSON lines over a plain socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.reset = False

    def send(self, data: bytes) -> None:
        with contextlib.suppress(OSError):  # the agent hung up on junk already: it may
            self.sock.sendall(data)

    def receive(self) -> Message | None:
        """The next message; None at the end (a reset too: the agent hung up on junk)."""
        try:
            line = self.reader.readline()
        except ConnectionResetError:
            self.reset = True
            return None
        return decode(line.rstrip(b"\n")) if line else None

    def close(self) -> None:
        """Close the reader too: it holds the socket open past ``sock.close()``."""
        self.reader.close()
        self.sock.close()


def _one_agent(tmp_path: Path, junk: bytes) -> None:
    units, state = tmp_path / "units", tmp_path / "state"
    plan = _plan(units)
    lane = next(p.instance for p in plan.instances if p.node == NODE)
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        env = start_env({ADDRESS_ENV: f"127.0.0.1:{server.getsockname()[1]}", SECRET_ENV: SECRET})
        stderr = (tmp_path / "agent.err").open("wb")
        agent = subprocess.Popen(
            [PY, "-m", "ddsup", "agent", "--node", NODE],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=stderr,
            stderr=stderr,
        )
        try:
            sock, _ = server.accept()
            sock.settimeout(30)
            with contextlib.closing(_Controller(sock)) as controller:
                lane_pid = _drive(controller, plan, lane, units, state, junk)
            assert agent.wait(timeout=30) == 0
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
            stderr.close()
    text = (tmp_path / "agent.err").read_text(errors="replace")
    assert "Traceback" not in text, text
    assert not procs.alive(lane_pid), "the agent left its lane running"


def _drive(
    controller: _Controller, plan: Plan, lane: str, units: Path, state: Path, junk: bytes
) -> int:
    """Set the agent up, start its lane, send ``junk`` and a shutdown; the lane's pid."""
    hello = controller.receive()
    assert isinstance(hello, Hello) and hello.secret == SECRET
    assert isinstance(controller.receive(), Inventory)  # its node's GPUs, before any plan
    # a fresh invocation id: the run's cgroup and tag are named by it, and a fixed one
    # would let another suite's agent on this machine end this test's lane (and ours its)
    setup = Setup(plan, uuid.uuid4().hex, str(state), str(units), "fuzz", None)
    controller.send(encode(setup) + b"\n")
    while isinstance(reply := controller.receive(), EventReport):
        assert isinstance(reply.event, Contained), reply  # its own node's containment
    assert isinstance(reply, PreflightReport), reply
    controller.send(encode(Start((lane,))) + b"\n")
    pid = None
    while True:
        message = controller.receive()
        if isinstance(message, Heartbeat):  # the agent's "still here" (--agent-timeout)
            continue
        assert isinstance(message, EventReport), message
        event = message.event
        if isinstance(event, ProcessStarted):
            pid = event.pid
        if isinstance(event, UnitTransition) and event.to_state is InstanceState.READY:
            break
    assert pid is not None
    controller.send(junk)
    controller.send(encode(Shutdown()) + b"\n")
    last = None
    while (message := controller.receive()) is not None:
        last = message
    if not controller.reset:  # (a reset may drop what the agent sent last)
        assert isinstance(last, AgentStopped), last  # every event out, then "stopped"
    return pid


def test_junk_from_its_controller_never_crashes_an_agent(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    units.add(
        "lane@",
        "lane",
        ["sleep", "300"],
        lane={"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"},
    )
    (tmp_path / "state" / "logs").mkdir(parents=True, mode=0o700)
    others = st.lists(st.text(max_size=12), min_size=1, max_size=3).map(
        lambda names: encode(Start(tuple(names))) + b"\n"
    )
    junk = st.one_of(
        unauthenticated([NODE]),
        labelled("a command of any kind", messages(exclude=frozenset({"shutdown", "kill"}))),
        labelled("a start of instances not on the node", others),
        labelled("nesting 100000 deep", st.just(100_000).map(nested)),
    )
    tried: Counter[str] = Counter()

    @settings(
        max_examples=examples(12),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(junk)
    def throw(junk: Junk) -> None:
        event(junk.kind)
        _one_agent(tmp_path, junk.data)
        tried[junk.kind] += 1

    throw()
    print(f"agent fuzz: {sum(tried.values())} agents: {dict(tried)}")
