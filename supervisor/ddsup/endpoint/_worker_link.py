"""The link between the endpoint's parent process and each of its workers.

With ``workers > 1`` the parent binds the port and follows the lane feed; each worker
serves connections. They talk over a Unix socket in the abstract namespace whose name
only the parent and its workers know (it is in the workers' argv), and the parent
accepts a connection only from a PID it spawned (``SO_PEERCRED``): the first message
carries the configuration, API key included, and the descriptors of the listening
sockets and of the shared counts table (``SCM_RIGHTS``), so nothing else may take it.

After that the link is JSON lines (:class:`ddsup.channel.Channel`) carrying the frozen
messages below. Parent to worker: :class:`Start`, :class:`Lanes`, :class:`Samples`,
:class:`LanesChanged`, :class:`SnapshotWanted`, :class:`Scraped`. Worker to parent:
:class:`Ready`, :class:`Applied`, :class:`Counters`, :class:`Scrape`. Every
:class:`Lanes`, :class:`LanesChanged` and :class:`Samples` has a sequence number that the worker acknowledges (:class:`Applied`)
once it routes by it, which is what :meth:`WorkerPool.synced` waits for.
"""

from __future__ import annotations

import array
import dataclasses
import json
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import Any

import trio

from ddsup.channel import ChannelError, LineChannel, line_json
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneInfo
from ddsup.units import Routing

MAX_FDS = 64  # listening sockets plus the counts table
_START_MAX = 1024 * 1024


@dataclass(frozen=True)
class Start:
    """The first message to a worker; the descriptors travel with it."""

    worker: int
    rows: int
    paced_gc: bool
    config: EndpointConfig


@dataclass(frozen=True)
class Lanes:
    """The parent's whole lane table: (lane, slot) pairs, the known models and names, and
    what each ready lane's ``/v1/models`` listed (``None``: not asked yet or no answer)."""

    seq: int
    lanes: tuple[tuple[LaneInfo, int], ...]
    models: tuple[str, ...]
    names: tuple[str, ...] = ()
    learned: tuple[tuple[str, ...] | None, ...] = ()  # one per lane of ``lanes``


@dataclass(frozen=True)
class LanesChanged:
    """What changed in the parent's lane table since its last :class:`Lanes` or
    :class:`LanesChanged`: the lanes that joined or replaced one of the same instance
    (with their slots), the instances that left, what changed in the names lanes
    listed, and the known models and names. A start whose lanes join one by one sends
    one lane a message, not the whole table each time."""

    seq: int
    joined: tuple[tuple[LaneInfo, int], ...]
    removed: tuple[str, ...]
    learned: tuple[tuple[LaneInfo, tuple[str, ...]], ...]
    models: tuple[str, ...]
    names: tuple[str, ...]


@dataclass(frozen=True)
class Samples:
    """One sampling round's queue samples: (slot, waiting) pairs, ``waiting`` ``None``
    where the lane's /metrics failed. One message a round, not one a lane: with 1,024
    busy lanes that is one line a second per worker instead of 1,024 (and as many acks).
    ``cached``: what the lanes' prefix-cache counters added, (lane, queries, hits), for
    the time series of worker 0 (the parent, which samples, writes none)."""

    seq: int
    samples: tuple[tuple[int, int | None], ...]
    cached: tuple[tuple[str, float, float], ...] = ()


@dataclass(frozen=True)
class SnapshotWanted:
    """The parent gathers every worker's counters for a scrape."""

    id: int


@dataclass(frozen=True)
class Scraped:
    """The summed counters for a worker's scrape, and the (index, pid) of those counted."""

    id: int
    counters: dict[str, Any]
    workers: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Ready:
    """The worker serves the port."""


@dataclass(frozen=True)
class Applied:
    """The worker routes by every message up to ``seq``."""

    seq: int


@dataclass(frozen=True)
class Counters:
    """A worker's counters, for the gathering ``id``."""

    id: int
    counters: dict[str, Any]


@dataclass(frozen=True)
class Scrape:
    """A worker answering ``GET /metrics`` wants the totals (its own ``id``)."""

    id: int


Message = (
    Start
    | Lanes
    | LanesChanged
    | Samples
    | SnapshotWanted
    | Scraped
    | Ready
    | Applied
    | Counters
    | Scrape
)
_OPS: dict[str, type[Message]] = {
    "start": Start,
    "lanes": Lanes,
    "lanes_changed": LanesChanged,
    "samples": Samples,
    "snapshot": SnapshotWanted,
    "scraped": Scraped,
    "ready": Ready,
    "applied": Applied,
    "counters": Counters,
    "scrape": Scrape,
}
_NAMES = {kind: op for op, kind in _OPS.items()}


