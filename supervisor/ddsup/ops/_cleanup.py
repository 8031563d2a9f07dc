"""``ddsup cleanup``: end every process of a run on this node, by hand or from an epilog.

The last no-orphan layer, for a node where ``ddsup start``, its agent and its sentinel
were all killed (``docs/no-orphans.md``): the run's cgroups on this node (found by name,
``ddsup-<invocation id>``, and in the state directory's records), the (PID, start time)
registry of the state directory, and the sweep by invocation id. Safe to repeat; it
never touches another run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ddsup._errors import RunStateError, UntrustedRunError, UsageError
from ddsup.ops._run_handle import HINT
from ddsup.process import end_on_this_node, find_run_cgroups
from ddsup.record._private import check_private


def configure_cleanup(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "SIGKILL every process on this node whose environment carries the run's "
        "DDSUP_INVOCATION_ID, and the process groups they lead, until none is left: for a "
        "Slurm epilog, or by hand after a node lost its supervisor. Touches nothing else; "
        "safe to run any number of times. One of --state-dir and --invocation is required."
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--state-dir", type=Path, metavar="DIR", help="the run's state directory (reads run.json)"
    )
    which.add_argument("--invocation", metavar="ID", help="the run's DDSUP_INVOCATION_ID")


def _invocation_from_state_dir(state_dir: Path) -> str:
    """The run's id from its ``run.json``, once the directory and file are the caller's."""
    run_json = state_dir / "run.json"
    try:
        check_private(state_dir, directory=True, error=UntrustedRunError, hint=HINT)
        check_private(run_json, directory=False, error=UntrustedRunError, hint=HINT)
        data = json.loads(run_json.read_text())
    except FileNotFoundError as err:
        raise RunStateError(
            f"{run_json}: no such file; is {state_dir} a ddsup state directory?"
        ) from err
    except (OSError, ValueError) as err:
        raise RunStateError(f"{run_json}: cannot read the run's state: {err}") from err
    invocation_id = data.get("invocation_id") if isinstance(data, dict) else None
    if not isinstance(invocation_id, str) or not invocation_id:
        raise RunStateError(f"{run_json}: no key 'invocation_id' (a string) in the run's state")
    return invocation_id


def run_cleanup(args: argparse.Namespace) -> int:
    """End every process of the run on this node; safe to repeat, touches nothing else."""
    invocation_id = args.invocation
    if args.state_dir is not None:
        invocation_id = _invocation_from_state_dir(args.state_dir)
    if not invocation_id or "\0" in invocation_id:
        raise UsageError("--invocation needs a non-empty invocation id")
    records = None if args.state_dir is None else str(args.state_dir / "containment")
    ended = end_on_this_node(invocation_id, records, extra_cgroups=find_run_cgroups(invocation_id))
    print(f"ended {len(ended.hit)} process(es) of run {invocation_id}")
    if ended.survivors:
        print(f"ddsup: error: still alive after SIGKILL: {ended.survivors}", file=sys.stderr)
        return 1
    return 0
