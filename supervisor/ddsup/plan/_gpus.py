"""The GPUs a job was given on one node, and who else holds their memory.

A plan counts a node's GPUs by position (0, 1, …); position ``i`` means the ``i``-th
entry of what the job was given on that node, and lanes get those entries verbatim in
``CUDA_VISIBLE_DEVICES``: indices (``4``), UUIDs (``GPU-8f2c…``) and MIG devices
(``MIG-…``) alike. Where the entries come from, first match wins:

1. ``CUDA_VISIBLE_DEVICES`` (what CUDA lets this process see; Slurm sets it per node for a
   step with GPUs). CUDA stops at the first invalid entry (``-1`` hides everything) and an
   empty value shows nothing, so the list stops there too.
2. ``SLURM_STEP_GPUS``, then ``SLURM_JOB_GPUS`` (global indices, ranges allowed). The
   job's list is the batch node's: an agent on another node only sees it when Slurm gave
   its step no GPUs, which is why the step's list comes first.
3. ``SLURM_GPUS_ON_NODE`` (a count only: entries ``0`` … ``n-1``).
4. Everything ``nvidia-smi -L`` lists: each GPU by its index, or, for a GPU split into
   MIG devices, each MIG device by its UUID (CUDA cannot use the GPU itself then).

:func:`gpu_holders` asks ``nvidia-smi`` which processes hold memory on a node's GPUs, for
preflight to report. MIG devices are never reported: ``nvidia-smi`` does not say which
MIG device of a GPU a process uses.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NVIDIA_SMI_TIMEOUT = 10.0
SIMULATED = "--gpus-per-node"  # the source of simulated GPUs (indices 0..G-1)
_SMI_GPU = re.compile(r"GPU (\d+):.*\(UUID: (GPU-[^)\s]+)\)")
_SMI_MIG = re.compile(r"\s+MIG .*\(UUID: (MIG-[^)\s]+)\)")


@dataclass(frozen=True)
class GpuList:
    """A node's GPU entries, in order, and where they were found (for messages)."""

    devices: tuple[str, ...]
    source: str  # "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "nvidia-smi", "--gpus-per-node"

    @classmethod
    def simulated(cls, count: int) -> GpuList:
        """``--gpus-per-node G``: indices 0..G-1, detected nowhere."""
        return cls(tuple(str(i) for i in range(count)), SIMULATED)

    def describe(self) -> str:
        """``2 GPUs (CUDA_VISIBLE_DEVICES=4,5)``: a count with its evidence."""
        count = len(self.devices)
        noun = "GPU" if count == 1 else "GPUs"
        shown = ",".join(self.devices[:8]) + (",…" if count > 8 else "")
        if self.source == SIMULATED:
            return f"{count} {noun} (simulated)"
        return f"{count} {noun} ({self.source}={shown})" if count else f"0 GPUs ({self.source})"

    def split(self, parts: int) -> list[GpuList]:
        """This list shared out among ``parts`` simulated nodes, in order, as evenly as can be.

        Five GPUs over two nodes: the first gets three, the second two.
        """
        size, extra = divmod(len(self.devices), parts)
        out, start = [], 0
        for part in range(parts):
            end = start + size + (1 if part < extra else 0)
            out.append(GpuList(self.devices[start:end], self.source))
            start = end
        return out


def detect_gpu_list(environ: Mapping[str, str], *, nvidia_smi: bool = True) -> GpuList | None:
    """This node's GPU entries (module docstring), or None when nothing says."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return GpuList(visible_entries(visible), "CUDA_VISIBLE_DEVICES")
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS"):
        value = environ.get(name, "").strip()
        if value:
            return GpuList(_slurm_entries(value), name)
    on_node = environ.get("SLURM_GPUS_ON_NODE", "").strip()
    if on_node.isdigit():
        return GpuList(tuple(str(i) for i in range(int(on_node))), "SLURM_GPUS_ON_NODE")
    return _nvidia_smi_list() if nvidia_smi else None


def visible_entries(value: str) -> tuple[str, ...]:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: up to the first invalid entry."""
    entries = []
    for entry in value.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-") or entry == "NoDevFiles":
            break
        entries.append(entry)
    return tuple(entries)


def _slurm_entries(value: str) -> tuple[str, ...]:
    """Slurm's index lists: ``0,1,2`` and ranges ``0-3``; ``(null)`` means none."""
    entries: list[str] = []
    for entry in value.split(","):
        low, _, high = entry.strip().partition("-")
        if low.isdigit() and high.isdigit():
            entries.extend(str(i) for i in range(int(low), int(high) + 1))
        elif low.isdigit() and not high:
            entries.append(low)
    return tuple(entries)


def _run_smi(*args: str) -> str | None:
    """``nvidia-smi ARGS``' output, or None when it is not installed or fails."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, *args], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _nvidia_smi_list() -> GpuList | None:
    listing = _run_smi("-L")
    if listing is None:
        return None
    return GpuList(parse_smi_listing(listing), "nvidia-smi")


def parse_smi_listing(text: str) -> tuple[str, ...]:
    """``nvidia-smi -L`` → entries: a GPU's index, or the UUIDs of its MIG devices."""
    entries: list[str] = []
    gpu: str | None = None
    migs: list[str] = []
    for line in text.splitlines():
        if (found := _SMI_GPU.match(line)) is not None:
            entries.extend(migs or ([gpu] if gpu is not None else []))
            gpu, migs = found.group(1), []
        elif (mig := _SMI_MIG.match(line)) is not None and gpu is not None:
            migs.append(mig.group(1))
    entries.extend(migs or ([gpu] if gpu is not None else []))
    return tuple(entries)


# --------------------------------------------------------------------------- holders


@dataclass(frozen=True)
class GpuHolder:
    """A process that holds memory on one of the GPUs a lane was planned."""

    entry: str  # the lane's entry for that GPU, as in its CUDA_VISIBLE_DEVICES
    pid: int
    mib: int

    def describe(self) -> str:
        return f"pid {self.pid} holds {self.mib} MiB"


def gpu_holders(entries: Sequence[str]) -> list[GpuHolder] | None:
    """Processes with memory on the GPUs of ``entries``; None when nvidia-smi cannot say.

    Entries are matched to ``nvidia-smi``'s GPUs by index or by (a prefix of) UUID; MIG
    devices, and entries it does not list, are skipped.
    """
    gpus = _run_smi("--query-gpu=index,uuid", "--format=csv,noheader")
    apps = _run_smi(
        "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"
    )
    if gpus is None or apps is None:
        return None
    uuids: dict[str, str] = {}
    for line in gpus.splitlines():
        index, uuid = _fields(line, 2)
        uuids[index] = uuid
    held: list[GpuHolder] = []
    for line in apps.splitlines():
        if not line.strip():
            continue
        uuid, pid, mib = _fields(line, 3)
        entry = _entry_of(uuid, entries, uuids)
        if entry is not None and pid.isdigit():
            held.append(GpuHolder(entry, int(pid), int(mib) if mib.isdigit() else 0))
    return held


def _fields(line: str, count: int) -> tuple[str, ...]:
    parts = tuple(part.strip() for part in line.split(","))
    return (parts + ("",) * count)[:count]


def _entry_of(uuid: str, entries: Sequence[str], uuids: Mapping[str, str]) -> str | None:
    """Which of ``entries`` is the GPU ``uuid`` (index → uuid from ``uuids``)."""
    for entry in entries:
        if entry.startswith("GPU-") and uuid.startswith(entry):
            return entry
        if entry.isdigit() and uuids.get(entry) == uuid:
            return entry
    return None
