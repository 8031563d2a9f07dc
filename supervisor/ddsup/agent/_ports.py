"""Free TCP ports on this node: is a planned one free, and which ones the kernel picks.

Preflight checks planned ports and picks ports for ``port = "auto"`` and holds them
(:class:`HeldPorts`) until the controller starts its lanes: released at once, the kernel
handed the same ports to the next agent on the same host (128 simulated nodes picking
1,024 ports always had a few clashes, lanes failing "address already in use"); held, no
agent can pick another's, since the controller starts lanes only once every agent has
reported; a multi-node
replica's rank 0 checks its rendezvous port again before each restart. A port is free
when a socket can bind it on every address (``SO_REUSEADDR``, as servers bind: a port in
``TIME_WAIT`` after its last user ended counts as free).

Picked ports lie below the kernel's ephemeral range (``ip_local_port_range``), from
``AUTO_FLOOR`` up: a port the kernel hands out for ``bind(0)`` is one it also hands to
outgoing connections, so while a lane restarted, a probe's or the endpoint's connection
could take its port as its local end, and the lane's bind then failed ("address already
in use"; seen once in the 128 × 8 bench). Where that range leaves too little below it,
the kernel picks, as before.
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Iterator

AUTO_FLOOR = 20000  # the lowest port picked; below the ephemeral range's usual 32768
_EPHEMERAL_DEFAULT = (32768, 60999)  # Linux's default ip_local_port_range


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def pick_ports(count: int) -> list[int]:
    """Free ports (see the module docstring), held open together so they are distinct."""
    held = HeldPorts(count)
    held.release()
    return held.ports


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for ports it picks itself (``bind(0)``, outgoing connections)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
            low, high = (int(word) for word in handle.read().split())
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT
    return low, high


def _candidates(count: int) -> Iterator[int]:
    """Ports below the ephemeral range from a random start, wrapping once; then 0 (the
    kernel's pick) for as long as asked, when that range leaves fewer than 4 × ``count``."""
    low, _high = ephemeral_range()
    span = low - AUTO_FLOOR
    if span >= 4 * count:
        start = random.randrange(span)  # agents on one host start apart, rarely collide
        for offset in range(span):
            yield AUTO_FLOOR + (start + offset) % span
    while True:
        yield 0


class HeldPorts:
    """Ports picked for ``port = "auto"`` lanes, bound (not listening) until released."""

    def __init__(self, count: int) -> None:
        self._sockets: list[socket.socket] = []
        try:
            candidates = _candidates(count)
            while len(self._sockets) < count:
                port = next(candidates)
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                try:
                    sock.bind(("0.0.0.0", port))
                except OSError as err:
                    sock.close()
                    if err.errno != errno.EADDRINUSE or port == 0:  # 0: none left at all
                        raise
                    continue
                self._sockets.append(sock)
        except BaseException:
            self.release()
            raise
        self.ports = [int(s.getsockname()[1]) for s in self._sockets]

    def release(self) -> None:
        """Let the lanes bind them (idempotent)."""
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
