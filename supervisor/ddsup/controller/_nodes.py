"""The instances of a run live on nodes, and every node is driven the same way.

:class:`LocalNode` is the controller's own node (the client: endpoint, worker, client
services), whose services run in ``ddsup start`` itself; :class:`RemoteNode` is a node
agent at the other end of a control connection. The controller carries the run's
decisions out through this one interface and never asks which kind it has.

Every call returns at once. Services report what they did as events (a stop's ``exited``
transition); a remote node's messages leave in the order they were given, through one
task per connection (:meth:`RemoteNode.send_all`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Protocol

import trio

from ddsup.agent import NodeRunner
from ddsup.channel import (
    Channel,
    FailHeld,
    Kill,
    Message,
    Restart,
    Resume,
    Shutdown,
    SignalInstances,
    Start,
    Stop,
    TakeDown,
)
from ddsup.decide import (
    FailOn,
    NodeDecision,
    RestartOn,
    ResumeOn,
    SignalOn,
    StartOn,
    StopOn,
    TakeDownOn,
)


class RunNode(Protocol):
    """Start, stop, signal and kill the instances of one node; its replica ranks' restarts."""

    def start(self, instances: Sequence[str]) -> None: ...

    def stop(self, instances: Sequence[str], reason: str) -> None: ...

    def restart(self, instances: Sequence[str], reason: str) -> None: ...

    def signal(self, instances: Sequence[str], signum: int) -> None: ...

    def take_down(self, instances: Sequence[str], reason: str) -> None: ...

    def resume(
        self, instances: Sequence[str], delay: float, attempt: int, master_port: int | None
    ) -> None: ...

    def fail_held(self, instances: Sequence[str], reason: str, readiness_timeout: bool) -> None: ...

    def kill(self) -> None: ...

    def shutdown(self) -> None: ...


NODE_DECISIONS = (StartOn, StopOn, RestartOn, SignalOn, TakeDownOn, ResumeOn, FailOn)


def deliver(node: RunNode, decision: NodeDecision) -> None:
    """Carry out one decision for the instances of ``node``."""
    names = decision.instances
    if isinstance(decision, StartOn):
        node.start(names)
    elif isinstance(decision, StopOn):
        node.stop(names, decision.reason)
    elif isinstance(decision, RestartOn):
        node.restart(names, decision.reason)
    elif isinstance(decision, SignalOn):
        node.signal(names, decision.signum)
    elif isinstance(decision, TakeDownOn):
        node.take_down(names, decision.reason)
    elif isinstance(decision, ResumeOn):
        node.resume(names, decision.delay, decision.attempt, decision.master_port)
    else:
        node.fail_held(names, decision.reason, decision.readiness_timeout)


class LocalNode:
    """The controller's own instances, each a service in ``ddsup start``."""

    def __init__(self, runner: NodeRunner) -> None:
        self.runner = runner

    def start(self, instances: Sequence[str]) -> None:
        for instance in instances:
            self.runner.start(instance)

    def stop(self, instances: Sequence[str], reason: str) -> None:
        self.runner.request_stop(instances, reason)

    def restart(self, instances: Sequence[str], reason: str) -> None:
        self.runner.restart(instances, reason)

    def signal(self, instances: Sequence[str], signum: int) -> None:
        self.runner.signal(instances, signum)

    def take_down(self, instances: Sequence[str], reason: str) -> None:
        self.runner.take_down(instances, reason)

    def resume(
        self, instances: Sequence[str], delay: float, attempt: int, master_port: int | None
    ) -> None:
        for instance in instances:
            self.runner.resume(instance, delay, attempt, master_port)

    def fail_held(self, instances: Sequence[str], reason: str, readiness_timeout: bool) -> None:
        self.runner.fail_held(instances, reason, readiness_timeout)

    def kill(self) -> None:
        self.runner.kill_all()

    def shutdown(self) -> None:
        """Nothing: the stop sequence has stopped them, and they go with ``ddsup start``."""


class RemoteNode:
    """A node agent: every call is a message on its connection, in call order."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._send, self._outbox = trio.open_memory_channel[Message](math.inf)

    def start(self, instances: Sequence[str]) -> None:
        self.put(Start(tuple(instances)))

    def stop(self, instances: Sequence[str], reason: str) -> None:
        self.put(Stop(tuple(instances), reason))

    def restart(self, instances: Sequence[str], reason: str) -> None:
        self.put(Restart(tuple(instances), reason))

    def signal(self, instances: Sequence[str], signum: int) -> None:
        self.put(SignalInstances(tuple(instances), signum))

    def take_down(self, instances: Sequence[str], reason: str) -> None:
        self.put(TakeDown(tuple(instances), reason))

    def resume(
        self, instances: Sequence[str], delay: float, attempt: int, master_port: int | None
    ) -> None:
        self.put(Resume(tuple(instances), delay, attempt, master_port))

    def fail_held(self, instances: Sequence[str], reason: str, readiness_timeout: bool) -> None:
        self.put(FailHeld(tuple(instances), reason, readiness_timeout))

    def kill(self) -> None:
        self.put(Kill())

    def shutdown(self) -> None:
        self.put(Shutdown())

    def put(self, message: Message) -> None:
        """Queue ``message`` for the agent (dropped once its connection is gone)."""
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            self._send.send_nowait(message)

    async def send_all(self, channel: Channel) -> None:
        """Send what is put, in order, for as long as the connection lasts (cancel to end)."""
        async with self._outbox:
            async for message in self._outbox:
                try:
                    await channel.send(message)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    return  # the agent is gone: its connection's reader says so
