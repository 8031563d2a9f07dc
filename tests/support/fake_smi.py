"""A fake ``nvidia-smi`` for tests: the GPUs, MIG devices and processes a test says.

:func:`install` writes an executable ``nvidia-smi`` into a directory (put it first on
``PATH``) and the JSON it answers from. It answers the three questions ddsup asks, in
the formats the real tool prints:

- ``nvidia-smi -L``: ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)``, and for a GPU in
  MIG mode its devices below it, ``  MIG 1g.10gb     Device  0: (UUID: MIG-…)``;
- ``--query-gpu=index,uuid --format=csv,noheader``: ``0, GPU-…``;
- ``--query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits``:
  ``GPU-…, 4242, 20480``.

Anything else exits 2, as the real tool does for a flag it does not know.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

_SCRIPT = """\
#!{python}
import json, sys
spec = json.load(open({spec!r}))
args = sys.argv[1:]
if args == ["-L"]:
    for index, gpu in enumerate(spec["gpus"]):
        print(f"GPU {{index}}: NVIDIA H100 80GB HBM3 (UUID: {{gpu['uuid']}})")
        for number, mig in enumerate(gpu["migs"]):
            print(f"  MIG 1g.10gb     Device  {{number}}: (UUID: {{mig}})")
elif args == ["--query-gpu=index,uuid", "--format=csv,noheader"]:
    for index, gpu in enumerate(spec["gpus"]):
        print(f"{{index}}, {{gpu['uuid']}}")
elif args == [
    "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"
]:
    for app in spec["apps"]:
        print(f"{{app['gpu_uuid']}}, {{app['pid']}}, {{app['mib']}}")
else:
    print("Invalid combination of input arguments.", file=sys.stderr)
    sys.exit(2)
"""


@dataclass(frozen=True)
class FakeGpu:
    uuid: str
    migs: tuple[str, ...] = ()


@dataclass(frozen=True)
class FakeApp:
    """A process holding ``mib`` MiB on the GPU at ``gpu`` (its index in the listing)."""

    gpu: int
    pid: int
    mib: int


@dataclass(frozen=True)
class FakeSmi:
    gpus: Sequence[FakeGpu]
    apps: Sequence[FakeApp] = field(default_factory=tuple)

    def install(self, directory: Path) -> Path:
        """Write ``directory/nvidia-smi``; the directory to put first on ``PATH``."""
        directory.mkdir(parents=True, exist_ok=True)
        spec = directory / "nvidia-smi.json"
        spec.write_text(
            json.dumps(
                {
                    "gpus": [{"uuid": g.uuid, "migs": list(g.migs)} for g in self.gpus],
                    "apps": [
                        {"gpu_uuid": self.gpus[a.gpu].uuid, "pid": a.pid, "mib": a.mib}
                        for a in self.apps
                    ],
                }
            )
        )
        tool = directory / "nvidia-smi"
        tool.write_text(_SCRIPT.format(python=sys.executable, spec=str(spec)))
        tool.chmod(0o755)
        return directory
