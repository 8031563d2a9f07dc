"""Which agents may join the run, and what each found on its node.

Every agent says hello as a node (``SLURMD_NODENAME`` under Slurm, its ``--node`` for a
simulated one) and reports its node's GPUs at once (:class:`~ddsup.channel._messages.
Inventory`). The controller admits it only as a node it launched an agent for, and only
once: an agent on a node the plan does not know (Slurm calls the node by another name
than ``scontrol show hostnames`` did) or a second one for the same node is refused, and
the run ends 69 saying which. When the plan waits for the nodes' GPUs
(``Allocation.gpus_from_agents``), :attr:`NodeInventory.complete` is set once every
launched node has reported, and :attr:`found` is what gets placed on.
"""

from __future__ import annotations

from collections.abc import Iterable

import trio

from ddsup.channel import Inventory
from ddsup.plan import GpuList
from ddsup.units import printable


class NodeInventory:
    """The nodes agents were launched for, and the GPUs each one's agent reported."""

    def __init__(self) -> None:
        self.expected: tuple[str, ...] = ()
        self.found: dict[str, GpuList] = {}
        self.complete = trio.Event()

    def expect(self, nodes: Iterable[str]) -> None:
        """Agents are being launched for ``nodes``."""
        self.expected = tuple(nodes)
        self._check_complete()

    def admit(self, node: str, report: Inventory) -> str | None:
        """Record an agent's inventory; why it is refused (None: admitted)."""
        if node not in self.expected:
            planned = ", ".join(self.expected[:6]) + (", …" if len(self.expected) > 6 else "")
            return (
                f"an agent said hello as node {printable(node)!r}, which is not a node of "
                f"this run ({printable(planned) or 'none launched yet'})"
            )
        if node in self.found:
            return f"a second agent said hello as node {printable(node)!r}"
        self.found[node] = GpuList(report.gpus, report.source)
        self._check_complete()
        return None

    def missing(self) -> tuple[str, ...]:
        return tuple(n for n in self.expected if n not in self.found)

    def _check_complete(self) -> None:
        if self.expected and not self.missing():
            self.complete.set()
