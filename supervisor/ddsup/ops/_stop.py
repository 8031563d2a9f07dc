"""``ddsup stop``: ask a run to stop (like SIGTERM to ``ddsup start``) and wait for its end."""

from __future__ import annotations

import argparse
import os
import signal

import trio

from ddsup import jobs
from ddsup._errors import RunStateError
from ddsup.channel import Channel, ChannelError, StopAnswer, StopRequest
from ddsup.ops._run_channel import connect
from ddsup.ops._run_handle import add_state_dir, controller_pid, find_state, summary
from ddsup.record import RunInfo, StateDir

RESULT_WAIT = 30.0  # after the controller closed its channel: sweep (≤ 5 s) + result.json


# --- stop --------------------------------------------------------------------------------
def configure_stop(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Stop a run as SIGTERM to ddsup start does: worker, endpoint, then lanes, each "
        "with its timeout_stop (a loading lane: timeout_stop_loading); the run exits 143. Waits for the end and prints the result. "
        "With --job: a waiting job is cancelled, a running one gets SIGTERM in its batch "
        "step (scancel --batch --signal=TERM)."
    )
    add_state_dir(parser)
    parser.add_argument(
        "--no-wait", action="store_true", help="return at once (default: wait for the end)"
    )


def run_stop(args: argparse.Namespace) -> int:
    if args.job is not None:  # from the login node: through Slurm, as a signal in the job
        return jobs.stop_job(args.job, args.state_dir, wait=not args.no_wait)
    state = find_state(args)
    return trio.run(_stop, state, not args.no_wait)


async def _stop(state: StateDir, wait: bool) -> int:
    """Ask the run to stop (like SIGTERM to ``ddsup start``); a finished run is no error."""
    run = state.read_run()
    name = f"run {run.invocation_id}"
    result = state.read_result()
    if result is not None:
        print(f"ddsup: {name} has already finished: {summary(result)}")
        return 0
    channel = await connect(state)
    if channel is None:
        return await _stop_unreachable(state, run, name, wait)
    try:
        await channel.send(StopRequest())
        answer = await channel.receive()
        if not isinstance(answer, StopAnswer):
            raise RunStateError(f"{name} did not accept the stop request (answer: {answer})")
        print(f"ddsup: stopping {name} …", flush=True)
        if wait:
            await _drain(channel)  # the controller closes it once everything has stopped
    except ChannelError:
        pass  # it went away while we asked: it is stopping or has stopped
    finally:
        await channel.aclose()
    if wait:
        await _report_end(state, name)
    return 0


async def _stop_unreachable(state: StateDir, run: RunInfo, name: str, wait: bool) -> int:
    pid = controller_pid(run)
    if pid is None:
        print(f"ddsup: {name} is not running (no answer and no result.json: it was killed)")
        return 0
    os.kill(pid, signal.SIGTERM)  # still starting up, before its control channel listens
    print(f"ddsup: stopping {name} (SIGTERM to pid {pid}) …", flush=True)
    if wait:
        await _report_end(state, name)
    return 0


async def _drain(channel: Channel) -> None:
    while await channel.receive() is not None:
        pass


async def _report_end(state: StateDir, name: str) -> None:
    """Wait for ``result.json`` (written after the last sweep), then say how it ended."""
    with trio.move_on_after(RESULT_WAIT):
        while not state.result.exists():  # noqa: ASYNC110 (a file: no event to await)
            await trio.sleep(0.1)
    result = state.read_result()
    if result is None:
        raise RunStateError(f"{name} did not write result.json within {RESULT_WAIT:g}s")
    print(f"ddsup: {name} stopped: {summary(result)}")
