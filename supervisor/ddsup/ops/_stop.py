"""``ddsup stop``: ask a run to stop (like SIGTERM to ``ddsup start``) and wait for its end."""

from __future__ import annotations

import argparse
import os
import signal

import trio

from ddsup._errors import RunStateError
from ddsup.channel._channel import Channel, connect_channel
from ddsup.channel._messages import ChannelError, Hello, Role, StopAnswer, StopRequest
from ddsup.ops._run_handle import add_state_dir, find_state, summary
from ddsup.record._state_dir import RunInfo, StateDir

RESULT_WAIT = 30.0  # after the controller closed its channel: sweep (≤ 5 s) + result.json


# --- stop --------------------------------------------------------------------------------
def configure_stop(parser: argparse.ArgumentParser) -> None:
    add_state_dir(parser)
    parser.add_argument("--no-wait", action="store_true", help="return without waiting for the end")


def run_stop(args: argparse.Namespace) -> int:
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


async def connect(state: StateDir) -> Channel | None:
    """An authenticated channel to the live run; None when nothing answers there."""
    control = state.read_run().control
    if control is None or state.result.exists():
        return None
    try:
        secret = state.secret.read_text().strip()
        hello = Hello(Role.CONTROL, secret)
        return await connect_channel(f"{control.host}:{control.port}", hello)
    except (OSError, ChannelError):
        return None


async def _stop_unreachable(state: StateDir, run: RunInfo, name: str, wait: bool) -> int:
    pid = _local_controller(run)
    if pid is None:
        print(f"ddsup: {name} is not running (no answer and no result.json: it was killed)")
        return 0
    os.kill(pid, signal.SIGTERM)  # still starting up, before its control channel listens
    print(f"ddsup: stopping {name} (SIGTERM to pid {pid}) …", flush=True)
    if wait:
        await _report_end(state, name)
    return 0


def _local_controller(run: RunInfo) -> int | None:
    """The PID of this run's ``ddsup start`` when it lives on this host, else None."""
    import psutil

    if run.pid is None:
        return None
    try:
        process = psutil.Process(run.pid)
        started = process.create_time()
        cmdline = process.cmdline()
    except psutil.Error:
        return None
    mine = abs(started - (run.started_at or 0.0)) < 60 and "start" in cmdline
    return process.pid if mine else None


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
