"""Hatch build hook: record in the wheel (and the sdist) which commit it was built from.

``ddsup --version`` of an installed ddsup reads it back (``ddsup/_install.py``), so the
ddsup in a job's image or virtual environment says which code it is. A build outside a
git checkout (a wheel built from an sdist) records nothing new: the sdist already holds
the record of the checkout it came from. Editable installs need none: ddsup then runs
from the checkout and asks git itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

RECORD = {"wheel": "ddsup/_build.json", "sdist": "supervisor/ddsup/_build.json"}


class BuildRecord(BuildHookInterface):  # type: ignore[misc]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        target = RECORD.get(self.target_name)
        commit = _git(self.root, "rev-parse", "HEAD")
        if target is None or version == "editable" or commit is None:
            return
        top = _git(self.root, "rev-parse", "--show-toplevel")
        if top is None or Path(top).resolve() != Path(self.root).resolve():
            return  # unpacked inside some other repository: its commit is not ours
        modified = bool(_git(self.root, "status", "--porcelain", "--untracked-files=no"))
        fd, self._record = tempfile.mkstemp(prefix="ddsup-build-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"commit": commit, "modified": modified}, out)
        build_data["force_include"][self._record] = target

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        record = getattr(self, "_record", None)
        if record is not None:
            os.unlink(record)


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
