"""A run's records read as ``ddsup cleanup`` acts on them: through one descriptor.

``ddsup cleanup --state-dir`` and the Slurm epilog (``--job``) end what a run recorded
in its state directory. The directory is opened once, never through a symlink, and
``run.json`` and ``containment/`` are read relative to that descriptor, each checked to
be the caller's and writable by nobody else (``record._private``): a directory or file
that someone else could have put at that path is refused, not read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import RunStateError, UntrustedRunError
from ddsup.ops._run_handle import HINT
from ddsup.process import Ended, end_on_this_node, find_run_cgroups, records_directory
from ddsup.record import RunInfo, open_private_dir


@dataclass
class OpenedRun:
    """A run's state directory, read through one descriptor (:func:`open_run`)."""

    path: Path
    info: RunInfo
    records: int | None  # its ``containment`` directory, held; None when there is none

    def close(self) -> None:
        if self.records is not None:
            os.close(self.records)
            self.records = None


def open_run(state_dir: Path) -> OpenedRun:
    """``run.json`` and ``containment/`` of ``state_dir``, all read through one descriptor
    of the directory, each the caller's and private (UntrustedRunError otherwise)."""
    run_json = state_dir / "run.json"
    try:
        held = open_private_dir(state_dir, state_dir, error=UntrustedRunError, hint=HINT)
    except FileNotFoundError as err:
        raise RunStateError(f"{state_dir}: no such directory") from err
    except OSError as err:
        raise RunStateError(f"{state_dir}: cannot open it: {err.strerror}") from err
    try:
        text = held.read("run.json", error=UntrustedRunError, hint=HINT)
        info = RunInfo.from_json(json.loads(text))
        try:
            records: int | None = records_directory(held.fd, make=False)
        except FileNotFoundError:
            records = None
        except OSError as err:
            raise UntrustedRunError(f"{state_dir}/containment: {err.strerror}") from err
    except FileNotFoundError as err:
        raise RunStateError(
            f"{run_json}: no such file; is {state_dir} a ddsup state directory?"
        ) from err
    except OSError as err:
        raise RunStateError(f"{run_json}: cannot read the run's state: {err}") from err
    except (KeyError, TypeError, ValueError) as err:
        if "invocation_id" in str(err):
            raise RunStateError(
                f"{run_json}: no key 'invocation_id' (a string) in the run's state"
            ) from err
        raise RunStateError(f"{run_json}: cannot read the run's state: {err}") from err
    finally:
        held.close()
    return OpenedRun(state_dir, info, records)


def end_run(run: OpenedRun) -> Ended:
    """End what ``run`` recorded on this node, and what carries its id."""
    invocation_id = run.info.invocation_id
    try:
        cgroups = find_run_cgroups(invocation_id)
        return end_on_this_node(invocation_id, run.records, extra_cgroups=cgroups)
    finally:
        run.close()
