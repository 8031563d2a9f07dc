"""What the command line asks of the allocation: the launcher and its sizes.

Apart from the resolver (``_resolve``) so that what only needs to know which launcher a
run uses (a node agent applying a rehearsal) does not import the placement rules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from ddsup._errors import UsageError


class LauncherChoice(str, enum.Enum):
    """``--launcher``: what the user asked for."""

    AUTO = "auto"
    LOCAL = "local"
    SLURM = "slurm"


class LauncherKind(str, enum.Enum):
    """How the node agents are started: what ``auto`` resolved to."""

    LOCAL = "local"
    SLURM = "slurm"


@dataclass(frozen=True)
class AllocationRequest:
    """The command line's say in the allocation (``nodelist`` is ``ddsup plan``'s only)."""

    launcher: LauncherChoice = LauncherChoice.AUTO
    nodes: int | None = None
    gpus_per_node: int | None = None
    nodelist: str | None = None

    def __post_init__(self) -> None:
        if self.nodes is not None and self.nodes < 1:
            raise UsageError(f"--nodes must be at least 1 (got {self.nodes})")
        if self.gpus_per_node is not None and self.gpus_per_node < 0:
            raise UsageError(f"--gpus-per-node must be 0 or more (got {self.gpus_per_node})")
        if self.nodelist is not None and self.nodes is not None:
            raise UsageError("--nodelist and --nodes exclude each other: give one of them")
        if self.nodelist is not None and self.launcher is LauncherChoice.LOCAL:
            raise UsageError("--nodelist plans for a Slurm job: it excludes --launcher local")


def launcher_kind(request: AllocationRequest, environ: Mapping[str, str]) -> LauncherKind:
    """What ``--launcher`` (``auto`` by the environment) resolves to."""
    if request.nodelist is not None or request.launcher is LauncherChoice.SLURM:
        return LauncherKind.SLURM
    if request.launcher is LauncherChoice.LOCAL:
        return LauncherKind.LOCAL
    return LauncherKind.SLURM if environ.get("SLURM_JOB_ID") else LauncherKind.LOCAL
