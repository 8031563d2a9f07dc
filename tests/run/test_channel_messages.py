"""The control channel's messages: every one survives the wire, and anything else is refused.

``decode`` is the only reader of the protocol, so it is held to two promises: each typed
message comes back equal to what was sent, and a line that is not one of them raises
:class:`ChannelError`, which ends that connection (checked over a real socket).
"""

from __future__ import annotations

import json
import socket

import pytest
import trio

from ddsup.channel import Channel, connect_channel, serve_channel
from ddsup.channel._agent_codec import decode_for_agent, encode_agent
from ddsup.channel._agent_messages import FROM_AGENT, TO_AGENT
from ddsup.channel._codec import decode, encode
from ddsup.channel._messages import (
    MESSAGES,
    AgentStopped,
    ChannelError,
    EndpointSetup,
    EventReport,
    FailHeld,
    Heartbeat,
    Hello,
    Inventory,
    Kill,
    LaneDrained,
    LanesChanged,
    LanesUpdate,
    Message,
    PreflightReport,
    ReadyLane,
    Restart,
    RestartAnswer,
    RestartOver,
    RestartProgress,
    RestartRequest,
    RestartStep,
    Resume,
    Role,
    Setup,
    Shutdown,
    SignalInstances,
    Signalled,
    Start,
    StatusReply,
    StatusRequest,
    Stop,
    StopAnswer,
    StopRequest,
    TakeDown,
)
from ddsup.channel._operator_codec import decode_operator, encode_operator
from ddsup.channel._operator_messages import OPERATOR_MESSAGES
from ddsup.plan import Node, Plan, PlannedInstance
from ddsup.process import ExitStatus
from ddsup.record import InstanceState, InstanceStatus, RunSnapshot, UnitTransition
from ddsup.record._events import RunStopping
from ddsup.units._model import EndpointSection, MinReady, UnitType

PLAN = Plan(
    nodes=(Node("n1", "10.0.0.1", (0, 1)),),
    client="n1",
    instances=(PlannedInstance("m@0", "m@", UnitType.LANE, "n1", (0,), 8000, 0, 0),),
    endpoint_url="http://127.0.0.1:9000",
)
EVENT = UnitTransition(
    instance="m@0",
    node="n1",
    from_state=InstanceState.STARTING,
    to_state=InstanceState.RESTARTING,
    reason="not ready within timeout_start = 1s; restart in 2s",
    restarts=1,
    readiness_timeout=True,
    probe="HTTP 503",
    time=12.5,
)
ROW = InstanceStatus(
    "m@0", "m@", UnitType.LANE, "n1", (0,), 8000, "m", InstanceState.FAILED, 3.0, None, 2,
    ExitStatus(signal=9), "start limit hit", "timed out (HTTP 503)", 1.5,
)  # fmt: skip
SAMPLES: list[Message] = [
    Hello(Role.AGENT, "s3cret", node="n1", pid=42),
    Hello(Role.CONTROL, "s3cret"),
    Inventory(("4", "GPU-8f2c", "MIG-1d3e"), "CUDA_VISIBLE_DEVICES"),
    Setup(PLAN, "inv", "/state", "/units", "1234", "http://127.0.0.1:9000", 12.5, 2),
    Heartbeat(),
    Start(("m@0", "m@1")),
    Stop(("m@0",), "a required unit failed"),
    SignalInstances(("m@0",), 10),
    TakeDown(("m@0", "m@0:1"), "m@0:2 went down (exit status 1)"),
    Resume(("m@0",), 0.25, 2),
    Resume(("m@0:1", "m@0:2"), 0.0, 2, 31234),
    FailHeld(("m@0",), "start limit hit: …", readiness_timeout=True),
    Kill(),
    Shutdown(),
    PreflightReport("n1", ("port 8000 planned for m@0 is already in use",), {"m@1": 41234}),
    PreflightReport("n2", warnings=("GPU 4 of m@2 is in use by another process",)),
    EventReport(EVENT),
    Signalled(15),
    AgentStopped("n1"),
    EndpointSetup(EndpointSection(port=9100, api_key_env="KEY", min_ready=MinReady(count=2))),
    LanesUpdate((ReadyLane("m@0", "m", "http://10.0.0.1:8000"),), ("m",)),
    LanesChanged((ReadyLane("m@1", "m", "http://10.0.0.1:8001"),), ("m@0",)),
    StatusRequest(),
    StatusReply(RunSnapshot("inv", "local", 1.0, 2.0, "/state", False, (ROW,))),
    StopRequest(),
    StopAnswer(),
    Restart(("m@0",), "restart requested (ddsup restart)"),
    LaneDrained("m@0"),
    RestartRequest(("m", "x@2"), rolling=True),
    RestartAnswer(("m@0", "m@1")),
    RestartAnswer(error="the run is stopping"),
    RestartProgress("m@0", RestartStep.DRAINING),
    RestartOver(ok=False),
    LanesUpdate(
        (ReadyLane("m@0", "m", "http://10.0.0.1:8000", ("m", "alias", "sql-lora")),),
        ("m",),
        ("alias", "m", "sql-lora"),
    ),
    Setup(PLAN, "inv", "/state", "/units", "1234", None, rehearse=True),
]


