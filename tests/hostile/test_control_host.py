"""Where the control channel listens: the allocation's address, never every interface."""

from __future__ import annotations

import pytest

from ddsup._errors import UsageError
from ddsup.plan._model import Node
from ddsup.plan._resolve import Allocation, LauncherKind
from ddsup.run._control_host import control_host


def _allocation(launcher: LauncherKind, client_address: str) -> Allocation:
    nodes = (Node("n1", client_address, (0,)),)
    return Allocation(launcher, nodes, "n1", client_address, False, 1, True)


async def test_locally_it_is_loopback() -> None:
    assert await control_host(_allocation(LauncherKind.LOCAL, "10.1.2.3"), {}) == "127.0.0.1"


async def test_under_slurm_it_is_the_client_node_s_address_resolved_once() -> None:
    allocation = _allocation(LauncherKind.SLURM, "127.0.0.1")
    assert await control_host(allocation, {}) == "127.0.0.1"
    localhost = await control_host(allocation, {"DDSUP_CONTROL_HOST": "localhost"})
    assert localhost in ("127.0.0.1", "::1")


async def test_a_name_that_does_not_resolve_says_what_to_set() -> None:
    allocation = _allocation(LauncherKind.SLURM, "no-such-node.invalid")
    with pytest.raises(UsageError, match="set DDSUP_CONTROL_HOST"):
        await control_host(allocation, {})
