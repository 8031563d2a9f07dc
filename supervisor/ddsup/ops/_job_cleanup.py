"""``ddsup cleanup --job ID --user UID``: what the Slurm epilog runs, as root, after a job.

The epilog acts for one job (``SLURM_JOB_ID``) of one user (``SLURM_JOB_UID``), both
given by slurmd, and takes nothing else on trust: any process on the node may carry any
``SLURM_JOB_ID``, and any run's ``DDSUP_INVOCATION_ID`` (which ``ps`` and
``/proc/*/cgroup`` show everyone), in its environment. So it:

1. becomes the job's user before it reads or ends anything (a root job's epilog stays
   root): the kernel then keeps it from touching another user's processes, cgroups or
   files, whatever it is told;
2. looks for that user's runs of this job: the state directory (``DDSUP_STATE_DIR``)
   in the environment of each of that user's processes that says
   ``SLURM_JOB_ID=<job>``, and the directories ``--state-dirs`` matches (slurmd does
   not tell an epilog the job's name: a glob for directories named after their jobs
   matches every job's, and those not of this job are passed over without a word);
3. ends a run only when its state directory, the user's own and private, says in the
   ``run.json`` that ``ddsup start`` wrote that the run is this job's; and then only
   what ``ddsup cleanup --state-dir`` ends: what that directory's records name (with
   start times), the run's cgroups, and what carries the run's id.

A process that merely says it belongs to the job, or names another run, gets nothing
ended.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

from ddsup._errors import DdsupError, UntrustedRunError, UsageError
from ddsup.ops._recorded_run import end_run, open_run
from ddsup.process import pids, read_environ
from ddsup.units import printable

STATE_DIR_ENV = b"DDSUP_STATE_DIR"
_ROOT = 0


def run_job_cleanup(job: str, user: str | None, pattern: str | None) -> int:
    """End this node's runs of ``job`` (``--job``), as ``user``; one line per run found."""
    if not job or not all(c.isalnum() or c in "_-+" for c in job):
        raise UsageError(f"--job needs a Slurm job id, not {printable(job)!r}")
    account = _account(user)
    _become(account)
    survivors: list[int] = []
    claimed = set(_claimed_dirs(job, account.pw_uid))
    matched = set(_matched_dirs(job, pattern)) - claimed
    for state_dir in sorted(claimed | matched):
        # slurmd does not tell an epilog the job's name, so a glob for directories named
        # after their jobs matches every job's: only this job's runs are worth a line
        # there; a directory that a process of the job named is a claim, answered either way
        said = state_dir in claimed
        try:
            run = open_run(state_dir)
        except DdsupError as err:
            if said:
                print(f"left alone: {err}")
            continue
        name, where = printable(run.info.invocation_id), printable(str(state_dir))
        if run.info.job != job:
            run.close()
            of = printable(run.info.job or "(none)")
            if said:
                print(f"left alone: run {name} in {where} is of job {of}, not {job}")
            continue
        ended = end_run(run)
        survivors += ended.survivors
        print(f"ended {len(ended.hit)} process(es) of run {name} (job {job}, {where})")
    if survivors:
        print(f"ddsup: error: still alive after SIGKILL: {survivors}", file=sys.stderr)
        return 1
    return 0


def _account(user: str | None) -> pwd.struct_passwd:
    """The job's user: ``--user`` (a name or a uid), the caller when not given; only root
    acts for another user."""
    if user is None:
        return pwd.getpwuid(os.geteuid())
    try:
        account = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except KeyError:
        raise UsageError(f"--user {printable(user)}: no such user on this node") from None
    if account.pw_uid != os.geteuid() and os.geteuid() != _ROOT:
        raise UsageError(f"--user {printable(user)}: only root may act for another user")
    return account


def _become(account: pwd.struct_passwd) -> None:
    """Act as ``account`` from here on, for good (root only; a no-op for oneself)."""
    if account.pw_uid == os.geteuid():
        return
    try:
        os.initgroups(account.pw_name, account.pw_gid)
        os.setresgid(account.pw_gid, account.pw_gid, account.pw_gid)
        os.setresuid(account.pw_uid, account.pw_uid, account.pw_uid)
    except OSError as err:  # nothing is done as anyone else
        raise UntrustedRunError(
            f"cannot act as user {printable(account.pw_name)} (uid {account.pw_uid}): "
            f"{err.strerror}; nothing was ended"
        ) from err


def _claimed_dirs(job: str, uid: int) -> Iterator[Path]:
    """The state directories the user's processes of ``job`` name (step 2 above)."""
    for pid in pids():
        if _owner(pid) != uid:
            continue
        environ = read_environ(pid)
        if environ.get(b"SLURM_JOB_ID") != job.encode():
            continue
        state_dir = environ.get(STATE_DIR_ENV)
        if state_dir and os.path.isabs(os.fsdecode(state_dir)):
            yield Path(os.fsdecode(state_dir))


def _matched_dirs(job: str, pattern: str | None) -> Iterator[Path]:
    """The directories ``--state-dirs`` matches, ``%j`` being ``job`` (step 2 above)."""
    for found in glob.glob(pattern.replace("%j", job)) if pattern else ():
        yield Path(os.path.abspath(found))


def _owner(pid: int) -> int | None:
    """The real and effective user of ``pid`` when they are one (else None)."""
    with (
        contextlib.suppress(OSError, ValueError, IndexError),
        open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status,
    ):
        for line in status:
            if line.startswith("Uid:"):
                real, effective = line.split()[1:3]
                return int(real) if real == effective else None
    return None
