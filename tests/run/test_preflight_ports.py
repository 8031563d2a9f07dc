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

from ddsup.agent import _ports
from ddsup.agent._preflight import run_preflight
from ddsup.plan import Node, make_plan
from ddsup.plan._gpus import GpuList
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


def _ephemeral_low() -> int:
    """The kernel's own range, read here (not through the code under test)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as handle:
        return int(handle.read().split()[0])


def test_picked_ports_lie_below_the_kernels_ephemeral_range() -> None:
    """A port the kernel would also hand to an outgoing connection (a probe, the
    endpoint's connection to a lane) could be taken as that connection's local end while
    its lane restarts, and the lane's bind would then fail: picked ports avoid the
    ephemeral range, and stay distinct across agents on one host."""
    low = _ephemeral_low()
    if low - _ports.AUTO_FLOOR < 4 * 64:
        pytest.skip(f"the ephemeral range starts at {low}: too little room below it here")
    first = _ports.HeldPorts(64)
    second = _ports.HeldPorts(64)
    try:
        ports = first.ports + second.ports
        assert len(set(ports)) == 128
        assert all(_ports.AUTO_FLOOR <= port < low for port in ports), ports
    finally:
        first.release()
        second.release()


def test_without_room_below_the_ephemeral_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node whose ephemeral range starts near the floor still gets its ports."""
    monkeypatch.setattr(_ports, "ephemeral_range", lambda: (_ports.AUTO_FLOOR + 10, 65000))
    held = _ports.HeldPorts(8)
    try:
        low = _ephemeral_low()
        assert len(set(held.ports)) == 8
        assert all(port >= low for port in held.ports), held.ports  # the kernel's picks
    finally:
        held.release()
