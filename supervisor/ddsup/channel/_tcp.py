"""A TCP connection without ``trio.open_tcp_stream``'s racing.

``open_tcp_stream`` races a host's addresses (happy eyeballs) with a nursery and a task
per address. The connections ddsup makes most often, or from most fresh processes at
once, are to a literal address or a name that resolves locally, where racing buys
nothing and the nursery costs CPU every time: every readiness probe of every lane, and
each agent's connection to its controller (hundreds of agents may start at once). So
their addresses are tried in turn.
"""

from __future__ import annotations

import socket

import trio


async def connect_tcp(host: str, port: int) -> trio.socket.SocketType:
    """A socket connected to ``host:port``, its addresses tried in turn (a literal one is
    not looked up: trio answers it without a thread). The last address's error is raised
    when none connects."""
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    error: OSError = OSError(f"no address for {host}")
    for family, type_, proto, _name, address in infos:
        sock = trio.socket.socket(family, type_, proto)
        try:
            await sock.connect(address)
        except OSError as err:
            sock.close()
            error = err
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error
