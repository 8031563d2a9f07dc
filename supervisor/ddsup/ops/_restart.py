"""``ddsup restart UNIT[@i]… [--rolling]``: restart instances of a live run, lanes drained.

The run does the work (``decide._restarts``): a lane in the endpoint's rotation leaves it,
the endpoint finishes what is in flight to it (or its ``timeout_stop`` runs out), then it
is stopped and started again, and rejoins the rotation once ready. This command asks,
prints each instance's progress as the run reports it, and exits 0 once every instance
is ready again.
"""

from __future__ import annotations

import argparse
import sys
import time

import trio

from ddsup._errors import RunStateError
from ddsup.channel import (
    Channel,
    ChannelError,
    RestartAnswer,
    RestartOver,
    RestartProgress,
    RestartRequest,
    RestartStep,
)
from ddsup.ops._run_channel import connect
from ddsup.ops._run_handle import add_state_dir, find_state
from ddsup.record import StateDir

DESCRIPTION = """\
Restart unit instances of the live run, as systemctl restart does: each is stopped
(kill_signal, timeout_stop) and started again at once. A lane first leaves the
endpoint's rotation and is restarted once the endpoint has no request in flight to it
(at most its timeout_stop later); it rejoins the rotation when it is ready again.
With --rolling, one instance at a time, each ready again before the next begins."""


def configure_restart(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    add_state_dir(parser, job=False)
    parser.add_argument(
        "units",
        nargs="+",
        metavar="UNIT",
        help="an instance (lane@3; a rank lane@3:1 means its replica) or a unit (lane: "
        "all its instances)",
    )
    parser.add_argument(
        "--rolling",
        action="store_true",
        help="one instance at a time, each ready again before the next (default: all at once)",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="return once the run has accepted the restart (default: wait until ready)",
    )


def run_restart(args: argparse.Namespace) -> int:
    state = find_state(args)
    request = RestartRequest(tuple(args.units), rolling=args.rolling)
    return trio.run(_restart, state, request, not args.no_wait)


async def _restart(state: StateDir, request: RestartRequest, wait: bool) -> int:
    name = f"run {state.read_run().invocation_id}"
    channel = await connect(state)
    if channel is None:
        raise RunStateError(f"{name} is not running (or does not answer): nothing to restart")
    try:
        await channel.send(request)
        answer = await channel.receive()
        if not isinstance(answer, RestartAnswer):
            raise RunStateError(f"{name} did not answer the restart request ({answer})")
        if answer.error is not None:
            print(f"ddsup: cannot restart: {answer.error}", file=sys.stderr)
            return 1
        how = "one at a time" if request.rolling else "all at once"
        _say(f"restarting {', '.join(answer.instances)} ({how}; lanes drain first)")
        return await _progress(channel, name) if wait else 0
    except ChannelError as err:
        raise RunStateError(f"{name} went away during the restart: {err}") from err
    finally:
        await channel.aclose()


async def _progress(channel: Channel, name: str) -> int:
    """Print each step the run reports until the restart is over; 0 when all came back."""
    while (message := await channel.receive()) is not None:
        if isinstance(message, RestartProgress) and message.step is not RestartStep.QUEUED:
            _say(f"{message.instance}: {message.step.value}")
        elif isinstance(message, RestartOver):
            _say("every instance is ready again" if message.ok else "not every instance came back")
            return 0 if message.ok else 1
    raise RunStateError(f"{name} ended before the restart was over")


def _say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} ddsup: {text}", flush=True)
