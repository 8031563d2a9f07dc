"""Where ``ddsup start`` listens for its agents, its endpoint's feed and its operators.

Locally the agents are processes on this machine: ``127.0.0.1``. Under Slurm it is the
client node's address in the allocation (its ``NodeAddr``), or ``DDSUP_CONTROL_HOST``
when another interface must be used, resolved once to the one IP address that the
agents are given too. Never ``0.0.0.0``: the port is not opened on interfaces the job
does not use (docs/security.md).

Resolved and bound before trio runs (``_head_start``: the agents are launched first),
so with the ``socket`` module alone; the controller serves the socket with trio later.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping

from ddsup._errors import UsageError
from ddsup.plan import LOCAL_ADDRESS, Allocation, LauncherKind
from ddsup.units import printable

CONTROL_HOST_ENV = "DDSUP_CONTROL_HOST"
BACKLOG = 0xFFFF  # as trio's listeners ask (the kernel caps it at somaxconn): K agents at once


def control_host(allocation: Allocation, environ: Mapping[str, str]) -> str:
    """The IP address to listen on; UsageError when the name does not resolve."""
    if allocation.launcher is LauncherKind.LOCAL:
        return LOCAL_ADDRESS
    name = environ.get(CONTROL_HOST_ENV) or allocation.client_address
    try:
        found = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as err:
        raise UsageError(
            f"cannot resolve {printable(name)}, the address agents would reach ddsup start at "
            f"({err}): set {CONTROL_HOST_ENV} to an address of this node"
        ) from err
    return str(found[0][4][0])


def control_socket(host: str) -> socket.socket:
    """A listening TCP socket on ``host`` at a port the kernel picks (not inherited by
    children); the agents' connections wait in its backlog until the controller serves it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, 0), family=family, backlog=BACKLOG)
