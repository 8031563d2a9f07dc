"""Ports picked for ``port = "auto"`` lanes stay taken until the lanes start.

Agents of simulated nodes (and several ``slurmd`` on one host) share one address: a
port one agent picked and let go was handed by the kernel to the next agent, and two
lanes then raced for it ("address already in use"; at 128 nodes × 8 lanes, every
run). Preflight holds what it picked; the agent lets go at the first start.
"""

from __future__ import annotations

import errno
import socket

import pytest

from ddsup.plan import Node, make_plan
from ddsup.plan._gpus import GpuList
from ddsup.run._preflight import run_preflight
from support import units as u


def _bind(port: int) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))


def test_picked_ports_are_held_until_released() -> None:
    units = u.unit_set(u.lane("a@", replicas=3))
    node = "n1"  # on this machine's loopback address, as simulated nodes are
    plan = make_plan(units, [Node(node, "127.0.0.1", (0, 1, 2, 3))], client=node)
    report, held = run_preflight(node, units, plan, gpus=GpuList.simulated(4))
    try:
        assert not report.problems
        ports = sorted(report.ports.values())
        assert len(set(ports)) == 3
        for port in ports:  # what another agent (or a lane) gets while they are held
            with pytest.raises(OSError, match="in use") as info:
                _bind(port)
            assert info.value.errno == errno.EADDRINUSE
        other, other_held = run_preflight(node, units, plan, gpus=GpuList.simulated(4))
        other_held.release()
        assert not set(other.ports.values()) & set(ports)
    finally:
        held.release()
    for port in ports:
        _bind(port)
    held.release()  # idempotent
