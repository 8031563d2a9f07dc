"""``ddsup endpoint``: run the logical endpoint in the foreground.

With ``--lane MODEL=URL`` it serves a fixed lane table (standalone use, tests, benches),
configured by its flags. Under ``ddsup start`` (the hidden ``--lanes-from-controller``)
the controller's feed brings both: first the unit's ``[endpoint]`` section, from which
:meth:`EndpointConfig.from_section` builds the settings, then the live table, which
:func:`serve`'s ``feeder`` keeps up to date for as long as the endpoint runs.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from ddsup._errors import DdsupError, UsageError
from ddsup.endpoint._config import EndpointConfig
from ddsup.endpoint._gc_pacing import pace_garbage_collection
from ddsup.endpoint._lane_feed import controller_address, open_controller_feed
from ddsup.endpoint._lanes import LaneInfo, LaneTable
from ddsup.endpoint._server import serve_endpoint
from ddsup.endpoint._worker import run_worker
from ddsup.units import EndpointSection, Routing
from ddsup.units import parse_duration as units_parse_duration

Feeder = Callable[[LaneTable], Awaitable[None]]


def configure_endpoint(parser: argparse.ArgumentParser) -> None:
    d = EndpointConfig()
    parser.description = (
        "The logical endpoint: one OpenAI-compatible address in front of the lanes, routing "
        "each request by its model to a ready lane (the one that was sent the most of its "
        "prompt, or the least loaded), with admission (429) and retries. ddsup start runs "
        "it for the endpoint unit; by hand it serves the --lane lanes given."
    )
    parser.add_argument("--bind", default=d.bind, help="address to listen on")
    parser.add_argument("--port", type=int, default=d.port, help="port; 0 picks a free one")
    parser.add_argument(
        "--lane",
        action="append",
        default=[],
        metavar="MODEL=URL",
        help="a ready lane serving MODEL at URL (http://host:port); repeat for more",
    )
    parser.add_argument(
        "--max-queue-per-lane",
        type=int,
        default=d.max_queue_per_lane,
        help="admission limit: requests queued per lane before answering 429",
    )
    parser.add_argument(
        "--max-in-flight-per-lane",
        type=int,
        default=d.max_in_flight_per_lane,
        metavar="N",
        help="requests sent to one lane at once; more wait in the endpoint for a free slot "
        "(default %(default)s: no bound)",
    )
    parser.add_argument("--retry-after", default="1s", help="Retry-After of 429 and 503 answers")
    parser.add_argument("--retries", type=int, default=d.retries, help="further lanes to try")
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="require the bearer token in $VAR (default: no key needed)",
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=d.max_body_bytes, help="largest request body (413)"
    )
    parser.add_argument(
        "--max-concurrent", type=int, default=d.max_concurrent, help="most requests served at once"
    )
    parser.add_argument(
        "--upstream-timeout",
        default=f"{d.upstream_timeout:g}s",
        help="a lane's time to answer (and most silence mid-response)",
    )
    _choice_flags(parser, d)
    parser.add_argument(
        "--lanes-from-controller",
        action="store_true",
        help=argparse.SUPPRESS,  # ddsup start's settings and lanes (ddsup.endpoint._lane_feed)
    )
    parser.add_argument("--worker-of", help=argparse.SUPPRESS)  # a worker (._worker)


def _choice_flags(parser: argparse.ArgumentParser, d: EndpointConfig) -> None:
    """How lanes are chosen, collected, and how many processes serve."""
    parser.add_argument(
        "--routing",
        type=_routing,
        default=d.routing.value,
        metavar="|".join(r.value for r in Routing),
        help="prefix: the lane that was sent the longest part of the prompt (its cache "
        "holds it), unless load is unbalanced; least-load: the fewest in flight "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--prefix-min-match",
        type=float,
        default=d.prefix_min_match,
        help="prefix: share of the prompt a lane must hold (default %(default)s)",
    )
    parser.add_argument(
        "--prefix-balance-requests",
        type=int,
        default=d.prefix_balance_requests,
        help="prefix: least-load wins past this many more in flight ... (default %(default)s)",
    )
    parser.add_argument(
        "--prefix-balance-ratio",
        type=float,
        default=d.prefix_balance_ratio,
        help="... and this many times as many (default %(default)s)",
    )
    parser.add_argument(
        "--gc",
        choices=("paced", "automatic"),
        default="paced",
        help="garbage collection: on a timer (paced), or CPython's own trigger (to compare)",
    )
    parser.add_argument(
        "--workers",
        type=_workers,
        default=d.workers,
        metavar="N|auto",
        help="processes serving the port; auto: one per CPU (default %(default)s)",
    )


def _routing(text: str) -> Routing:
    try:
        return Routing(text)
    except ValueError:
        names = " or ".join(r.value for r in Routing)
        raise argparse.ArgumentTypeError(f"{text!r}: write {names}") from None


def _workers(text: str) -> int | None:
    if text == "auto":
        return None
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f'{text!r}: write a count >= 1 or "auto"')
    return count


def parse_duration(text: str) -> float:
    """A duration as unit files write it (``"500ms"``, ``"1s"``, ``"1m30s"``)."""
    try:
        return units_parse_duration(text)
    except ValueError as err:
        raise UsageError(f"bad duration {text!r}: {err}") from err


def parse_lanes(specs: list[str]) -> list[LaneInfo]:
    lanes = []
    for index, spec in enumerate(specs):
        model, sep, url = spec.partition("=")
        if not sep or not model or not url.startswith("http://"):
            raise UsageError(f"--lane {spec!r}: write MODEL=http://HOST:PORT")
        lanes.append(LaneInfo(instance=f"{model}#{index}", model=model, url=url.rstrip("/")))
    return lanes


def config_from_args(args: argparse.Namespace) -> EndpointConfig:
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"--api-key-env {args.api_key_env}: that variable is unset or empty")
    try:
        return EndpointConfig(
            bind=args.bind,
            port=args.port,
            max_queue_per_lane=args.max_queue_per_lane,
            max_in_flight_per_lane=args.max_in_flight_per_lane,
            retry_after=parse_duration(args.retry_after),
            retries=args.retries,
            api_key=api_key,
            max_body_bytes=args.max_body_bytes,
            max_concurrent=args.max_concurrent,
            upstream_timeout=parse_duration(args.upstream_timeout),
            workers=args.workers,
            routing=args.routing,
            prefix_min_match=args.prefix_min_match,
            prefix_balance_requests=args.prefix_balance_requests,
            prefix_balance_ratio=args.prefix_balance_ratio,
        )
    except ValueError as err:
        raise UsageError(str(err)) from err


def config_from_section(section: EndpointSection) -> EndpointConfig:
    """The settings of the unit's ``[endpoint]`` section, its key read from the environment."""
    api_key = None
    if section.api_key_env:
        api_key = os.environ.get(section.api_key_env)
        if not api_key:
            raise UsageError(f"api_key_env {section.api_key_env}: that variable is unset or empty")
    try:
        return EndpointConfig.from_section(section, api_key)
    except ValueError as err:
        raise UsageError(str(err)) from err


