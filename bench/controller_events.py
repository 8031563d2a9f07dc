"""The controller's CPU per event at 1,024 and 8,000 lanes, in one process, no sockets.

What ``ddsup start`` does with each event an agent reports, minus the network: decode
the ``event`` line, record it (``events.jsonl``: JSON, a write and a flush), hand it to
the run's state, and encode what it decides for the endpoint's feed. Lanes on nodes of
8 GPUs each go ``starting`` → ``process`` → ``ready`` one after the other (the start of
an allocation), then a tenth of them restart (``exit`` → ``restarting`` → ``starting``
→ ``process`` → ``ready``). Last, what one ``ddsup status`` costs the controller (its
rows, the reply encoded), the first time and again after one more event, and what
``ddsup status`` does with the reply (decode, the table or ``--json``), in ms. CPU time
(``time.process_time``), so the figures do not depend on the other processes of a
shared machine; median of ``--reps``.

``--baseline REV`` measures ddsup as of that revision too (``git archive`` into a
temporary directory, run in a child process with it first on ``PYTHONPATH``), at
``--baseline-max`` lanes and fewer (default 1,024: before 3f4ef50 the run's state walked
every instance per event, and 8,000 lanes would take an hour).

    .venv/bin/python bench/controller_events.py [--lanes 1024,8000] [--reps 3] \
        [--baseline REV] [--baseline-max 8000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GPUS = 8
STATUS_PHASES = ("status", "status_again", "client_text", "client_json")


def _lane_unit() -> Any:
    from ddsup.units._model import (
        LaneSection,
        ServiceSection,
        SourceLocation,
        Unit,
        UnitType,
    )

    return Unit(
        name="llama@",
        type=UnitType.LANE,
        service=ServiceSection(exec=("vllm", "serve")),
        source=SourceLocation(path="llama@.toml"),
        template=True,
        lane=LaneSection(model="llama", gpus=1, replicas=None),
    )


def measure(lanes: int, reps: int) -> dict[str, float]:
    """CPU µs per event for ``lanes`` lanes (start, then a tenth restarting)."""
    from ddsup.channel._messages import EventReport, StatusReply
    from ddsup.plan import Node, make_plan
    from ddsup.record._events import ProcessExited, ProcessStarted, UnitTransition
    from ddsup.record._states import InstanceState as S
    from ddsup.record._status import RunSnapshot
    from ddsup.run._run_inputs import Observed, PreflightOver, PublishLanes
    from ddsup.run._run_state import RunState
    from ddsup.units._model import UnitSet

    try:
        from ddsup._exit import ExitStatus
    except ImportError:  # before it had a module of its own
        from ddsup.process import ExitStatus
    try:
        from ddsup.channel._codec import decode, encode
        from ddsup.record._event_log import EventLog
    except ImportError:  # before the codec and the event log had modules of their own
        from ddsup.channel._messages import decode, encode  # type: ignore[attr-defined,no-redef]
        from ddsup.record._events import EventLog  # type: ignore[attr-defined,no-redef]

    units = UnitSet("u", (_lane_unit(),))
    nodes = [
        Node(f"n{i}", f"10.0.{i // 250}.{i % 250}", tuple(range(GPUS)))
        for i in range(lanes // GPUS)
    ]
    plan = make_plan(units, nodes, client="n0")

    def lines(instance: str, node: str, restart: bool) -> list[bytes]:
        def unit(before: S, after: S, **extra: Any) -> UnitTransition:
            fields = {"reason": after.value, **extra}
            return UnitTransition(
                instance=instance, node=node, from_state=before, to_state=after, **fields
            )

        out: list[Any] = []
        if restart:
            exit = ExitStatus(code=1)
            out += [ProcessExited(instance=instance, node=node, pid=2, exit=exit)]
            out += [unit(S.READY, S.RESTARTING, exit=exit), unit(S.RESTARTING, S.STARTING)]
        else:
            out += [unit(S.INACTIVE, S.STARTING)]
        out += [
            ProcessStarted(instance=instance, node=node, pid=1),
            unit(S.STARTING, S.READY, probe="ok"),
        ]
        return [encode(EventReport(event)) for event in out]

    instances = [(p.instance, p.node) for p in plan.instances]
    start = [line for i, n in instances for line in lines(i, n, False)]
    churn = [line for i, n in instances[::10] for line in lines(i, n, True)]
    results: dict[str, list[float]] = {"start": [], "churn": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps):
            run = RunState(units, plan)
            run.handle(PreflightOver(0.0))
            log = EventLog(Path(tmp, f"events-{rep}.jsonl"))
            for phase, batch in (("start", start), ("churn", churn)):
                began = time.process_time()
                for line in batch:
                    event = decode(line).event  # type: ignore[union-attr]
                    log.write(event)
                    for decision in run.handle(Observed(event)):
                        if isinstance(decision, PublishLanes):
                            encode(getattr(decision, "changed", None) or decision.update)  # type: ignore[attr-defined]
                results[phase].append(1e6 * (time.process_time() - began) / len(batch))
            log.close()
            began = time.process_time()  # what a status request costs the event loop
            snapshot = RunSnapshot("i", "local", 0.0, 1.0, tmp, False, run.status_rows())
            encode(StatusReply(snapshot))
            results.setdefault("status", []).append(1e6 * (time.process_time() - began))
            # the next request, after one more event (what an operator polling sees)
            first, node = instances[0]
            run.handle(Observed(ProcessStarted(instance=first, node=node, pid=3)))
            began = time.process_time()
            snapshot = RunSnapshot("i", "local", 0.0, 1.0, tmp, False, run.status_rows())
            line = encode(StatusReply(snapshot))
            results.setdefault("status_again", []).append(1e6 * (time.process_time() - began))
            for phase, seconds in client_costs(line).items():
                results.setdefault(phase, []).append(1e6 * seconds)
    out = {f"{phase}_us_per_event": statistics.median(v) for phase, v in results.items()}
    for phase in ("status", "status_again", "client_text", "client_json"):
        out[f"{phase}_ms"] = out.pop(f"{phase}_us_per_event") / 1000
    return out


def client_costs(line: bytes) -> dict[str, float]:
    """``ddsup status``'s own work on the reply, CPU seconds: decode it and render the table
    (``client_text``), or decode it and write ``--json``'s object (``client_json``)."""
    from ddsup.channel._codec import decode
    from ddsup.ops._status import render_status
    from ddsup.ops._status_view import StatusView

    out = {}
    for phase in ("client_text", "client_json"):
        began = time.process_time()
        reply = decode(line)
        view = StatusView(
            invocation_id="i",
            launcher="local",
            state_dir="/s",
            unit_dir="/u",
            pid=1,
            started_at=0.0,
            ended_at=None,
            uptime=1.0,
            live=True,
            stopping=False,
            result=None,
            instances=reply.snapshot.instances,  # type: ignore[union-attr]
        )
        if phase == "client_text":
            render_status(view, colour=True)
        else:
            json.dumps(view.to_json(), indent=2, sort_keys=True)
        out[phase] = time.process_time() - began
    return out


