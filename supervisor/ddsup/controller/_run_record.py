"""What one run leaves behind while it runs: ``run.json``, ``events.jsonl``, ``result.json``,
the console's lines, and the snapshot ``ddsup status`` is answered with.

The controller decides; this writes it down. Every event goes to the log and the console
in the order the run's state decided it; the latest containment report of each
supervisor is kept so that ``status`` of a live run needs no read of ``events.jsonl``.
When the state directory cannot be written, the run goes on (``record._faults``) and the
result goes to stderr as one JSON line.
"""

from __future__ import annotations

import json
import os
import socket
import time

from ddsup.controller._console import Console
from ddsup.process import Containment, read_stat
from ddsup.record import (
    Contained,
    ControlAddress,
    EventLog,
    InstanceStatus,
    Outcome,
    RecordedEvent,
    RunInfo,
    RunSnapshot,
    StateDir,
    say,
)


class RunRecord:
    """The files and the console of one run (``ddsup start``'s own)."""

    def __init__(
        self,
        state: StateDir,
        console: Console,
        *,
        invocation_id: str,
        launcher: str,
        unit_dir: str,
        attempt: int = 0,
    ) -> None:
        self.state = state
        self.console = console
        self.invocation_id = invocation_id
        self.started = time.time()
        self._launcher = launcher
        self._unit_dir = unit_dir
        self._attempt = attempt
        self._events = EventLog(state.events, state.faults, opener=state.append)
        self._reports: dict[tuple[str, str | None], Contained] = {}  # per supervisor
        self._control: ControlAddress | None = None
        self._containment: Containment | None = None

    def write(self, event: RecordedEvent) -> None:
        """One event: in ``events.jsonl`` and on the console."""
        self._events.write(event)
        if isinstance(event, Contained):  # the latest of each supervisor, for status
            self._reports[(event.supervisor, event.node)] = event
        self.console.event(event)

    def close(self) -> None:
        self._events.close()

    def listening(self, control: ControlAddress) -> None:
        """Where the control channel listens, in ``run.json`` (operators find it there)."""
        self._control = control
        self.write_run_json()

    def contained(self, containment: Containment) -> None:
        """Say which no-orphan layers hold here: in run.json (for status) and an event."""
        self._containment = containment
        self.write_run_json()
        layers = containment.layers
        assert layers is not None
        summary, details = layers.summary(), layers.to_json()
        self.write(
            Contained(node=None, supervisor=layers.supervisor, summary=summary, details=details)
        )

    def write_run_json(self) -> None:
        me = read_stat(os.getpid())
        layers = None if self._containment is None else self._containment.layers
        info = RunInfo(
            invocation_id=self.invocation_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            pid_start=None if me is None else me.start_time,
            launcher=self._launcher,
            unit_dir=self._unit_dir,
            started_at=self.started,
            control=self._control,
            containment=None if layers is None else layers.to_json(),
            job=os.environ.get("SLURM_JOB_ID") or None,
            uid=os.geteuid(),
            attempt=self._attempt,
        )
        self.state.save_json(self.state.run, info.to_json())

    def write_result(self, outcome: Outcome) -> None:
        """``result.json``, with what kept the record from being complete (``record``);
        on a full disk into the space kept for it from the start; on stderr, one JSON
        line, when even that fails."""
        result = outcome.to_dict()
        faults = self.state.faults
        if (record := faults.to_json()) is not None:
            result["record"] = record
        written = self.state.save_json(self.state.result, result)
        if not written and self.state.release_reserve():
            if (record := faults.to_json()) is not None:
                result["record"] = record
            written = self.state.save_json(self.state.result, result)
        if not written:
            say(f"ddsup: result.json: {json.dumps(result, sort_keys=True)}\n")
        self.state.release_reserve()

    def snapshot(
        self, rows: tuple[InstanceStatus, ...], stopping: bool, ends_at: float | None
    ) -> RunSnapshot:
        """What a live run answers to ``ddsup status``."""
        return RunSnapshot(
            invocation_id=self.invocation_id,
            launcher=self._launcher,
            started_at=self.started,
            uptime=time.time() - self.started,
            state_dir=str(self.state.path),
            stopping=stopping,
            instances=rows,
            containment=tuple(self._reports.values()),
            ends_at=ends_at,
        )