def run_endpoint(args: argparse.Namespace, feeder: Feeder | None = None) -> int:
    """Serve until SIGINT/SIGTERM (exit 0); ``feeder`` keeps the lane table current.

    With ``--lanes-from-controller`` settings and lanes come from ``ddsup start``.
    With ``--worker-of`` this process is one worker of a parent endpoint (``._worker``).
    """
    if args.worker_of:
        return run_worker(args.worker_of)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="endpoint: %(message)s")
    paced_gc = args.gc == "paced"
    if feeder is None and args.lanes_from_controller:
        address, secret = controller_address()
        trio.run(partial(_serve_from_controller, address, secret, paced_gc=paced_gc))
        return 0
    config = config_from_args(args)
    try:
        table = LaneTable(parse_lanes(args.lane), max_idle=config.max_idle_upstream_connections)
    except ValueError as err:
        raise UsageError(str(err)) from err
    trio.run(partial(serve, config, table, feeder, paced_gc=paced_gc))
    return 0


async def _serve_from_controller(address: str, secret: str, *, paced_gc: bool) -> None:
    """Settings, then lanes, from ``ddsup start``'s feed; serve until it ends."""
    feed = await open_controller_feed(address, secret)
    try:
        config = config_from_section(feed.section)
        table = LaneTable([], max_idle=config.max_idle_upstream_connections)
        await serve(config, table, feed.follow, paced_gc=paced_gc)
    finally:
        await feed.channel.aclose()


async def serve(
    config: EndpointConfig,
    lanes: LaneTable,
    feeder: Feeder | None = None,
    *,
    paced_gc: bool = True,
) -> None:
    """Serve ``lanes`` (fed by ``feeder``) until SIGINT or SIGTERM; print the bound URL.

    ``paced_gc``: collect garbage on a timer (:mod:`._gc_pacing`), a process-wide
    setting, hence here in the process's entry point and not in :func:`serve_endpoint`.
    """
    failed: DdsupError | None = None

    def fail(err: DdsupError) -> None:  # a worker failed: raised plainly below, not as a group
        nonlocal failed
        failed = err
        nursery.cancel_scope.cancel()

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            try:
                port = await nursery.start(
                    partial(serve_endpoint, config, lanes, paced_gc=paced_gc, on_failure=fail)
                )
            except DdsupError as err:  # cannot bind: raised plainly below, not as a group
                failed = err
                nursery.cancel_scope.cancel()
            else:
                host = f"[{config.bind}]" if ":" in config.bind else config.bind
                print(f"endpoint listening on http://{host}:{port}", flush=True)
                if paced_gc:
                    nursery.start_soon(pace_garbage_collection)
                if feeder is not None:
                    nursery.start_soon(_feed_then_stop, feeder, lanes, nursery.cancel_scope)
                async for _ in signals:
                    nursery.cancel_scope.cancel()
                    break
    if failed is not None:
        raise failed


async def _feed_then_stop(feeder: Feeder, lanes: LaneTable, scope: trio.CancelScope) -> None:
    """The feed ending means its source (the controller) is gone: so is the endpoint's job."""
    await feeder(lanes)
    scope.cancel()
