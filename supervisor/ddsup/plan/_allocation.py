"""The allocation: which hosts ddsup may use, and how many GPUs each has.

Hosts come from a Slurm nodelist expression (``gpu[01-04]``), or are simulated on this
machine for the local launcher. GPUs per node come from the command line (simulated) or
are detected (``ddsup.plan._gpus``). GPU positions in a :class:`Node` are always
``0..G-1``; its ``devices`` say which GPU each position is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping

import hostlist

from ddsup._errors import UsageError
from ddsup.plan._gpus import GpuList, detect_gpu_list
from ddsup.plan._plan import Node
from ddsup.units import printable

LOCAL_ADDRESS = "127.0.0.1"
_SCONTROL_TIMEOUT = 30.0


def nodes_from_nodelist(expr: str, gpus_per_node: int) -> list[Node]:
    """Nodes of a Slurm nodelist expression, in its order; addresses are the hostnames."""
    return _nodes(expand_nodelist(expr), gpus_per_node)


def nodes_from_hosts(hosts: list[str], gpus_per_node: int) -> list[Node]:
    """Nodes for already expanded hostnames (``scontrol show hostnames`` output)."""
    return _nodes(hosts, gpus_per_node)


def local_nodes(count: int, gpus_per_node: int) -> list[Node]:
    """``count`` simulated nodes on this machine: ``node0`` … ``node{count-1}``, all 127.0.0.1.

    They share one address, so a plan for them must use ``shared_address=True``.
    """
    if count < 1:
        raise UsageError(f"--nodes must be at least 1 (got {count})")
    return _nodes([f"node{i}" for i in range(count)], gpus_per_node, address=LOCAL_ADDRESS)


def expand_nodelist(expr: str) -> list[str]:
    """Hostnames of a nodelist expression with python-hostlist (no Slurm needed)."""
    try:
        hosts: list[str] = hostlist.expand_hostlist(expr.strip())
    except hostlist.BadHostlist as err:
        raise UsageError(f"bad nodelist {expr!r}: {printable(str(err))}") from err
    if not hosts:
        raise UsageError(f"bad nodelist {expr!r}: it names no hosts")
    return hosts


def slurm_hostnames(expr: str) -> list[str]:
    """Hostnames of ``SLURM_JOB_NODELIST``: ``scontrol show hostnames`` when Slurm is here.

    scontrol is the authority (site-specific hostlist syntax, ordering); python-hostlist
    is the fallback when the command is not installed on this host.
    """
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return expand_nodelist(expr)
    try:
        done = subprocess.run(
            [scontrol, "show", "hostnames", expr],
            capture_output=True,
            text=True,
            timeout=_SCONTROL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UsageError(
            f"cannot expand nodelist {expr!r} with scontrol: {printable(str(err))}"
        ) from err
    hosts = done.stdout.split()
    if done.returncode != 0 or not hosts:
        reason = done.stderr.strip() or f"exit status {done.returncode}"
        raise UsageError(f"scontrol show hostnames {expr!r} failed: {printable(reason)}")
    return hosts


def detect_gpus(environ: Mapping[str, str] | None = None, *, nvidia_smi: bool = True) -> int | None:
    """GPUs usable on this node, or None when nothing says (then ask for --gpus-per-node)."""
    found = detect_gpu_list(os.environ if environ is None else environ, nvidia_smi=nvidia_smi)
    return None if found is None else len(found.devices)


def _nodes(hosts: list[str], gpus_per_node: int, *, address: str | None = None) -> list[Node]:
    if gpus_per_node < 0:
        raise UsageError(f"--gpus-per-node must be 0 or more (got {gpus_per_node})")
    gpus = tuple(range(gpus_per_node))
    return [Node(name=h, address=address or h, gpus=gpus) for h in hosts]


def node_with(node: Node, found: GpuList) -> Node:
    """``node`` with the GPUs ``found`` there (simulated ones keep no device entries)."""
    simulated = found == GpuList.simulated(len(found.devices))
    devices = () if simulated else found.devices
    return Node(node.name, node.address, tuple(range(len(found.devices))), devices)


def slurm_node_addresses(hosts: list[str]) -> dict[str, str]:
    """Each node's ``NodeAddr`` from ``scontrol show node``: what other nodes connect to.

    Node names need not resolve (several ``slurmd`` on one host are named n1, n2, … and
    share one address), so lanes are reached at the address Slurm itself uses. Nodes
    scontrol does not describe keep their name as address.
    """
    addresses = {host: host for host in hosts}
    scontrol = shutil.which("scontrol")
    if scontrol is None or not hosts:
        return addresses
    try:
        done = subprocess.run(
            [scontrol, "show", "node", "--oneliner", ",".join(hosts)],
            capture_output=True,
            text=True,
            timeout=_SCONTROL_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return addresses
    for line in done.stdout.splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        name, address = fields.get("NodeName"), fields.get("NodeAddr")
        if name in addresses and address:
            addresses[name] = address
    return addresses
