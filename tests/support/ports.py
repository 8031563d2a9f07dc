"""Free loopback ports for tests that must name one (an endpoint unit's ``port``).

A test never names a fixed port such as the endpoint's documented default 9000: two
suites on one machine (two CI clones, a developer's run beside a bench) would collide,
and the second run's endpoint would fail with "address already in use".
"""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on loopback that was free a moment ago (bound to 0, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
