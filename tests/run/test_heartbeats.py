"""Heartbeats are the controller's round trips, and silence still means loss on both sides.

The controller keeps one clock for every agent connection and sends each beat; an agent
answers every beat it gets and sends none unasked (``ddsup.channel._heartbeat``). Here a
real ``ddsup agent`` talks to this test, which plays its controller over a plain socket:
it answers each beat once and stays quiet between them, and when its controller falls
silent (a frozen or unreachable controller: the connection stays open) it stops its lane
and ends within ``agent_timeout``. Then a real run with a short ``--agent-timeout`` stays
idle for several timeouts without losing a node: the controller's beats and the agents'
answers keep every connection alive.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

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
from ddsup.plan._resolve import AllocationRequest, LauncherChoice, plan_for, resolve_allocation
from ddsup.record import InstanceState, ProcessStarted, UnitTransition
from ddsup.units import load_unit_set
from support import procs
from support.runs import PY, running, start_env
from support.unit_dirs import UnitDir

SECRET = "heartbeat-test-secret"
NODE = "node0"


class _Controller:
    """The test's end of one agent's connection: JSON lines over a plain socket, read
    with a deadline (``receive(within=…)``: None when nothing came in time), counting the
    heartbeats each way."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.beats_sent = self.beats_received = 0

    def send(self, message: Message) -> None:
        self.beats_sent += isinstance(message, Heartbeat)
        self.sock.sendall(encode(message) + b"\n")

    def receive(self, within: float = 30.0) -> Message | None:
        deadline = time.monotonic() + within
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                raise EOFError("the agent closed its connection")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        message = decode(line)
        self.beats_received += isinstance(message, Heartbeat)
        return message

    def next_report(self, beat_every: float) -> Message:
        """The agent's next message other than a heartbeat, beating every ``beat_every``
        seconds meanwhile (as a live controller does)."""
        while True:
            message = self.receive(within=beat_every)
            if message is None:
                self.send(Heartbeat())
            elif not isinstance(message, Heartbeat):
                return message


@contextmanager
def _agent(
    tmp_path: Path, agent_timeout: float
) -> Iterator[tuple[_Controller, subprocess.Popen[bytes], int]]:
    """A real agent with one ``sleep`` lane started and ready: (its controller, the agent,
    the lane's pid). Whatever happens, the agent is ended and reaped."""
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": 1, "port": "auto", "stagger": "0s"}
    units.add("lane@", "lane", ["sleep", "300"], lane=lane)
    state = tmp_path / "state"
    (state / "logs").mkdir(parents=True, mode=0o700)
    request = AllocationRequest(launcher=LauncherChoice.LOCAL, nodes=1, gpus_per_node=1)
    plan = plan_for(load_unit_set(units), resolve_allocation(request, {}))
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)
        address = f"127.0.0.1:{server.getsockname()[1]}"
        env = start_env({ADDRESS_ENV: address, SECRET_ENV: SECRET})
        output = (tmp_path / "agent.out").open("wb")
        argv = [PY, "-m", "ddsup", "agent", "--node", NODE, "--gpus-per-node", "1"]
        agent = subprocess.Popen(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output
        )
        try:
            sock, _ = server.accept()
            with sock:
                controller = _Controller(sock)
                assert isinstance(controller.receive(), Hello)
                assert isinstance(controller.receive(), Inventory)
                run_id = uuid.uuid4().hex  # the run's cgroup and tag: never another suite's
                setup = Setup(plan, run_id, str(state), os.fspath(units), "hb", None, agent_timeout)
                controller.send(setup)
                beat_every = agent_timeout / 3
                while isinstance(reply := controller.next_report(beat_every), EventReport):
                    pass  # its node's containment
                assert isinstance(reply, PreflightReport), reply
                controller.send(Start(("lane@0",)))
                lane = _until_ready(controller, beat_every)
                yield controller, agent, lane
        finally:
            if agent.poll() is None:
                agent.kill()
            agent.wait()
            output.close()


def _until_ready(controller: _Controller, beat_every: float) -> int:
    """The lane's pid, once the agent reported it ready."""
    pid = None
    while True:
        message = controller.next_report(beat_every)
        assert isinstance(message, EventReport), message
        event = message.event
        if isinstance(event, ProcessStarted):
            pid = event.pid
        if isinstance(event, UnitTransition) and event.to_state is InstanceState.READY:
            assert pid is not None
            return pid


def _until_hangup(controller: _Controller) -> list[Message]:
    """What the agent sends until it closes the connection."""
    messages = []
    try:
        while (message := controller.receive(within=15)) is not None:
            messages.append(message)
    except EOFError:
        return messages
    raise AssertionError(f"the agent neither spoke nor hung up for 15 s after {messages}")


@pytest.mark.slow  # a node agent and its lane: a few seconds
def test_an_agent_answers_each_heartbeat_once_and_sends_none_unasked(tmp_path: Path) -> None:
    # An agent that kept its own clock would beat every 0.4-0.67 s with a 2 s timeout.
    with _agent(tmp_path, agent_timeout=2.0) as (controller, agent, lane):
        while controller.beats_received < controller.beats_sent:  # answers still on the way
            assert isinstance(controller.receive(within=2.0), Heartbeat)
        for _ in range(3):
            controller.send(Heartbeat())
            assert isinstance(controller.receive(within=1.0), Heartbeat)
            # longer than a self-clocked beat's interval, and nothing comes unasked in it
            assert controller.receive(within=0.7) is None
        controller.send(Shutdown())
        rest = []
        while (message := controller.receive(within=15)) is not None:
            rest.append(message)
            if isinstance(message, AgentStopped):
                break
        assert not any(isinstance(m, Heartbeat) for m in rest), rest
        assert isinstance(rest[-1], AgentStopped), rest
        assert agent.wait(timeout=15) == 0
    assert not procs.alive(lane)


@pytest.mark.slow  # a node agent and its lane: a few seconds
def test_an_agent_whose_controller_falls_silent_stops_its_lane_within_agent_timeout(
    tmp_path: Path,
) -> None:
    with _agent(tmp_path, agent_timeout=1.5) as (controller, agent, lane):
        silent_since = time.monotonic()  # the connection stays open: no FIN, no RST
        messages = _until_hangup(controller)
        took = time.monotonic() - silent_since
        assert agent.wait(timeout=15) == 0
        assert not procs.alive(lane), "the agent left its lane running"
    assert isinstance(messages[-1], AgentStopped), messages
    # lost after 1.5 s of silence (not before), then a quick stop of a `sleep` lane
    assert 1.5 <= took < 1.5 + 5, took


@pytest.mark.slow  # two node agents for several agent timeouts
async def test_an_idle_run_keeps_its_agents_for_many_agent_timeouts(tmp_path: Path) -> None:
    units = UnitDir(tmp_path / "units")
    lane = {"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"}
    units.add("lane@", "lane", ["sleep", "60"], lane=lane)
    args = ("--nodes", "2", "--gpus-per-node", "1", "--agent-timeout", "2s")
    async with running(units, tmp_path / "state", *args) as run:
        await run.wait_ready("lane@0", "lane@1")
        await trio.sleep(6)  # three agent timeouts of idling: the time itself is the test
        events = run.run.events(live=True)
        run.signal(signal.SIGTERM)
        done = await run.wait()
    lost = [e for e in events if "lost" in str(e.get("reason", "")) or e.get("to") == "failed"]
    assert not lost, lost
    assert done.returncode == 143, done.describe()
    assert done.result()["status"] == "stopped", done.describe()
