"""``ddsup cleanup``: end every process of a run on this node, by hand or from an epilog.

The last no-orphan layer, for a node where ``ddsup start``, its agent and its sentinel
were all killed (``docs/no-orphans.md``): the run's cgroups on this node (found by name,
``ddsup-<invocation id>``, and in the state directory's records), the (PID, start time)
registry of the state directory, and the sweep by invocation id. Safe to repeat; it
never touches another run.

Three ways to name the run:

- ``--state-dir DIR``: the directory is opened once, without following a symlink, and
  everything is read through that descriptor (``run.json``, ``containment/``), each
  checked to be the caller's and writable by nobody else: what it ends is what the run's
  own supervisors recorded there, never what a file someone else could put at that path
  names (``_recorded_run``);
- ``--invocation ID``: an id the operator gives, by hand: its cgroups by name and the
  tag sweep;
- ``--job ID --user UID``: the Slurm epilog (``_job_cleanup``): the runs that the
  ending job's user recorded as this job's, as that user.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddsup._errors import UsageError
from ddsup.ops._job_cleanup import run_job_cleanup
from ddsup.ops._recorded_run import end_run, open_run
from ddsup.process import end_on_this_node, find_run_cgroups


def configure_cleanup(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "SIGKILL every process on this node that a run recorded (in its cgroups and in its "
        "state directory, with its start time) or that carries the run's "
        "DDSUP_INVOCATION_ID, and the process groups they lead, until none is left: by "
        "hand after a node lost its supervisor, or from a Slurm epilog (--job). Touches "
        "nothing else; safe to run any number of times. One of --state-dir, --invocation "
        "and --job is required."
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--state-dir", type=Path, metavar="DIR", help="the run's state directory (reads run.json)"
    )
    which.add_argument("--invocation", metavar="ID", help="the run's DDSUP_INVOCATION_ID")
    which.add_argument(
        "--job",
        metavar="ID",
        help="every run of this Slurm job on this node, as its --user (a Slurm epilog)",
    )
    parser.add_argument(
        "--user",
        metavar="USER",
        help="with --job: the job's user, a name or uid (SLURM_JOB_UID), whom root acts as "
        "(default: you)",
    )
    parser.add_argument(
        "--state-dirs",
        metavar="GLOB",
        help="with --job: state directories to look in too, %%j for the job id, e.g. "
        "'/shared/jobs/*/runs/*' for directories named after their jobs (default: those its "
        "processes name)",
    )


def run_cleanup(args: argparse.Namespace) -> int:
    """End every process of the run on this node; safe to repeat, touches nothing else."""
    if args.job is not None:
        return run_job_cleanup(args.job, args.user, args.state_dirs)
    if args.user is not None or args.state_dirs is not None:
        raise UsageError("--user and --state-dirs go with --job")
    if args.state_dir is not None:
        run = open_run(Path(os.path.abspath(args.state_dir)))
        invocation_id = run.info.invocation_id
        ended = end_run(run)
    else:
        invocation_id = args.invocation
        if not invocation_id or "\0" in invocation_id:
            raise UsageError("--invocation needs a non-empty invocation id")
        cgroups = find_run_cgroups(invocation_id)
        ended = end_on_this_node(invocation_id, None, extra_cgroups=cgroups)
    print(f"ended {len(ended.hit)} process(es) of run {invocation_id}")
    if ended.survivors:
        print(f"ddsup: error: still alive after SIGKILL: {ended.survivors}", file=sys.stderr)
        return 1
    return 0
