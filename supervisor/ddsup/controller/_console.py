"""What ``ddsup start`` prints: concise lines for a person or a Slurm job output file.

Transitions that matter (ready, failed, restarting, exited) are printed by default; every
transition and process start with ``-v``; only errors and the final result with ``-q``.
Lines carry a local ``HH:MM:SS`` stamp so job output can be read next to
``events.jsonl``. A unit that fails for good is shown as ``systemctl status`` shows one:
its last exit status, the last lines of its log, and the ``ddsup logs`` command for more.
The run's end says its cause on the line that announces it.

On a terminal, one progress line sits below them while lanes load or units stop —
``lanes ready 5/8 · waiting on lane@6 (n3) 1m12s`` — redrawn in place at every event and,
when :meth:`Console.run` runs, every second. Anywhere else (a Slurm output file, a pipe)
there are no redraws: each lane that becomes ready says how many are ready so far.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import trio

import ddsup.record as record  # record.efficiency_line: imported at the run's end
from ddsup._errors import DdsupError
from ddsup.plan import Allocation
from ddsup.process import ExitStatus
from ddsup.record import (
    FINAL,
    LOADING,
    NOTABLE,
    Contained,
    InstanceState,
    LivenessFailed,
    Outcome,
    PreflightWarning,
    ProbeAnswered,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    RunEnding,
    RunStopping,
    UnitTransition,
    duration,
    last_lines,
    paint,
    silence,
    symbol,
)
from ddsup.units import printable

# Until lanes() names them: lane replicas are the instances numbered by replica (``llama@3``;
# each-node services are named by node, ranks > 0 carry ``:rank``).
_LANE_NAME = re.compile(r"[^@:]+@[0-9]+")
_CLEAR_LINE = "\r\x1b[K"
REDRAW_INTERVAL = 1.0
FAILED_LOG_LINES = 10  # of a failed unit's log, on the console
_INDENT = " " * 16  # lines that belong to the one above: under its text, past the stamp


@dataclass(frozen=True)
class _Seen:
    """What the console last showed of one instance, so that it prints only changes."""

    state: InstanceState
    node: str | None
    since: float


class Console:
    """Fed every event of the run by the controller; never blocks it.

    ``lanes`` (instance → model, rank 0 of each lane replica) tells the progress line
    which instances are lanes; until it is given, every instance counts.
    """

    def __init__(
        self,
        *,
        verbose: bool = False,
        quiet: bool = False,
        stream: TextIO | None = None,
        tty: bool | None = None,
        clock: Callable[[], float] = time.time,
        state_dir: Path | None = None,
    ) -> None:
        self.verbose = verbose
        self.state_dir = state_dir  # where failed units' logs are read from
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = _isatty(self.stream) if tty is None else tty
        self.colour = self.tty and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"
        self._clock = clock
        self._seen: dict[str, _Seen] = {}
        self._ready: set[str] = set()  # lanes ready now: counted per event, never recounted
        self._last_exit: dict[str, ExitStatus] = {}
        self._lanes: dict[str, str] | None = None
        self._stop_began: float | None = None  # when the run began to stop
        self._done = False
        self._progress = ""  # what the progress line shows now ("" = not shown)
        self._wake = trio.Event()

    # --- what the controller calls --------------------------------------------------
    def lanes(self, lanes: Mapping[str, str]) -> None:
        """Name the lane replicas (instance → model), once the plan is known."""
        self._lanes = dict(lanes)
        self._ready = {i for i, seen in self._seen.items() if self._ready_lane(i, seen.state)}
        self._redraw()

    def rehearsal(self, lanes: tuple[str, ...], allocation: Allocation) -> None:
        """Say what a rehearsal changed (``ddsup start --rehearse``)."""
        nodes = len(allocation.nodes)
        gpus = allocation.simulated_gpus
        if gpus is None:
            gpus = max((len(node.gpus) for node in allocation.nodes), default=0)
        what = ", ".join(lanes) if lanes else "no lane unit"
        self._print(
            f"rehearsal: {what} run{'s' * (len(lanes) < 2)} fake-vllm in place of vllm serve, "
            f"on {nodes} node{'s' * (nodes != 1)} × {gpus} GPU{'s' * (gpus != 1)}"
        )

    def event(self, event: RecordedEvent) -> None:
        if isinstance(event, UnitTransition):
            self._seen[event.instance] = _Seen(event.to_state, event.node, event.time)
            if self._ready_lane(event.instance, event.to_state):
                self._ready.add(event.instance)
            else:
                self._ready.discard(event.instance)
        elif isinstance(event, RunStopping | RunEnding):
            self._stop_began = self._stop_began or event.time
        line = None if self.quiet else self._line(event)
        if line is not None:
            self._print(line)
        else:
            self._redraw()
        failed = isinstance(event, UnitTransition) and event.to_state is InstanceState.FAILED
        if failed and not self.quiet:
            assert isinstance(event, UnitTransition)
            self._print_failure(event)

    def error(self, text: str) -> None:
        self._print(f"error: {text}")

    def warning(self, text: str) -> None:
        self._print(f"warning: {text}")

    def _print_failure(self, event: UnitTransition) -> None:
        """Below a unit's failure: its last exit, its last log lines, how to see more."""
        lines = []
        exit = event.exit or self._last_exit.get(event.instance)
        if exit is not None and exit.describe() not in event.reason:
            lines.append(f"last exit: {exit.describe()}")
        if self.state_dir is not None:
            log = self.state_dir / "logs" / f"{event.instance}.log"
            tail = last_lines(log, FAILED_LOG_LINES)
            if tail:
                lines.append(f"last {len(tail)} lines of logs/{log.name}:")
                lines += [f"  {printable(text)}" for text in tail]
            lines.append(f"more: {logs_command(event.instance, self.state_dir)}")
        for line in lines:
            self._print(line, stamp=False)

    def result(self, outcome: Outcome, state_dir: Path, *, planned: bool) -> None:
        """The run's last words; with the GPU time line once the run had a plan."""
        self._done = True
        status = outcome.status.value
        self._print(
            f"finished: {status}, exit {outcome.exit_code} ({_cause(outcome)}); "
            f"state in {state_dir}"
        )
        if planned:
            self.efficiency(state_dir)

    def efficiency(self, run_dir: Path) -> None:
        """The run's GPU time by category (docs/operating.md), read from the run's files.

        Part of the result, so printed even with ``-q``; a report, never the run's end, so
        a file it cannot read makes the line say so instead of failing the run.
        """
        try:
            line = record.efficiency_line(run_dir)
        except (DdsupError, OSError, ValueError) as err:
            line = f"GPU time: not known ({err})"
        self._print(line)

    async def run(self) -> None:
        """Redraw the progress line every second, so its elapsed time moves (TTY only).

        Optional: without it the line is redrawn at each event. Sleeps on an event while
        no progress line is shown, so an idle run does not tick.
        """
        if not self.tty or self.quiet:
            await trio.sleep_forever()
        while True:
            if not self._progress:
                self._wake = trio.Event()
                await self._wake.wait()
            await trio.sleep(REDRAW_INTERVAL)
            self._redraw()

    # --- lines ----------------------------------------------------------------------
    def _line(self, event: RecordedEvent) -> str | None:
        if isinstance(event, UnitTransition):
            return self._unit_line(event)
        if isinstance(event, ProcessStarted):
            return (
                f"{event.instance}{_where(event.node)}: pid {event.pid}" if self.verbose else None
            )
        if isinstance(event, ProcessExited):
            where = f"{event.instance}{_where(event.node)}"
            return f"{where}: pid {event.pid} ended ({event.reason})" if self.verbose else None
        if isinstance(event, ProbeAnswered):
            where = f"{event.instance}{_where(event.node)}"
            return f"{where}: probe answers {event.answer}" if self.verbose else None
        if isinstance(event, PreflightWarning):
            return f"warning: {event.node}: {event.warning}"
        if isinstance(event, LivenessFailed):
            return f"{event.instance}{_where(event.node)}: {event.reason}"
        if isinstance(event, Contained):
            who = f"{event.supervisor}{_where(event.node)}"
            return f"{who}: no-orphan layers: {event.summary}" if self.verbose else None
        if isinstance(event, RunEnding):
            return f"run ending: {_cause(event.outcome)}"
        if self.verbose or isinstance(event, RunStopping):
            return f"run {event.reason}"
        return None

    def _unit_line(self, event: UnitTransition) -> str | None:
        if event.exit is not None:
            self._last_exit[event.instance] = event.exit
        state = event.to_state
        if not self.verbose and state not in NOTABLE:
            return None
        name = state.value
        shown = paint(state, f"{symbol(state)} {name}") if self.colour else name
        line = f"{event.instance}{_where(event.node)}: {shown} — {event.reason}"
        if state is InstanceState.READY and not self.tty and self._is_lane(event.instance):
            ready, total = self._counts()
            line += f" · lanes ready {ready}/{total}"
        return line

    def _print(self, text: str, *, stamp: bool = True) -> None:
        head = f"{time.strftime('%H:%M:%S')} ddsup: " if stamp else _INDENT
        # Nobody reads our output any more (a broken pipe), or it is on a full disk: the
        # stream is silenced (``say``), the state dir still has it all, the run goes on.
        try:
            clear = _CLEAR_LINE if self.tty and self._progress else ""
            self._progress = ""
            self.stream.write(f"{clear}{head}{text}\n")
            self._redraw(flush=False)
            self.stream.flush()
        except (OSError, ValueError):
            silence(self.stream)

    # --- the progress line (TTY only) -----------------------------------------------
    def _redraw(self, *, flush: bool = True) -> None:
        if not self.tty or self.quiet:
            return
        text = "" if self._done else self.progress()
        if text == self._progress:
            return  # unchanged (the elapsed time moves on only every second)
        width = shutil.get_terminal_size((100, 24)).columns - 1
        try:
            self.stream.write(f"{_CLEAR_LINE}{text[:width]}")
            if flush:
                self.stream.flush()
        except (OSError, ValueError):
            silence(self.stream)
        was_shown, self._progress = bool(self._progress), text
        if text and not was_shown:
            self._wake.set()

    def progress(self) -> str:
        """The progress line's text now ("" when there is nothing to wait for)."""
        if self._stop_began is not None:
            pending = {i: s for i, s in self._seen.items() if s.state not in FINAL}
            head, began = f"stopping · {len(pending)} left", self._stop_began
            busy = InstanceState.STOPPING
        else:
            lanes = {i: s for i, s in self._seen.items() if self._is_lane(i)}
            pending = {i: s for i, s in lanes.items() if s.state in LOADING}
            ready, total = self._counts()
            head, busy, began = f"lanes ready {ready}/{total}", InstanceState.STARTING, 0.0
        if not pending:
            return ""
        # the one that has been at it longest: loading (or being stopped) before queued
        name, oldest = min(pending.items(), key=lambda i: (i[1].state is not busy, i[1].since))
        more = f" (+{len(pending) - 1} more)" if len(pending) > 1 else ""
        elapsed = duration(self._clock() - max(oldest.since, began))
        return f"{head} · waiting on {name}{_where(oldest.node)} {elapsed}{more}"

    def _is_lane(self, instance: str) -> bool:
        if self._lanes is not None:
            return instance in self._lanes
        return _LANE_NAME.fullmatch(instance) is not None

    def _ready_lane(self, instance: str, state: InstanceState) -> bool:
        return state is InstanceState.READY and self._is_lane(instance)

    def _counts(self) -> tuple[int, int]:
        """(lanes ready, lanes): one line per ready lane must not cost a walk over all."""
        if self._lanes is not None:
            return len(self._ready), len(self._lanes)
        return len(self._ready), sum(1 for n in self._seen if self._is_lane(n))


def _where(node: str | None) -> str:
    return f" ({node})" if node else ""


def _cause(outcome: Outcome) -> str:
    """What ended the run, in one line (``lane@3: exit status 1``)."""
    reason = outcome.reason.splitlines()[0] if outcome.reason else outcome.status.value
    return f"{outcome.unit}: {reason}" if outcome.unit else reason


def logs_command(instance: str, state_dir: Path) -> str:
    """The ``ddsup logs`` command line that shows all of an instance's log."""
    shown = state_dir
    with contextlib.suppress(ValueError):
        shown = state_dir.relative_to(Path.cwd())
    return shlex.join(["ddsup", "logs", instance, "--state-dir", str(shown)])


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
