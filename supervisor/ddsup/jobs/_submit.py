"""``ddsup submit DIR``: check the units and the plan, render the batch script, sbatch it.

Everything that can be checked on the login node is checked before anything is
submitted, in the order a user would fix it: the settings (64, 65), the unit files
(65), the plan on the asked-for shape (69: ``ddsup plan`` of the same nodes and GPUs),
the state directory (73: safe, not in use by a job still queued or running, room for the
logs). ``--dry-run`` prints the script and stops there. The state directory is made
before ``sbatch`` runs (the job's output goes into it from its first line), the script
is kept in it (``job.sh``: submit it again to resume), and the submission is recorded
(``_submissions``) for ``--job``.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path

from ddsup._errors import PreflightError, StateDirError, UsageError
from ddsup.agent import SUBMIT_ENVIRONMENT, space_problem
from ddsup.jobs._job_request import JobRequest, resolve_request
from ddsup.jobs._script import render_script
from ddsup.jobs._slurm import Slurm
from ddsup.jobs._submissions import Submission, remember, submissions
from ddsup.plan import AllocationRequest, LauncherChoice, Plan, plan_for, resolve_allocation
from ddsup.record import hold_state_dir, write_private
from ddsup.units import (
    JobSettings,
    UnitType,
    load_unit_set,
    parse_job_name,
    parse_slurm_time,
    printable,
)

SCRIPT_NAME = "job.sh"


def configure_submit(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check the units and their plan on the job's shape, render the batch script "
        "(exec ddsup start …) from a profile, the directory's job.toml and these flags, "
        "and submit it with sbatch; print the job id and its state directory. Follow it "
        "with ddsup status|logs|stop|report --job ID."
    )
    parser.add_argument("directory", metavar="DIR", help="directory of unit files")
    parser.add_argument("--nodes", type=int, metavar="N", help="nodes (default: job.toml)")
    parser.add_argument(
        "--gpus-per-node", type=int, metavar="G", help="GPUs of each node (default: job.toml)"
    )
    parser.add_argument(
        "--time", metavar="T", help="time limit: 12h, 90m or 12:00:00 (default: job.toml)"
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="~/.config/ddsup/profiles/NAME.toml (default: job.toml's, else default.toml)",
    )
    parser.add_argument(
        "--job-name", metavar="NAME", help="also names the state dir (default: DIR's name)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="PATH",
        help="the run's state directory (default: STATE_ROOT/NAME, STATE_ROOT the "
        "profile's or job.toml's state_root, else here)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the batch script, submit nothing"
    )
    parser.add_argument(
        "sbatch_args",
        nargs="*",
        metavar="-- SBATCH_ARG",
        help="options for this sbatch alone, after --: -- --hold --dependency=afterok:42",
    )


def run_submit(args: argparse.Namespace) -> int:
    request = resolve_request(
        Path(args.directory), _flags(args), profile=args.profile, state_dir=args.state_dir
    )
    extra = _sbatch_args(args.sbatch_args)
    plan = _plan(request)
    _check_state_dir(request)
    script = render_script(request)
    if args.dry_run:
        sys.stdout.write(script)
        _say(f"would submit: sbatch --parsable {' '.join([*extra, 'SCRIPT'])}")
        _say(_plan_line(request, plan) + " (dry run: nothing submitted)")
        return 0
    _not_in_use(request)
    path = _write_script(request, script)
    job_id = Slurm().submit(path, extra)
    remember(
        Submission(
            job_id=job_id,
            job_name=request.job_name,
            state_dir=str(request.state_dir),
            unit_dir=str(request.unit_dir),
            script=str(path),
            submitted_at=time.time(),
            host=socket.gethostname(),
            profile=request.profile,
            sbatch_args=tuple(extra),
        )
    )
    print(f"submitted job {job_id} ({request.job_name}): {_plan_line(request, plan)}")
    print(f"state dir: {request.state_dir}")
    print(f"follow it: ddsup status --job {job_id} · ddsup logs --job {job_id} -f")
    return 0


def _flags(args: argparse.Namespace) -> JobSettings:
    for flag, value in (("--nodes", args.nodes), ("--gpus-per-node", args.gpus_per_node)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1 (got {value})")
    try:
        limit = None if args.time is None else parse_slurm_time(args.time)
        name = None if args.job_name is None else parse_job_name(args.job_name)
    except ValueError as err:
        raise UsageError(f"{err}") from None
    return JobSettings(
        nodes=args.nodes, gpus_per_node=args.gpus_per_node, time=limit, job_name=name
    )


def _sbatch_args(given: list[str]) -> list[str]:
    for arg in given:
        if not arg.startswith("-") or "\n" in arg:
            raise UsageError(
                f"{printable(arg)!r}: sbatch options go after --, e.g. ddsup submit DIR -- --hold"
            )
    return list(given)


def _plan(request: JobRequest) -> Plan:
    """The plan on ``nodes`` × ``gpus_per_node`` (``ddsup plan --nodelist … --gpus-per-node
    …``): PlacementError (69) when the lanes do not fit."""
    units = load_unit_set(request.unit_dir)
    shape = AllocationRequest(
        launcher=LauncherChoice.SLURM,
        gpus_per_node=request.gpus_per_node,
        nodelist=f"node[1-{request.nodes}]" if request.nodes > 1 else "node1",
    )
    return plan_for(units, resolve_allocation(shape, {}))


def _plan_line(request: JobRequest, plan: Plan) -> str:
    lanes = Counter(
        i.model or i.unit for i in plan.instances if i.type is UnitType.LANE and not i.rank
    )
    models = ", ".join(f"{count} lane{'s' * (count != 1)} of {m}" for m, count in lanes.items())
    used = len({i.node for i in plan.instances if i.type is UnitType.LANE})
    shape = f"{request.nodes} node{'s' * (request.nodes != 1)} × {request.gpus_per_node} GPUs"
    limit = f", {request.settings.time}" if request.settings.time else ""
    idle = (
        f" (the plan leaves {request.nodes - used} of them without lanes)"
        if used < request.nodes
        else ""
    )
    return f"{shape}{limit}: {models or 'no lanes'}{idle}"


def _check_state_dir(request: JobRequest) -> None:
    """A path sbatch can read on its ``#SBATCH --output`` line, with room for the logs
    (measured here, at the nearest directory that exists: the shared file system)."""
    shown = printable(str(request.state_dir))
    if any(c.isspace() or not c.isprintable() for c in str(request.state_dir)):
        raise UsageError(f"state dir {shown!r}: Slurm's --output cannot hold spaces: pick another")
    existing = request.state_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    environ = {SUBMIT_ENVIRONMENT.min_free: str(request.min_free_space)}
    problem = space_problem(str(existing), environ)
    if problem is not None:
        raise PreflightError(f"preflight failed: {socket.gethostname()} (ddsup submit): {problem}")
    if not os.access(request.python, os.X_OK):
        _say(f"note: {request.python} is not a program here: it must be one on every node")


def _not_in_use(request: JobRequest) -> None:
    """Refuse a state directory that a job still queued or running will use: the second
    job's ddsup start would refuse it then, after its wait in the queue."""
    mine = [s.job_id for s in submissions() if Path(s.state_dir) == request.state_dir]
    if not mine:
        return
    for job in Slurm().queue(mine).values():
        if not job.terminal:
            raise StateDirError(
                f"job {job.job_id} ({job.state}) uses the state dir {request.state_dir}: "
                f"stop it (ddsup stop --job {job.job_id}), or give this one another "
                "--job-name or --state-dir"
            )


def _write_script(request: JobRequest, script: str) -> Path:
    """The state directory made (0700, or checked when it exists) and the script kept in it."""
    held = hold_state_dir(request.state_dir)
    try:
        write_private(SCRIPT_NAME, script, dir_fd=held.fd)
    except OSError as err:
        raise StateDirError(
            f"cannot write {request.state_dir / SCRIPT_NAME}: {err.strerror}"
        ) from err
    finally:
        held.close()
    return request.state_dir / SCRIPT_NAME


def _say(text: str) -> None:
    print(f"ddsup: {text}", file=sys.stderr)
