"""Finding the run an operator command acts on, and asking it over its control channel.

``status``, ``stop`` and ``logs`` act on the newest run in the current directory (or
``--state-dir``). A live run is asked over its control channel (address in ``run.json``,
secret in the 0600 ``control.secret``); a finished run is described from its files.
Everything they read lives in the state directory, which is on the shared file system
under Slurm: the commands work from any node of the job (and from a login node that
mounts it), except that a live run's control channel must be reachable from there.

Nothing in a state directory is trusted before it is checked (``record._private``): the
directory and ``run.json`` must be the caller's and writable by nobody else, and
``control.secret`` readable by nobody else, or the command stops with
:class:`UntrustedRunError` (77). The run's secret is sent only to the controller
``run.json`` names: on this host, the pid it names must be alive, the caller's, and
started when ``run.json`` says (a pid and a port are reused once a run is gone); and
the answer must be about the same invocation.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

from ddsup import jobs
from ddsup._errors import RunStateError, UntrustedRunError
from ddsup.channel import ChannelError, Hello, OperatorMessage, Role, StatusReply, request
from ddsup.process import read_stat
from ddsup.record import (
    ControlAddress,
    Outcome,
    RecordedEvent,
    RunInfo,
    StateDir,
    check_private,
    newest_state_dir,
    read_events,
)
from ddsup.units import printable

ASK_TIMEOUT = 10.0
HINT = "ddsup acts only on runs of yours (run it as the user who started the run)"


def add_state_dir(parser: argparse.ArgumentParser, *, job: bool = True) -> None:
    """``--state-dir``, and (``job``) ``--job``: a Slurm job's run, from the login node."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="the run's state directory (default: the newest ./ddsup-* here)",
    )
    if job:
        parser.add_argument(
            "--job",
            metavar="ID",
            help="the run of Slurm job ID, which ddsup submit submitted (with --state-dir: "
            "a job submitted by hand), with Slurm's view of the job (default: no job, a run "
            "on this node)",
        )


def find_job(args: argparse.Namespace) -> jobs.JobView | None:
    """``--job``: the job as Slurm and its record see it now; None without ``--job``."""
    job_id = getattr(args, "job", None)
    return None if job_id is None else jobs.observe(job_id, args.state_dir)


def find_state(args: argparse.Namespace) -> StateDir:
    """The run to act on: ``--job``'s, ``--state-dir``, or the newest of the caller's runs
    here; checked."""
    job = find_job(args)
    if job is not None:
        if job.run is None:
            raise RunStateError(f"job {job.job_id} has no run (yet): {job.summary}")
        return job.run.state
    if args.state_dir is None:
        return trusted(newest_state_dir())
    state = StateDir(Path(os.path.abspath(args.state_dir)))
    try:
        return trusted(state)
    except FileNotFoundError:
        name = printable(str(args.state_dir))
        raise RunStateError(f"{name} is not a ddsup state directory (no run.json)") from None


def trusted(state: StateDir) -> StateDir:
    """``state`` once its directory and ``run.json`` passed; UntrustedRunError otherwise."""
    check_private(state.path, directory=True, error=UntrustedRunError, hint=HINT)
    check_private(state.run, directory=False, error=UntrustedRunError, hint=HINT)
    if os.path.lexists(state.logs):
        check_private(state.logs, directory=True, error=UntrustedRunError, hint=HINT)
    return state


def controller_pid(run: RunInfo) -> int | None:
    """The pid of the run's ``ddsup start`` when it lives on this host, else None.

    The pid must be the caller's and have started when ``run.json`` says (its start time
    in clock ticks after boot, which with the pid names one process for good).
    """
    if run.pid is None or run.pid_start is None or run.host != socket.gethostname():
        return None
    stat = read_stat(run.pid)
    if stat is None or stat.dead or stat.start_time != run.pid_start:
        return None
    try:
        owner = os.stat(f"/proc/{run.pid}").st_uid
    except OSError:
        return None
    return run.pid if owner == os.geteuid() else None


def events_of(state: StateDir) -> list[RecordedEvent]:
    """The run's events (none yet: empty); lines that are not events are skipped."""
    try:
        return read_events(state.events)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise RunStateError(f"cannot read {state.events}: {err}") from err


# --- the control channel ------------------------------------------------------------------
def reach(state: StateDir) -> tuple[ControlAddress, Hello] | None:
    """Where the live run listens and the hello that authenticates to it; None when the
    run is finished or is not there any more.

    The secret goes only to a controller that is still the run's own: on this host its
    pid is checked (:func:`controller_pid`); a run on another host is trusted through
    its files alone.
    """
    run = state.read_run()
    control = run.control
    if control is None or state.result.exists():
        return None
    if run.host in (None, socket.gethostname()) and controller_pid(run) is None:
        return None  # its ddsup start is gone: whoever holds the port now is not it
    try:
        check_private(
            state.secret, directory=False, secret=True, error=UntrustedRunError, hint=HINT
        )
        secret = state.secret.read_text().strip()
    except OSError:
        return None
    return control, Hello(Role.CONTROL, secret)


def run_id(state: StateDir) -> str:
    return state.read_run().invocation_id


def ask(state: StateDir, message: OperatorMessage) -> OperatorMessage | None:
    """One request to the live run (a blocking exchange: no event loop to start); None
    when the run is finished or does not answer (killed, or its channel is out of reach),
    or when another run answered."""
    reached = reach(state)
    if reached is None:
        return None
    control, hello = reached
    try:
        answer = request((control.host, control.port), hello, message, ASK_TIMEOUT)
    except ChannelError:
        return None
    if isinstance(answer, StatusReply) and answer.snapshot.invocation_id != run_id(state):
        return None  # another run answered: not this one's state
    return answer


def summary(result: Outcome) -> str:
    return f"{result.status.value}, exit {result.exit_code} ({one_line(result.reason)})"


def one_line(text: str) -> str:
    """The first line of a cause (invalid unit files give one line per problem)."""
    first, *rest = text.splitlines() or [""]
    return f"{first} (+{len(rest)} more in result.json)" if rest else first


def silence_stdout() -> None:
    """The reader went away (``| head``): stop writing, and let the exit flush go nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
