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
"""

from __future__ import annotations

import socket


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def pick_ports(count: int) -> list[int]:
    """Free ports picked by the kernel, held open together so they are distinct."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("0.0.0.0", 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


class HeldPorts:
    """Ports picked for ``port = "auto"`` lanes, bound (not listening) until released."""

    def __init__(self, count: int) -> None:
        self._sockets: list[socket.socket] = []
        try:
            for _ in range(count):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._sockets.append(sock)
                sock.bind(("0.0.0.0", 0))
        except BaseException:
            self.release()
            raise
        self.ports = [int(s.getsockname()[1]) for s in self._sockets]

    def release(self) -> None:
        """Let the lanes bind them (idempotent)."""
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()