def child(lanes: list[int], reps: int) -> None:
    print(json.dumps({str(n): measure(n, reps) for n in lanes}))


def run_in(code: Path | None, lanes: list[int], reps: int) -> dict[str, dict[str, float]]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    argv = [sys.executable, __file__, "--child", "--lanes", ",".join(map(str, lanes))]
    done = subprocess.run([*argv, "--reps", str(reps)], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    result: dict[str, dict[str, float]] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--lanes", default="1024,8000")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--baseline", metavar="REV")
    parser.add_argument(
        "--baseline-max", type=int, default=1024, help="most lanes the baseline is run at"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    lanes = [int(n) for n in args.lanes.split(",")]
    if args.child:
        child(lanes, args.reps)
        return
    codes: list[tuple[str, Path | None]] = [("checkout", None)]
    with tempfile.TemporaryDirectory() as tmp:
        if args.baseline:
            archive = subprocess.run(
                ["git", "-C", str(ROOT), "archive", args.baseline, "supervisor"],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            codes.insert(0, (args.baseline, Path(tmp, "supervisor")))
        # before 3f4ef50 every event walked every instance: 8,000 lanes took an hour
        results = {
            name: run_in(
                code,
                lanes if code is None else [n for n in lanes if n <= args.baseline_max],
                args.reps,
            )
            for name, code in codes
        }
    print(f"controller CPU per event (µs), median of {args.reps}; load {os.getloadavg()[0]:.1f}")
    print(f"{'lanes':>8} {'phase':<13}" + "".join(f"{name:>14}" for name, _ in codes))
    for n in lanes:
        for phase in ("start", "churn", *STATUS_PHASES):
            key = f"{phase}_ms" if phase in STATUS_PHASES else f"{phase}_us_per_event"
            cells = "".join(
                f"{results[name].get(str(n), {}).get(key, float('nan')):>14.1f}"
                for name, _ in codes
            )
            print(f"{n:>8} {phase:<13}{cells}")
    print(
        "(status: ms of CPU in the controller to build and encode one status reply, the first;"
        " status_again: the next, after one more event; client_text / client_json: ms of CPU"
        " in ddsup status to decode it and render the table / write --json, without its"
        " imports)"
    )


if __name__ == "__main__":
    main()
