"""Finding the run an operator command acts on, and asking it over its control channel.

``status``, ``stop`` and ``logs`` act on the newest run in the current directory (or
``--state-dir``). A live run is asked over its control channel (address in ``run.json``,
secret in the 0600 ``control.secret``); a finished run is described from its files.
Everything they read lives in the state directory, which is on the shared file system
under Slurm: the commands work from any node of the job (and from a login node that
mounts it), except that a live run's control channel must be reachable from there.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddsup._errors import RunStateError
from ddsup.channel._client import request
from ddsup.channel._messages import ChannelError, Hello, Message, Role
from ddsup.record._events import RecordedEvent, read_events
from ddsup.record._outcome import Outcome
from ddsup.record._state_dir import StateDir, newest_state_dir

ASK_TIMEOUT = 10.0


def add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="the run's state directory (default: the newest ./ddsup-* here)",
    )


def find_state(args: argparse.Namespace) -> StateDir:
    if args.state_dir is not None:
        if not (args.state_dir / "run.json").is_file():
            raise RunStateError(f"{args.state_dir} is not a ddsup state directory (no run.json)")
        return StateDir(args.state_dir.resolve())
    return newest_state_dir()


def events_of(state: StateDir) -> list[RecordedEvent]:
    """The run's events (none yet: empty); lines that are not events are skipped."""
    try:
        return read_events(state.events)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise RunStateError(f"cannot read {state.events}: {err}") from err


# --- the control channel ------------------------------------------------------------------
def ask(state: StateDir, message: Message) -> Message | None:
    """One request to the live run (a blocking exchange: no event loop to start); None
    when the run is finished or does not answer (killed, or its channel is out of reach)."""
    control = state.read_run().control
    if control is None or state.result.exists():
        return None
    try:
        secret = state.secret.read_text().strip()
        hello = Hello(Role.CONTROL, secret)
        return request((control.host, control.port), hello, message, ASK_TIMEOUT)
    except (OSError, ChannelError):
        return None


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
