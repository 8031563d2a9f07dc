"""The options of one ``ddsup start``, as one value from the command line down.

``controller._start`` builds a :class:`RunOptions` from argparse; nothing below the command
line sees ``argparse.Namespace``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from ddsup.plan import AllocationRequest


class Verbosity(str, enum.Enum):
    """How much ``ddsup start`` prints (``-v``, ``-q``)."""

    QUIET = "quiet"
    NORMAL = "normal"
    VERBOSE = "verbose"


@dataclass(frozen=True)
class RunOptions:
    """What the user asked ``ddsup start`` for."""

    directory: Path  # the unit files
    allocation: AllocationRequest = field(default_factory=AllocationRequest)
    state_dir: Path | None = None  # None: ./ddsup-<job id or timestamp>
    srun_args: tuple[str, ...] = ()  # extra options for the agents' srun step
    verbosity: Verbosity = Verbosity.NORMAL
    agent_timeout: float = 30.0  # an agent silent this long is lost (its node with it)
    rehearse: bool = False  # lanes run fake-vllm in place of vllm serve (controller._prepare)
