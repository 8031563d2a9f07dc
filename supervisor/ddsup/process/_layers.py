"""The no-orphan layers one supervisor has on its node: what status and the events show,
and what ``<state dir>/containment/<supervisor>.json`` records for the sentinel and
``ddsup cleanup`` (``_containment`` opens them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ddsup.process import _cgroup, _registry


@dataclass(frozen=True)
class Layers:
    """The no-orphan layers of one supervisor on its node, as status shows them."""

    supervisor: str
    pid: int
    machine: _registry.Machine
    subreaper: bool
    sentinel: int | None
    registry: str | None  # the .pids file
    sentinel_of: str | None  # the supervisor whose sentinel covers us (we run none)
    cgroup: _cgroup.Cgroup | None  # this supervisor's subtree (<run>/<supervisor>)
    run_cgroup: _cgroup.Cgroup | None  # the run's cgroup on this node
    cgroup_reason: str | None  # why there is none
    registry_reason: str | None
    tag_sweep: bool  # ends everything tagged with the invocation id at close

    def names(self) -> list[str]:
        """The active layers, strongest first (the events and status line)."""
        found = []
        if self.cgroup is not None:
            found.append(f"cgroup {self.cgroup.kind.value}")
        if self.registry is not None:
            found.append("registry")
        if self.subreaper:
            found.append("subreaper")
        if self.sentinel is not None:
            found.append("sentinel")
        elif self.sentinel_of is not None:
            found.append(f"sentinel of {self.sentinel_of}")
        found.append("process group")
        found.append("tag sweep" if self.tag_sweep else "tag match")
        return found

    def summary(self) -> str:
        """One line: the active layers, and why a cgroup is not among them."""
        line = ", ".join(self.names())
        return line if self.cgroup_reason is None else f"{line} (no cgroup: {self.cgroup_reason})"

    def to_json(self) -> dict[str, Any]:
        cgroup = None
        if self.cgroup is not None and self.run_cgroup is not None:
            cgroup = {**self.cgroup.to_json(), "own": self.cgroup.path, "run": self.run_cgroup.path}
        return {
            "supervisor": self.supervisor,
            "pid": self.pid,
            "machine": self.machine.to_json(),
            "layers": self.names(),
            "subreaper": self.subreaper,
            "sentinel": self.sentinel,
            "sentinel_of": self.sentinel_of,
            "registry": self.registry,
            "registry_reason": self.registry_reason,
            "cgroup": cgroup,
            "cgroup_reason": self.cgroup_reason,
        }
