"""What ``ddsup start`` prints: concise lines for a person or a Slurm job output file.

Transitions that matter (ready, failed, restarting, exited) are printed by default; every
transition with ``-v``; only the final result with ``-q``. Lines carry a UTC-free local
timestamp so job output files can be read next to ``events.jsonl``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TextIO

from ddsup._events import Event
from ddsup._outcome import Outcome

_DEFAULT_STATES = {"ready", "failed", "restarting", "exited"}


class Console:
    def __init__(
        self, *, verbose: bool = False, quiet: bool = False, stream: TextIO | None = None
    ) -> None:
        self.verbose = verbose
        self.quiet = quiet
        self.stream = stream or sys.stderr

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        # BrokenPipe: nobody reads our output any more; the state dir still has it all.
        with contextlib.suppress(BrokenPipeError, ValueError):
            print(f"{stamp} ddsup: {text}", file=self.stream, flush=True)

    def event(self, event: Event) -> None:
        if self.quiet:
            return
        if event.event == "unit":
            if not self.verbose and event.to_state not in _DEFAULT_STATES:
                return
            where = f" ({event.node})" if event.node else ""
            self._print(f"{event.instance}{where}: {event.to_state} — {event.reason}")
        elif event.event == "run" and (self.verbose or event.reason in ("stopping", "ending")):
            self._print(f"run {event.reason}")

    def error(self, text: str) -> None:
        self._print(f"error: {text}")

    def result(self, outcome: Outcome, state_dir: Path) -> None:
        cause = f" ({outcome.unit}: {outcome.reason})" if outcome.unit else f" ({outcome.reason})"
        self._print(
            f"finished: {outcome.status}, exit {outcome.exit_code}{cause}; state in {state_dir}"
        )
