"""``ddsup fake-vllm``: the command line of the vLLM stand-in.

Output contract (tests and scripts rely on it): once the port is bound, the first line
on stdout is ``fake-vllm listening on http://HOST:PORT`` (with ``--port 0`` that is how
the chosen port is learnt). Everything else goes to stderr; with a startup delay that includes the line
``fake-vllm: loading the model for Ns``, printed once signals are handled. With ``--spawn-engine`` the
engine child's PID is printed to stderr as ``fake-vllm: engine pid N`` and written to
``--engine-pid-file`` when given.

Exit statuses: 0 after a SIGTERM/SIGINT drain (or a signal during startup), 1 when a
``--crash-after-*`` knob fires (``os._exit``, no cleanup), 64 for a bad command line.
A second SIGTERM/SIGINT during the drain stops at once.
"""

from __future__ import annotations

import argparse
import signal
import sys
from functools import partial
from pathlib import Path

import trio

from ddsup.fake_vllm import _behaviour as defaults
from ddsup.fake_vllm._behaviour import Behaviour
from ddsup.fake_vllm._engine_core import spawn_engine_core
from ddsup.fake_vllm._server import serve_fake_vllm


def configure_fake_vllm(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``ddsup fake-vllm`` to its sub-parser."""
    parser.description = (
        "Serve a vLLM-compatible stand-in (OpenAI API, /health, /metrics) for rehearsals "
        "and tests. The first stdout line is 'fake-vllm listening on http://HOST:PORT'."
    )
    parser.epilog = (
        "Exit status: 0 after SIGTERM/SIGINT (graceful drain), 1 when a --crash-after-* "
        "knob fires, 64 for a bad command line."
    )
    _serving_flags(parser.add_argument_group("serving"))
    _timing_flags(parser.add_argument_group("speed and capacity"))
    _failure_flags(parser.add_argument_group("failures and shutdown"))


def _serving_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    group.add_argument(
        "--port",
        type=int,
        default=8000,
        help="port to bind; 0 picks a free one (default: %(default)s)",
    )
    group.add_argument(
        "--model", default=defaults.DEFAULT_MODEL, help="served model name (default: %(default)s)"
    )
    group.add_argument(
        "--lane-id",
        default=None,
        help="lane identity in the x-fake-vllm-lane header and in every generated text "
        "(default: the bound port)",
    )
    group.add_argument(
        "--max-model-len", type=int, default=defaults.DEFAULT_MAX_MODEL_LEN,
        help="context length: prompt + max_tokens beyond it is a 400 (default: %(default)s)",
    )  # fmt: skip


def _timing_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--startup-delay", type=float, default=0.0, metavar="SECONDS",
        help="seconds before the port is bound (connections are refused until then)",
    )  # fmt: skip
    group.add_argument(
        "--ttft",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="time to first token (default: 0)",
    )
    group.add_argument(
        "--tokens-per-second", type=float, default=0.0, metavar="N",
        help="generation speed per request after the first token; 0 = as fast as possible",
    )  # fmt: skip
    group.add_argument(
        "--max-num-seqs", type=int, default=defaults.DEFAULT_MAX_NUM_SEQS, metavar="N",
        help="requests generated at once; the rest wait in a FIFO queue "
        "(vllm:num_requests_waiting; default: %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--default-max-tokens", type=int, default=defaults.DEFAULT_MAX_TOKENS, metavar="N",
        help="tokens generated when a request gives no max_tokens (default: %(default)s)",
    )  # fmt: skip


def _failure_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--crash-after-requests", type=int, default=None, metavar="N",
        help="exit abruptly (status 1, no cleanup) once N generation requests were answered",
    )  # fmt: skip
    group.add_argument(
        "--crash-after-seconds", type=float, default=None, metavar="T",
        help="exit abruptly (status 1, no cleanup) T seconds after the port opened",
    )  # fmt: skip
    group.add_argument("--fail-health", action="store_true", help="/health answers 503")
    group.add_argument(
        "--fail-health-after", type=float, default=None, metavar="T",
        help="/health answers 503 from T seconds after the port opened",
    )  # fmt: skip
    group.add_argument(
        "--ignore-sigterm", action="store_true", help="ignore SIGTERM (only SIGKILL ends it)"
    )
    group.add_argument(
        "--shutdown-timeout", type=float, default=defaults.DEFAULT_SHUTDOWN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM/SIGINT: stop accepting, let in-flight requests finish this long, "
        "then exit 0 (default: %(default)s)",
    )  # fmt: skip
    group.add_argument(
        "--spawn-engine", action="store_true",
        help="start an 'EngineCore' child in its own session (setsid) that outlives a "
        "SIGKILLed server, like vLLM's engine; a normal exit ends it",
    )  # fmt: skip
    group.add_argument(
        "--engine-pid-file", type=Path, default=None, metavar="PATH",
        help="write the engine child's PID here (with --spawn-engine)",
    )  # fmt: skip


def behaviour_from_args(args: argparse.Namespace) -> Behaviour:
    """The validated :class:`Behaviour` of parsed flags (``UsageError`` names a bad one)."""
    return Behaviour(
        host=args.host,
        port=args.port,
        model=args.model,
        lane_id=args.lane_id,
        startup_delay=args.startup_delay,
        ttft=args.ttft,
        tokens_per_second=args.tokens_per_second,
        max_num_seqs=args.max_num_seqs,
        default_max_tokens=args.default_max_tokens,
        max_model_len=args.max_model_len,
        crash_after_requests=args.crash_after_requests,
        crash_after_seconds=args.crash_after_seconds,
        ignore_sigterm=args.ignore_sigterm,
        shutdown_timeout=args.shutdown_timeout,
        spawn_engine=args.spawn_engine,
        engine_pid_file=args.engine_pid_file,
        fail_health=args.fail_health,
        fail_health_after=args.fail_health_after,
    )


def run_fake_vllm(args: argparse.Namespace) -> int:
    """Run the server in the foreground until a signal (exit 0) or a planned crash."""
    behaviour = behaviour_from_args(args)
    engine = spawn_engine_core(behaviour.engine_pid_file) if behaviour.spawn_engine else None
    if engine is not None:
        print(f"fake-vllm: engine pid {engine.pid}", file=sys.stderr, flush=True)
    if behaviour.ignore_sigterm:  # after the spawn: an ignored signal is inherited
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        trio.run(_main, behaviour)
    finally:
        if engine is not None:
            engine.stop()
    return 0


async def _main(behaviour: Behaviour) -> None:
    shutdown = trio.Event()
    listening = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(_watch_signals, behaviour, shutdown, listening, nursery.cancel_scope)
        if behaviour.startup_delay > 0:
            print(
                f"fake-vllm: loading the model for {behaviour.startup_delay:g}s",
                file=sys.stderr,
                flush=True,
            )
        port = await nursery.start(partial(_serve_then_stop, behaviour, shutdown, nursery))
        host = f"[{behaviour.host}]" if ":" in behaviour.host else behaviour.host
        print(f"fake-vllm listening on http://{host}:{port}", flush=True)
        listening.set()


async def _serve_then_stop(
    behaviour: Behaviour,
    shutdown: trio.Event,
    nursery: trio.Nursery,
    task_status: trio.TaskStatus[int],
) -> None:
    await serve_fake_vllm(behaviour, shutdown_trigger=shutdown.wait, task_status=task_status)
    nursery.cancel_scope.cancel()


async def _watch_signals(
    behaviour: Behaviour,
    shutdown: trio.Event,
    listening: trio.Event,
    stop: trio.CancelScope,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """First signal: drain (or, while still "loading", just stop). Second: stop now."""
    signals = [signal.SIGINT] if behaviour.ignore_sigterm else [signal.SIGINT, signal.SIGTERM]
    with trio.open_signal_receiver(*signals) as received:
        task_status.started()
        async for signum in received:
            if shutdown.is_set() or not listening.is_set():
                stop.cancel()
                return
            name = signal.Signals(signum).name
            print(
                f"fake-vllm: {name}: draining for up to {behaviour.shutdown_timeout:g}s",
                file=sys.stderr,
                flush=True,
            )
            shutdown.set()