def test_every_message_has_a_sample() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGES)
    assert len({kind.op for kind in MESSAGES}) == len(MESSAGES), "ops must be unique"


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: Message) -> None:
    line = encode(message)
    assert b"\n" not in line
    assert decode(line) == message


@pytest.mark.parametrize(
    "message",
    [m for m in SAMPLES if isinstance(m, OPERATOR_MESSAGES)],
    ids=lambda m: type(m).__name__,
)
def test_the_operator_codec_writes_and_reads_the_same_bytes(message: Message) -> None:
    """``ddsup status`` speaks the operator's part of the codec only (its imports are a
    third of the command's CPU): the same bytes as the whole protocol's codec."""
    assert encode_operator(message) == encode(message)  # type: ignore[arg-type]
    assert decode_operator(encode(message)) == message
    assert encode_operator(Hello(Role.CONTROL, "s")) == encode(Hello(Role.CONTROL, "s"))


def test_a_status_reply_is_its_snapshot_s_json_with_the_rows_text_joined() -> None:
    """The controller joins each row's cached text (a reply of 8,000 rows is mostly a
    join): the same object as encoding the snapshot whole, and JSON a reader parses."""
    snapshot = RunSnapshot("inv", "local", 1.0, 2.0, "/state", True, (ROW, ROW), ends_at=9.5)
    data = json.loads(encode(StatusReply(snapshot)))
    assert data == {"op": "status_reply", "snapshot": snapshot.to_json()}
    empty = RunSnapshot("inv", "local", 1.0, 2.0, "/state", False, ())
    assert json.loads(encode(StatusReply(empty)))["snapshot"] == empty.to_json()


def test_the_operator_codec_refuses_the_run_s_own_messages() -> None:
    """An operator is answered with an operator's message, never with an agent's."""
    with pytest.raises(ChannelError, match="unknown message 'setup'"):
        decode_operator(encode(SAMPLES[-1]))
    with pytest.raises(ChannelError, match="expected an object"):
        decode_operator(_line({"op": "status_reply", "snapshot": []}))


@pytest.mark.parametrize(
    "message",
    [m for m in SAMPLES if isinstance(m, TO_AGENT + FROM_AGENT)],
    ids=lambda m: type(m).__name__,
)
def test_the_agent_codec_writes_the_same_bytes(message: Message) -> None:
    """A node agent speaks its connection's part of the codec only (``_agent_codec``):
    the same bytes as the whole protocol's, and it reads what a controller sends it."""
    assert encode_agent(message) == encode(message)  # type: ignore[arg-type]
    if isinstance(message, TO_AGENT):
        assert decode_for_agent(encode(message)) == message


@pytest.mark.parametrize(
    "message",
    [m for m in SAMPLES if not isinstance(m, TO_AGENT)],
    ids=lambda m: type(m).__name__,
)
def test_an_agent_reads_only_what_a_controller_sends_an_agent(message: Message) -> None:
    with pytest.raises(ChannelError, match=f"unknown message '{message.op}'"):
        decode_for_agent(encode(message))


def test_an_agent_reports_only_its_node_s_events() -> None:
    """The run's own lifecycle (``run`` events) is the controller's to record: an agent's
    report of one breaks the protocol like any malformed line."""
    line = _line({"op": "event", "event": RunStopping(time=1.0).to_json()})
    with pytest.raises(ChannelError, match="not a RunStopping"):
        decode(line)


def test_the_secret_is_not_in_a_hello_repr() -> None:
    assert "s3cret" not in repr(Hello(Role.CONTROL, "s3cret"))


def _line(data: object) -> bytes:
    return json.dumps(data).encode()


