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
once it routes by it, which is what :meth:`WorkerPool.synced` waits for. Each message's
line has its ``TypedDict`` (:func:`encode`) and a reader that checks every field
(:func:`decode`), so a line that does not fit is the link's :class:`ChannelError`.
"""

from __future__ import annotations

import array
import dataclasses
import json
import reprlib
import secrets
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypedDict

import trio

from ddsup._json import Json, JsonObject
from ddsup.channel import ChannelError, LineChannel, from_json, line_json
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._lanes import LaneInfo
from ddsup.endpoint._metrics import Counted, CountersJson, Labelled
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
    counters: CountersJson
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
    counters: CountersJson


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


# --- encode -------------------------------------------------------------------------------
LaneRow = tuple[str, str, str, list[str], str | None, int]
"""A lane on the link: instance, model, URL, the other names it serves, the key the
endpoint sends it, and its slot in the counts table."""


class StartJson(TypedDict):
    op: Literal["start"]
    worker: int
    rows: int
    paced_gc: bool
    config: JsonObject  # EndpointConfig's fields


class LanesJson(TypedDict):
    op: Literal["lanes"]
    seq: int
    lanes: list[LaneRow]
    models: list[str]
    names: list[str]
    learned: list[list[str] | None]


class LanesChangedJson(TypedDict):
    op: Literal["lanes_changed"]
    seq: int
    joined: list[LaneRow]
    removed: list[str]
    learned: list[tuple[LaneRow, list[str]]]  # the lane (slot 0), the names it listed
    models: list[str]
    names: list[str]


class SamplesJson(TypedDict):
    op: Literal["samples"]
    seq: int
    samples: list[tuple[int, int | None]]
    cached: list[tuple[str, float, float]]


class ScrapedJson(TypedDict):
    op: Literal["scraped"]
    id: int
    counters: CountersJson
    workers: list[tuple[int, int]]


class CountersMessageJson(TypedDict):
    op: Literal["counters"]
    id: int
    counters: CountersJson


class IdJson(TypedDict):
    op: Literal["snapshot", "scrape"]
    id: int


class AppliedJson(TypedDict):
    op: Literal["applied"]
    seq: int


class ReadyJson(TypedDict):
    op: Literal["ready"]


MessageJson = (
    StartJson
    | LanesJson
    | LanesChangedJson
    | SamplesJson
    | ScrapedJson
    | CountersMessageJson
    | IdJson
    | AppliedJson
    | ReadyJson
)
"""A message as its line holds it (tuples become JSON arrays there)."""


def encode(message: Message) -> MessageJson:
    if isinstance(message, Start):
        return {
            "op": "start",
            "worker": message.worker,
            "rows": message.rows,
            "paced_gc": message.paced_gc,
            "config": _config_json(message.config),
        }
    if isinstance(message, Lanes):
        return {
            "op": "lanes",
            "seq": message.seq,
            "lanes": [_lane_row(lane, slot) for lane, slot in message.lanes],
            "models": list(message.models),
            "names": list(message.names),
            "learned": [None if names is None else list(names) for names in message.learned],
        }
    if isinstance(message, LanesChanged):
        return {
            "op": "lanes_changed",
            "seq": message.seq,
            "joined": [_lane_row(lane, slot) for lane, slot in message.joined],
            "removed": list(message.removed),
            "learned": [(_lane_row(lane, 0), list(names)) for lane, names in message.learned],
            "models": list(message.models),
            "names": list(message.names),
        }
    if isinstance(message, Samples):
        return {
            "op": "samples",
            "seq": message.seq,
            "samples": list(message.samples),
            "cached": list(message.cached),
        }
    if isinstance(message, Scraped):
        return {
            "op": "scraped",
            "id": message.id,
            "counters": message.counters,
            "workers": list(message.workers),
        }
    if isinstance(message, Counters):
        return {"op": "counters", "id": message.id, "counters": message.counters}
    if isinstance(message, SnapshotWanted):
        return {"op": "snapshot", "id": message.id}
    if isinstance(message, Scrape):
        return {"op": "scrape", "id": message.id}
    if isinstance(message, Applied):
        return {"op": "applied", "seq": message.seq}
    return {"op": "ready"}


def _config_json(config: EndpointConfig) -> JsonObject:
    out: JsonObject = {}
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, Routing):
            value = value.value
        out[field.name] = value
    return out


def _lane_row(lane: LaneInfo, slot: int) -> LaneRow:
    return (lane.instance, lane.model, lane.url, list(lane.served_names), lane.api_key, slot)


# --- decode -------------------------------------------------------------------------------
def decode(data: JsonObject) -> Message:
    """The message in ``data``; :class:`ChannelError` when it is not one."""
    op = data.pop("op", None)
    read = _READERS.get(op) if isinstance(op, str) else None
    if read is None:
        raise ChannelError(f"malformed endpoint link message: unknown op {reprlib.repr(op)}")
    try:
        return read(data)
    except (KeyError, TypeError, ValueError) as err:
        raise ChannelError(f"malformed endpoint link message: {err!r}") from err


def _start(data: JsonObject) -> Start:
    config = _object(data["config"])
    return Start(
        _int(data["worker"]),
        _int(data["rows"]),
        _bool(data["paced_gc"]),
        from_json(EndpointConfig, config),
    )


def _lanes(data: JsonObject) -> Lanes:
    return Lanes(
        _int(data["seq"]),
        tuple(_lane_of(row) for row in _list(data["lanes"])),
        _strs(data["models"]),
        _strs(data["names"]),
        tuple(None if names is None else _strs(names) for names in _list(data["learned"])),
    )


def _lanes_changed(data: JsonObject) -> LanesChanged:
    learned = []
    for pair in _list(data["learned"]):
        row, names = _row(pair, 2)
        learned.append((_lane_of(row)[0], _strs(names)))
    return LanesChanged(
        _int(data["seq"]),
        tuple(_lane_of(row) for row in _list(data["joined"])),
        _strs(data["removed"]),
        tuple(learned),
        _strs(data["models"]),
        _strs(data["names"]),
    )


def _samples(data: JsonObject) -> Samples:
    samples = []
    for pair in _list(data["samples"]):
        slot, waiting = _row(pair, 2)
        samples.append((_int(slot), None if waiting is None else _int(waiting)))
    return Samples(_int(data["seq"]), tuple(samples), tuple(_cached(data["cached"])))


def _scraped(data: JsonObject) -> Scraped:
    workers = []
    for pair in _list(data["workers"]):
        index, pid = _row(pair, 2)
        workers.append((_int(index), _int(pid)))
    return Scraped(_int(data["id"]), _counters(data["counters"]), tuple(workers))


def _lane_of(row: Json) -> tuple[LaneInfo, int]:
    instance, model, url, names, key, slot = _row(row, 6)
    lane = LaneInfo(_str(instance), _str(model), _str(url), _strs(names), _str_or_none(key))
    return lane, _int(slot)


def _counters(value: Json) -> CountersJson:
    """Another worker's :meth:`Metrics.snapshot`, each row checked and a tuple again."""
    data = _object(value)
    return {
        "requests": _labelled(data["requests"]),
        "retries": _counted(data["retries"]),
        "rejected": _labelled(data["rejected"]),
        "upstream_errors": _labelled(data["upstream_errors"]),
        "metrics_errors": _counted(data["metrics_errors"]),
        "ejections": _counted(data["ejections"]),
        "prefix_routed": _labelled(data["prefix_routed"]),
        "lane_cache": _cached(data["lane_cache"]),
        "histogram": [_bucketed(row) for row in _list(data["histogram"])],
        "body_bytes": _int(data["body_bytes"]),
        "waiting": _counted(data["waiting"]),
    }


