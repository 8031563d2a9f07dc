"""Where the control channel listens: the allocation's address, never every interface."""

from __future__ import annotations

import socket

import pytest

from ddsup._errors import UsageError
from ddsup.controller._head_start import control_host, control_socket
from ddsup.plan._plan import Node
from ddsup.plan._resolve import Allocation, LauncherKind


def _allocation(launcher: LauncherKind, client_address: str) -> Allocation:
    nodes = (Node("n1", client_address, (0,)),)
    return Allocation(launcher, nodes, "n1", client_address, False, 1, True)


def test_locally_it_is_loopback() -> None:
    assert control_host(_allocation(LauncherKind.LOCAL, "10.1.2.3"), {}) == "127.0.0.1"


def test_under_slurm_it_is_the_client_node_s_address_resolved_once() -> None:
    allocation = _allocation(LauncherKind.SLURM, "127.0.0.1")
    assert control_host(allocation, {}) == "127.0.0.1"
    localhost = control_host(allocation, {"DDSUP_CONTROL_HOST": "localhost"})
    assert localhost in ("127.0.0.1", "::1")


def test_a_name_that_does_not_resolve_says_what_to_set() -> None:
    allocation = _allocation(LauncherKind.SLURM, "no-such-node.invalid")
    with pytest.raises(UsageError, match="set DDSUP_CONTROL_HOST"):
        control_host(allocation, {})


def test_the_control_socket_listens_on_that_address_only() -> None:
    with control_socket("127.0.0.1") as sock:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        assert not sock.get_inheritable(), "a unit would inherit the control socket"
        with socket.create_connection((host, port), timeout=5):
            pass  # accepted into the backlog before anything serves it
