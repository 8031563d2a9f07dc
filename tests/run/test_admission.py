"""Which agents may join a run: only as a node an agent was launched for, and once.

The identity check compares something real: the node an agent says it runs on
(``SLURMD_NODENAME`` under Slurm) against the nodes the controller planned and launched
agents for. A refused agent is told nothing (no ``Setup``: no plan, no run facts) and is
never a node the run sends commands to.
"""

from __future__ import annotations

import trio

from ddsup.channel import Channel, connect_channel, serve_channel
from ddsup.channel._messages import Hello, Inventory, RestartRequest, Role, Setup
from ddsup.controller._agents import NodeInventory
from ddsup.controller._connections import ControlServer
from ddsup.controller._lane_publisher import LanePublisher
from ddsup.controller._nodes import RunNode
from ddsup.decide._run_inputs import AgentGone, Host, Input
from ddsup.plan._gpus import GpuList
from ddsup.record._status import RunSnapshot
from support import units as u

FOUR = Inventory(("4", "5"), "CUDA_VISIBLE_DEVICES")


def test_the_inventory_admits_planned_nodes_once_and_completes() -> None:
    inventory = NodeInventory()
    inventory.expect(["n1", "n2"])
    assert inventory.admit("n1", FOUR) is None
    assert not inventory.complete.is_set()
    assert inventory.admit("n1", FOUR) == "a second agent said hello as node 'n1'"
    assert inventory.admit("gpu7", FOUR) == (
        "an agent said hello as node 'gpu7', which is not a node of this run (n1, n2)"
    )
    assert inventory.missing() == ("n2",)
    assert inventory.admit("n2", Inventory((), "CUDA_VISIBLE_DEVICES")) is None
    assert inventory.complete.is_set()
    assert inventory.found == {
        "n1": GpuList(("4", "5"), "CUDA_VISIBLE_DEVICES"),
        "n2": GpuList((), "CUDA_VISIBLE_DEVICES"),
    }


async def test_a_refused_agent_gets_no_setup_and_is_no_node_of_the_run() -> None:
    inventory = NodeInventory()
    inventory.expect(["n1"])
    units = u.unit_set(u.lane("lane@"))
    plan = u.plan(units, count=1)
    fed: list[Input] = []
    nodes: dict[Host, RunNode] = {}

    async def setup(node: str) -> Setup:
        return Setup(plan, "inv", "/state", "/units", "job")

    async def no_restart(request: RestartRequest, channel: Channel) -> None:
        raise AssertionError("no operator here")

    server = ControlServer(
        feed=fed.append,
        admit=inventory.admit,
        setup=setup,
        snapshot=lambda: RunSnapshot("inv", "local", 0.0, 0.0, "/state", False, ()),
        stopping=lambda: False,
        nodes=nodes,
        lanes=LanePublisher(None),
        agent_instances=lambda node: frozenset(),
        agent_timeout=30.0,
        restart=no_restart,
    )

    async def agent(node: str) -> tuple[Channel, object]:
        channel = await connect_channel(f"127.0.0.1:{port}", Hello(Role.AGENT, "s", node=node))
        await channel.send(FOUR)
        with trio.fail_after(5):
            return channel, await channel.receive()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve_channel(server.serve, "s", task_status=task_status)
        )
        stray, said = await agent("gpu7")
        assert said is None  # dropped: not even the plan
        planned, said = await agent("n1")
        assert isinstance(said, Setup) and said.plan == plan
        assert set(nodes) == {Host("n1", agent=True)}
        await stray.aclose()
        await planned.aclose()
        with trio.fail_after(5):
            while not fed:  # noqa: ASYNC110 (the server's reader sees the close: no event)
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    assert [type(i) for i in fed] == [AgentGone]  # the admitted agent's end, nothing else
    assert fed[0].node == "n1"  # type: ignore[union-attr]