def _labelled(value: Json) -> list[Labelled]:
    rows = []
    for row in _list(value):
        first, second, n = _row(row, 3)
        rows.append((_str(first), _str(second), _int(n)))
    return rows


def _counted(value: Json) -> list[Counted]:
    rows = []
    for row in _list(value):
        label, n = _row(row, 2)
        rows.append((_str(label), _int(n)))
    return rows


def _cached(value: Json) -> list[tuple[str, float, float]]:
    rows = []
    for row in _list(value):
        lane, queries, hits = _row(row, 3)
        rows.append((_str(lane), _float(queries), _float(hits)))
    return rows


def _bucketed(row: Json) -> tuple[str, list[int], float]:
    model, counts, total = _row(row, 3)
    return _str(model), [_int(n) for n in _list(counts)], _float(total)


def _object(value: Json) -> JsonObject:
    if not isinstance(value, dict):
        raise ValueError(f"expected an object, not {reprlib.repr(value)}")
    return value


def _list(value: Json) -> list[Json]:
    if not isinstance(value, list):
        raise ValueError(f"expected an array, not {reprlib.repr(value)}")
    return value


def _row(value: Json, length: int) -> list[Json]:
    row = _list(value)
    if len(row) != length:
        raise ValueError(f"expected {length} items, not {reprlib.repr(value)}")
    return row


def _str(value: Json) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, not {reprlib.repr(value)}")
    return value


def _str_or_none(value: Json) -> str | None:
    return None if value is None else _str(value)


def _strs(value: Json) -> tuple[str, ...]:
    return tuple(_str(item) for item in _list(value))


def _int(value: Json) -> int:
    if type(value) is not int:
        raise ValueError(f"expected an integer, not {reprlib.repr(value)}")
    return value


def _float(value: Json) -> float:
    if type(value) is int or type(value) is float:
        return float(value)
    raise ValueError(f"expected a number, not {reprlib.repr(value)}")


def _bool(value: Json) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, not {reprlib.repr(value)}")
    return value


def _flat(kind: type[Message]) -> Callable[[JsonObject], Message]:
    def read(data: JsonObject) -> Message:
        return from_json(kind, data)  # type: ignore[no-any-return]

    return read


_READERS: dict[str, Callable[[JsonObject], Message]] = {
    "start": _start,
    "lanes": _lanes,
    "lanes_changed": _lanes_changed,
    "samples": _samples,
    "snapshot": _flat(SnapshotWanted),
    "scraped": _scraped,
    "ready": _flat(Ready),
    "applied": _flat(Applied),
    "counters": lambda data: Counters(_int(data["id"]), _counters(data["counters"])),
    "scrape": _flat(Scrape),
}


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
        message = _from_line(line)
    except BaseException:
        sock.close()
        raise
    if not isinstance(message, Start):
        raise ChannelError(f"expected the start message, got {type(message).__name__}")
    return open_link(trio.SocketStream(sock)), message, fds