def encode(message: Message) -> dict[str, Any]:
    data: dict[str, Any] = {"op": _NAMES[type(message)]}
    for field in dataclasses.fields(message):
        data[field.name] = getattr(message, field.name)
    if isinstance(message, Start):
        data["config"] = dataclasses.asdict(message.config)
    elif isinstance(message, Lanes):
        data["lanes"] = [_lane_row(lane, slot) for lane, slot in message.lanes]
    elif isinstance(message, LanesChanged):
        data["joined"] = [_lane_row(lane, slot) for lane, slot in message.joined]
        data["learned"] = [[_lane_row(lane, 0), list(names)] for lane, names in message.learned]
    return data


def _lane_row(lane: LaneInfo, slot: int) -> list[Any]:
    return [lane.instance, lane.model, lane.url, list(lane.served_names), lane.api_key, slot]


def _lane_of(row: list[Any]) -> tuple[LaneInfo, int]:
    instance, model, url, names, key, slot = row
    return LaneInfo(instance, model, url, tuple(names), key), int(slot)


def decode(data: dict[str, Any]) -> Message:
    """The message in ``data``; :class:`ChannelError` when it is not one."""
    try:
        kind = _OPS[data.pop("op")]
        if kind is Start:
            config = data["config"]
            config["open_routes"] = tuple(config["open_routes"])
            config["routing"] = Routing(config["routing"])
            data["config"] = EndpointConfig(**config)
        elif kind is Lanes:
            data["lanes"] = tuple(_lane_of(row) for row in data["lanes"])
            data["models"] = tuple(data["models"])
            data["names"] = tuple(data["names"])
            data["learned"] = tuple(None if x is None else tuple(x) for x in data["learned"])
        elif kind is LanesChanged:
            data["joined"] = tuple(_lane_of(row) for row in data["joined"])
            data["removed"] = tuple(str(instance) for instance in data["removed"])
            data["learned"] = tuple(
                (_lane_of(row)[0], tuple(names)) for row, names in data["learned"]
            )
            data["models"] = tuple(data["models"])
            data["names"] = tuple(data["names"])
        elif kind is Scraped:
            data["workers"] = tuple((i, p) for i, p in data["workers"])
        elif kind is Samples:
            data["samples"] = tuple((int(slot), waiting) for slot, waiting in data["samples"])
            data["cached"] = tuple(
                (str(lane), float(queries), float(hits))
                for lane, queries, hits in data.get("cached", ())
            )
        return kind(**data)
    except (KeyError, TypeError, ValueError) as err:
        raise ChannelError(f"malformed endpoint link message: {err!r}") from err


Link = LineChannel[Message]


def _to_line(message: Message) -> bytes:
    return line_json(encode(message)).encode()


def _from_line(line: bytes) -> Message:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise ChannelError(f"malformed endpoint link line: {err!r}") from err
    if not isinstance(data, dict):
        raise ChannelError("malformed endpoint link line: not an object")
    return decode(data)


def open_link(stream: trio.abc.Stream) -> Link:
    """The link over ``stream``: JSON lines of this module's messages."""
    return LineChannel(stream, _to_line, _from_line)


async def send(channel: Link, message: Message) -> None:
    await channel.send(message)


async def receive(channel: Link) -> Message | None:
    """The next message, ``None`` once the other side closed the link."""
    return await channel.receive()


def new_address() -> str:
    """A fresh abstract-namespace name for the parent's link socket."""
    return f"ddsup-endpoint-{secrets.token_hex(16)}"


async def listen(address: str) -> trio.socket.SocketType:
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    await sock.bind("\0" + address)
    sock.listen(128)
    return sock


def peer_pid(sock: trio.socket.SocketType) -> int:
    """The PID of the process at the other end of a Unix socket (the kernel's word)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid


async def send_start(sock: trio.socket.SocketType, start: Start, fds: list[int]) -> None:
    """The first message, with ``fds`` passed along (the worker gets its own copies)."""
    data = _to_line(start) + b"\n"
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    view = memoryview(data)[await sock.sendmsg([data], ancillary) :]
    while view:  # the descriptors went with the first byte; the rest is plain data
        view = view[await sock.send(view) :]


async def connect(address: str) -> tuple[Link, Start, list[int]]:
    """The worker's side: connect, then take the :class:`Start` message and descriptors."""
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        await sock.connect("\0" + address)
        fds: list[int] = []
        line = b""
        while not line.endswith(b"\n"):
            data, ancdata, _flags, _addr = await sock.recvmsg(
                65536, socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
            )
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    received = array.array("i")
                    received.frombytes(payload[: len(payload) - len(payload) % received.itemsize])
                    fds.extend(received)
            if not data:
                raise ChannelError("the endpoint's parent closed the link before starting us")
            line += data
            if len(line) > _START_MAX:
                raise ChannelError("the endpoint's parent sent an oversized start message")
        try:
            message = decode(json.loads(line))
        except ValueError as err:
            raise ChannelError(f"malformed start message: {err}") from err
    except BaseException:
        sock.close()
        raise
    if not isinstance(message, Start):
        raise ChannelError(f"expected the start message, got {type(message).__name__}")
    return open_link(trio.SocketStream(sock)), message, fds
