"""What the hostile-input tests share: junk for the control channel, a run to throw it at.

The junk strategies draw what a peer on the cluster could send to a control port: raw
bytes, JSON of any shape, hellos with wrong secrets and odd fields, messages of every
kind with fields of any type, and nesting deep enough to exhaust a recursive parser.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from hypothesis import strategies as st

from ddsup.channel._messages import MESSAGES
from support.runs import PY, start_env
from support.unit_dirs import UnitDir


def ddsup(
    *args: str, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """``ddsup ARGS`` to its end, as this process's user (``SecondUser.ddsup``: as another)."""
    argv = [PY, "-m", "ddsup", *args]
    return subprocess.run(
        argv, cwd=cwd, env=start_env(), capture_output=True, text=True, timeout=timeout
    )


# A worker that exits 7 once the file in argv[1] exists (bounded: 120 s, then 99).
RELEASE_PY = """\
import os, sys, time
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]):
    if time.monotonic() > deadline:
        sys.exit(99)
    time.sleep(0.05)
sys.exit(7)
"""
WORKER_STATUS = 7


def release_units(path: Path, release: Path) -> UnitDir:
    """One lane per simulated node (so agents run), and a worker that waits for ``release``."""
    units = UnitDir(path)
    (path / "release.py").write_text(RELEASE_PY)
    units.add(
        "lane@",
        "lane",
        ["sleep", "300"],
        lane={"model": "m", "gpus": 1, "replicas": 2, "port": "auto", "stagger": "0s"},
    )
    units.add(
        "worker", "worker", [PY, str(path / "release.py"), str(release)], unit={"after": ["lane@"]}
    )
    return units


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=25,
)
ops = st.sampled_from([kind.op for kind in MESSAGES])


class Junk:
    """Bytes to send and what kind of junk they are, with a short repr (Hypothesis prints
    the examples it replays; ``--hypothesis-show-statistics`` counts the kinds)."""

    __slots__ = ("data", "kind")

    def __init__(self, kind: str, data: bytes) -> None:
        self.kind = kind
        self.data = data

    def __repr__(self) -> str:
        return f"Junk({self.kind}: {len(self.data)} bytes: {self.data[:80]!r}…)"


def labelled(kind: str, strategy: st.SearchStrategy[bytes]) -> st.SearchStrategy[Junk]:
    return strategy.map(lambda data: Junk(kind, data))


def examples(default: int) -> int:
    """Examples per fuzz test: ``DDSUP_FUZZ_EXAMPLES`` for a longer campaign."""
    return int(os.environ.get("DDSUP_FUZZ_EXAMPLES", default))


def _line(value: object) -> bytes:
    return json.dumps(value).encode() + b"\n"


@st.composite
def messages(draw: st.DrawFn, exclude: frozenset[str] = frozenset()) -> bytes:
    """A JSON line with a known ``op`` and fields of any type (often the op's own names)."""
    op = draw(ops.filter(lambda o: o not in exclude))
    kind = next(k for k in MESSAGES if k.op == op)
    names = [f for f in getattr(kind, "__dataclass_fields__", {}) if f != "op"]
    fields: dict[str, object] = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
    for name in draw(st.lists(st.sampled_from(names), max_size=len(names))) if names else []:
        fields[name] = draw(json_values)
    return _line({"op": op, **fields})


def _repeat(piece: tuple[bytes, int]) -> bytes:
    return piece[0] * piece[1]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth + b"\n"


def unauthenticated(nodes: list[str]) -> st.SearchStrategy[Junk]:
    """What anyone on the network can send to the port before saying the secret."""
    hellos = st.builds(
        lambda role, secret, node, extra: _line(
            {"op": "hello", "role": role, "secret": secret, "node": node, **extra}
        ),
        st.sampled_from(["agent", "lanes", "control", "root"]) | json_values,
        st.text(max_size=70) | json_values,
        st.sampled_from(nodes) | json_values,
        st.dictionaries(st.text(max_size=8), json_values, max_size=2),
    )
    long_lines = st.sampled_from([(b"x", 100_000), (b"\n", 10_000), (b"\xff", 5000)])
    return st.one_of(
        labelled("raw bytes", st.binary(max_size=2000)),
        labelled("JSON of any shape", json_values.map(_line)),
        labelled("hello, wrong secret or fields", hellos),
        labelled("message of any kind, fields of any type", messages()),
        labelled("nesting 10 to 200000 deep", st.integers(10, 200_000).map(nested)),
        labelled("long line, many lines, invalid UTF-8", long_lines.map(_repeat)),
    )


def exchange(port: int, data: bytes, *, limit: float = 15.0) -> bytes:
    """Send ``data``, close our side, and read until the server hangs up (at most ``limit``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit) as sock:
        received = b""
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + limit
            while chunk := sock.recv(65536):
                received += chunk
                if time.monotonic() > deadline:
                    raise AssertionError("the server kept the connection open")
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open for {limit:g}s") from None
        except OSError:
            pass  # reset, or not connected: the server hung up while we were still sending
        return received
