"""Helpers for the process tests: small Python children and a loopback report channel.

Children tell the test things (the PID of a grandchild they started) over a loopback TCP
connection to a port the test bound to 0, so the test waits on an event, never a sleep.
"""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psutil
import trio

from support.polls import until

# A child that starts a setsid grandchild (as vLLM's engine does), reports the
# grandchild's PID to 127.0.0.1:PORT, then sleeps (or exits with EXIT when given).
SETSID_PARENT = textwrap.dedent(
    """
    import socket, subprocess, sys, time
    port, then = int(sys.argv[1]), sys.argv[2]
    g = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(str(g.pid).encode())
    if then == "exit":
        sys.exit(0)
    time.sleep(600)
    """
)

SLEEP = "import time; time.sleep(600)"


def py(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


def run_env(invocation_id: str, unit: str = "test-unit") -> dict[str, str]:
    return {**os.environ, "DDSUP_INVOCATION_ID": invocation_id, "DDSUP_UNIT": unit}


def alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def wait_gone(pid: int, seconds: float = 5.0) -> bool:
    """Whether ``pid`` died within ``seconds`` (not our child: no exit event, bounded poll)."""
    try:
        await until(lambda: not alive(pid), f"pid {pid} to end", limit=seconds, interval=0.01)
    except AssertionError:
        return False
    return True


class Reporter:
    """A loopback listener; each ``receive`` takes one connection's whole message."""

    def __init__(self, listener: trio.SocketListener) -> None:
        self._listener = listener
        self.port: int = listener.socket.getsockname()[1]

    async def receive(self, seconds: float = 10.0) -> str:
        with trio.fail_after(seconds):
            stream = await self._listener.accept()
            async with stream:
                chunks = []
                while chunk := await stream.receive_some():
                    chunks.append(chunk)
        return b"".join(chunks).decode()


@asynccontextmanager
async def reporter() -> AsyncIterator[Reporter]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    async with listeners[0] as listener:
        yield Reporter(listener)