def _setup_with(**instance: object) -> bytes:
    """A setup whose plan's one instance has ``instance``'s fields instead."""
    data = json.loads(encode(SAMPLES[3]))
    data["plan"]["instances"][0].update(instance)
    return _line(data)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (b"{not json", "malformed message"),
        (_line([1, 2]), "not an object"),
        (_line({"op": "reboot"}), "unknown message 'reboot'"),
        (_line({"instances": ["a"]}), "unknown message None"),
        (_line({"op": "start"}), "missing field 'instances'"),
        (_line({"op": "start", "instances": "m@0"}), "'instances' must be a list"),
        (_line({"op": "start", "instances": [3]}), "'instances' must be str"),
        (_line({"op": "signal", "instances": [], "signum": True}), "'signum' must be int"),
        (_line({"op": "kill", "now": True}), "unknown fields ['now']"),
        (_line({"op": "hello", "role": "root", "secret": "x"}), "malformed 'hello'"),
        (_line({"op": "preflight", "node": "n", "ports": {"a": "1"}}), "must be int"),
        (_line({"op": "event", "event": {"event": "unit", "time": 1}}), "malformed 'event'"),
        (_line({"op": "setup", "plan": {"nodes": 3}}), "malformed 'setup'"),
        (_setup_with(port="8000"), "plan key 'port' must be an integer"),
        (_setup_with(gpus="01"), "plan key 'gpus' must be a list"),
        (_setup_with(served_names=["m", 3]), "plan key 'served_names' must be a string"),
        (_setup_with(type="daemon"), "'daemon' is not a valid UnitType"),
        (_setup_with(prot=8000), "instance has unknown fields ['prot']"),
        (_line({"op": "endpoint", "section": {"port": "9000"}}), "'port' must be int"),
        (_line({"op": "endpoint", "section": {"prot": 9000}}), "unknown fields ['prot']"),
        (_line({"op": "lanes", "lanes": [{"instance": "a"}]}), "missing field 'model'"),
        (_line({"op": "lanes_changed", "removed": [1]}), "'removed' must be str"),
        (_line({"op": "status_reply", "snapshot": []}), "expected an object"),
    ],
)
def test_anything_else_is_a_channel_error(line: bytes, why: str) -> None:
    with pytest.raises(ChannelError) as info:
        decode(line)
    assert why in str(info.value)


async def test_a_line_that_does_not_decode_ends_the_connection() -> None:
    """The server drops the peer: its next receive sees the end of the stream."""
    handled: list[Message] = []

    async def handler(channel: Channel, hello: Hello) -> None:
        while (message := await channel.receive()) is not None:
            handled.append(message)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_channel(handler, "s", task_status=task_status)
        )
        channel = await connect_channel(f"127.0.0.1:{port}", Hello(Role.CONTROL, "s"))
        await channel.send(StatusRequest())
        await channel._stream.send_all(b'{"op": "start", "instances": [1]}\n')
        with trio.fail_after(5):
            assert await channel.receive() is None
        await channel.aclose()
        nursery.cancel_scope.cancel()
    assert handled == [StatusRequest()]


def _ipv6_loopback() -> bool:
    """Whether ::1 can be bound here (Python may have IPv6 where the host has none)."""
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    ("listen", "reach"), [("127.0.0.1", "127.0.0.1"), ("::1", "[::1]"), ("127.0.0.1", "localhost")]
)
async def test_the_controller_is_reached_by_address_or_by_name(listen: str, reach: str) -> None:
    """A numeric address is connected to directly, a name is resolved first."""
    if listen == "::1" and not _ipv6_loopback():
        pytest.skip("no IPv6 loopback (::1) here")
    handled: list[Message] = []
    received = trio.Event()

    async def handler(channel: Channel, hello: Hello) -> None:
        while (message := await channel.receive()) is not None:
            handled.append(message)
            received.set()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_channel(handler, "s", host=listen, task_status=task_status)
        )
        channel = await connect_channel(f"{reach}:{port}", Hello(Role.CONTROL, "s"))
        await channel.send(StatusRequest())
        with trio.fail_after(5):
            await received.wait()
        await channel.aclose()
        nursery.cancel_scope.cancel()
    assert handled == [StatusRequest()]


async def test_a_controller_that_is_not_there_is_a_channel_error() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(
        ChannelError, match=f"cannot reach the ddsup controller at 127.0.0.1:{port}"
    ):
        await connect_channel(f"127.0.0.1:{port}", Hello(Role.CONTROL, "s"))


async def test_a_wrong_secret_is_dropped_before_any_message() -> None:
    handled: list[Hello] = []

    async def handler(channel: Channel, hello: Hello) -> None:
        handled.append(hello)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_channel(handler, "s", task_status=task_status)
        )
        channel = await connect_channel(f"127.0.0.1:{port}", Hello(Role.CONTROL, "wrong"))
        with trio.fail_after(5):
            assert await channel.receive() is None
        await channel.aclose()
        nursery.cancel_scope.cancel()
    assert handled == []


class _CountingStream(trio.abc.HalfCloseableStream):
    """A stream that counts its writes, in front of a real one."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.writes = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.writes += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self.inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_messages_sent_together_arrive_in_order_from_one_write() -> None:
    """An agent's burst of events (``send_many``): one write, every message, in order."""
    left, right = trio.socket.socketpair()
    counting = _CountingStream(trio.SocketStream(left))
    sender = Channel(counting)
    receiver = Channel(trio.SocketStream(right))
    burst: list[Message] = [LaneDrained(f"lane@{n}") for n in range(50)] + [StatusRequest()]
    with trio.fail_after(5):
        await sender.send_many(burst)
        received = [await receiver.receive() for _ in burst]
    assert received == burst
    assert counting.writes == 1
    await sender.aclose()
    await receiver.aclose()
