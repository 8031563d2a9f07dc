"""Free loopback ports for tests that must name one (an endpoint unit's ``port``).

A test never names a fixed port such as the endpoint's documented default 9000: two
suites on one machine (two CI clones, a developer's run beside a bench) would collide,
and the second run's endpoint would fail with "address already in use".
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 20000  # well above the ports services are configured with by default


def ephemeral_first() -> int:
    """The first port of the kernel's ephemeral range."""
    return int(_EPHEMERAL.read_text().split()[0]) if _EPHEMERAL.exists() else 32768


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago, below the ephemeral range.

    A port the kernel handed out for ``bind(0)`` lies in the ephemeral range, from which
    it also picks the local port of every outgoing connection: in the moment between
    this call and the run's own bind, any connection on the machine (the run's agents
    connecting to their controller, say) could take it, and the run's preflight then
    refuses the busy port (exit 69; seen once in CI). A port below that range is only
    ever taken by a process that names it.
    """
    first = ephemeral_first()
    for port in random.sample(range(LOWEST, first), 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port between {LOWEST} and {first} in 200 tries")
