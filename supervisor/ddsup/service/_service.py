"""One unit instance's lifecycle: start, probe, restart by policy, stop.

A :class:`Service` is owned by exactly one task (``run``), which always reaps its process.
Its states and the transitions allowed between them are ``ddsup.record._states``.

Restart rule (documented in docs/units.md): after an unclean exit (or any exit with
``restart = "always"``) the next start waits ``restart_sec · 2^k`` (k consecutive
failures), capped at ``restart_max_sec``, with ±10 % jitter (never above the cap). k resets
to 0 once the unit has stayed ready for ``restart_max_sec``. More than
``start_limit_burst`` starts inside ``start_limit_interval`` = the unit has failed.
A readiness timeout stops the process and counts as a failure for the restart policy;
when it is what finally fails the unit, the run exits 75 (``readiness_timeout``).
"""

from __future__ import annotations

import random
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import trio

from ddsup.process import ChildProcess, ExitStatus, SpawnError, spawn
from ddsup.record._events import (
    COMPLETED,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    UnitTransition,
)
from ddsup.record._states import ALLOWED as _ALLOWED
from ddsup.record._states import LIVE as _LIVE
from ddsup.record._states import IllegalTransition, InstanceState
from ddsup.service._readiness import Probe
from ddsup.units._model import Restart, Unit, UnitType


@dataclass(frozen=True)
class ServiceSpec:
    """Everything needed to run one instance, with specifiers already resolved."""

    instance: str
    node: str
    unit: Unit
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    log_path: Path
    context: Mapping[str, str]
    start_delay: float = 0.0
    probe: bool = True  # False for ranks > 0 of a multi-node lane: rank 0 serves HTTP


@dataclass
class ServiceStatus:
    """Where the service is now (in-process callers and tests; others read its events)."""

    state: InstanceState = InstanceState.INACTIVE
    since: float = 0.0
    pid: int | None = None
    restarts: int = 0
    last_exit: ExitStatus | None = None
    probe: str | None = None  # the readiness probe's last answer in the current start
    reason: str | None = None
    readiness_timeout: bool = False  # the latest start was not ready within timeout_start


@dataclass
class _Watch:
    """What one start of the process has shown so far (shared by its two tasks)."""

    ready_at: float | None = None
    timed_out: bool = False
    exited: bool = False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class Service:
    """Runs one unit instance until it exits for good, fails, or is asked to stop."""

    def __init__(self, spec: ServiceSpec, emit: Callable[[RecordedEvent], None]) -> None:
        self.spec = spec
        self._emit = emit
        self.status = ServiceStatus(since=time.time())
        self.ready = trio.Event()  # ready (oneshot: completed successfully)
        self.finished = trio.Event()
        self._scope = trio.CancelScope()
        self._stop_requested = False
        self._child: ChildProcess | None = None
        self._starts: deque[float] = deque()
        self._failures = 0
        self._started_once = False
        self._timeout_reason = ""
        self._stopped_exit: ExitStatus | None = None  # how the last process ended

    # --- control from outside -------------------------------------------------------
    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop gracefully (kill_signal, timeout_stop, SIGKILL). Idempotent."""
        if self._stop_requested or self.status.state.final:
            return
        self._stop_requested = True
        if self.status.state in _LIVE:
            self._transition(InstanceState.STOPPING, reason)
        self._scope.cancel()

    def kill_now(self) -> None:
        """SIGKILL the process group at once (second signal while stopping)."""
        self.request_stop("killed")
        if self._child is not None:
            self._child.signal_group(signal.SIGKILL)

    def send_signal(self, sig: int) -> None:
        if self._child is not None and self._child.status is None:
            self._child.signal_group(sig)

    # --- the owning task ------------------------------------------------------------
    async def run(self) -> None:
        try:
            with self._scope:
                await self._run()
        finally:
            if not self.status.state.final:
                self._finish_stopped()
            self.finished.set()

    def _finish_stopped(self) -> None:
        if self.status.state is InstanceState.INACTIVE:
            self._transition(InstanceState.EXITED, "stopped before start")
        elif self.status.state not in (InstanceState.STOPPING,):
            self._transition(InstanceState.STOPPING, "stop requested")
            self._transition(InstanceState.EXITED, "stopped", exit=self._stopped_exit)
        else:
            self._transition(InstanceState.EXITED, "stopped", exit=self._stopped_exit)

    async def _run(self) -> None:
        if self.spec.start_delay > 0:
            self._transition(InstanceState.WAITING, f"stagger {self.spec.start_delay:g}s")
            await trio.sleep(self.spec.start_delay)
        while self._may_start():
            if self._started_once:
                self.status.restarts += 1
            self._started_once = True
            status, ready_for = await self._run_once()
            if status is None:
                return  # failed for good inside _run_once (the process could not start)
            if self._stop_requested:
                return  # stopped while it exited: run() records the stop, not a restart
            delay = self._verdict(status, ready_for)
            if delay is None:
                return
            await trio.sleep(delay)

    def _may_start(self) -> bool:
        """Count this start against the start limit; past it, the unit has failed."""
        service = self.spec.unit.service
        now = trio.current_time()
        while self._starts and now - self._starts[0] > service.start_limit_interval:
            self._starts.popleft()
        if len(self._starts) < service.start_limit_burst:
            self._starts.append(now)
            return True
        timed_out = self.status.readiness_timeout
        last = f"; last: {self._timeout_reason}" if timed_out else ""
        self._fail(
            f"start limit hit: {len(self._starts)} starts within "
            f"{service.start_limit_interval:g}s (start_limit_burst = "
            f"{service.start_limit_burst}){last}",
            timed_out=timed_out,
        )
        return False

    def _verdict(self, status: ExitStatus, ready_for: float) -> float | None:
        """After the process ended by itself: the restart delay, or None when it is over."""
        service = self.spec.unit.service
        success = status.is_success(service.success_exit_status)
        if self.spec.unit.type is UnitType.ONESHOT and success:
            self.ready.set()
            self._transition(InstanceState.EXITED, COMPLETED, exit=status)
            return None
        timed_out = self.status.readiness_timeout
        clean = not timed_out and success
        restart = service.restart is Restart.ALWAYS or (
            service.restart is Restart.ON_FAILURE and not clean
        )
        why = self._timeout_reason if timed_out else status.describe()
        exit = None if timed_out else status
        if not restart:
            if clean:
                self._transition(InstanceState.EXITED, why, exit=status)
            else:
                self._fail(why, exit=exit, timed_out=timed_out)
            return None
        if ready_for >= service.restart_max_sec:
            self._failures = 0
        delay = self._backoff()
        self._failures += 1
        self._transition(
            InstanceState.RESTARTING,
            f"{why}; restart in {delay:.3g}s",
            exit=exit,
            timed_out=timed_out,
        )
        return delay

    def _backoff(self) -> float:
        service = self.spec.unit.service
        base: float = min(service.restart_sec * (2.0**self._failures), service.restart_max_sec)
        return min(base * random.uniform(0.9, 1.1), service.restart_max_sec)

    async def _run_once(self) -> tuple[ExitStatus | None, float]:
        """One start of the process; returns its exit and how long it was ready."""
        spec = self.spec
        self.status.probe = None
        self._transition(InstanceState.STARTING, "starting")
        log_offset = _size(spec.log_path)
        try:
            child = await spawn(  # ddsup:containment: unit= puts it in its unit's cgroup
                spec.argv, env=spec.env, cwd=spec.cwd, log_path=spec.log_path, unit=spec.instance
            )
        except SpawnError as err:
            self._fail(str(err))
            return None, 0.0
        self._child = child
        self.status.pid = child.pid
        # log_offset: where this process's output begins in the log (``logs --since``)
        self._emit(
            ProcessStarted(
                instance=spec.instance, node=spec.node, pid=child.pid, log_offset=log_offset
            )
        )
        watch = _Watch()
        try:
            async with trio.open_nursery() as nursery:
                oneshot = spec.unit.type is UnitType.ONESHOT
                probe = None if oneshot else self._make_probe()
                if probe is None and not oneshot:
                    # Ready once started, decided here and now: a separate task could run
                    # after the exit below was seen (the order of one scheduler batch is
                    # random), and report a process that has already ended as ready.
                    self._become_ready(watch, "started")
                else:
                    nursery.start_soon(self._watch_readiness, probe, watch, nursery.cancel_scope)
                ended = await child.wait()
                watch.exited = True
                # recorded now, as seen: the stop below (the sweep for escaped
                # descendants) and the restart decision come after
                self._emit(
                    ProcessExited(instance=spec.instance, node=spec.node, pid=child.pid, exit=ended)
                )
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                final = await child.stop(
                    spec.unit.service.kill_signal, spec.unit.service.timeout_stop
                )
            # recorded here, so that a stop (which cancels us) reports the exit too
            self._stopped_exit = final
            self.status.last_exit = final
            self.status.pid = None
            self._child = None
        return final, self._ready_for(watch)

    async def _watch_readiness(
        self, probe: Probe | None, watch: _Watch, process_scope: trio.CancelScope
    ) -> None:
        """Until the probe passes (or a oneshot's ``timeout_start``); a timeout ends the run."""
        timeout_start = self.spec.unit.service.timeout_start
        with trio.move_on_after(timeout_start) as scope:
            if probe is None:  # a oneshot: ready means completed, which the exit tells
                await trio.sleep_forever()
            else:
                await probe.wait_ready()
        if probe is not None:
            self.status.probe = probe.last_result
        if scope.cancelled_caught:
            watch.timed_out = True
            process_scope.cancel()
            return
        self._become_ready(watch, "probe passed")

    def _become_ready(self, watch: _Watch, reason: str) -> None:
        if self._stop_requested or watch.exited:
            return  # stopped while starting, or the probe's pass came after the exit
        watch.ready_at = trio.current_time()
        self.ready.set()
        self._transition(InstanceState.READY, reason)

    def _ready_for(self, watch: _Watch) -> float:
        """How long the process was ready; records a readiness timeout for the verdict."""
        self.status.readiness_timeout = watch.timed_out
        if watch.timed_out:
            timeout_start = self.spec.unit.service.timeout_start
            self._timeout_reason = f"not ready within timeout_start = {timeout_start:g}s" + (
                f" (last probe: {self.status.probe})" if self.status.probe else ""
            )
            return 0.0
        return 0.0 if watch.ready_at is None else trio.current_time() - watch.ready_at

    def _make_probe(self) -> Probe | None:
        spec = self.spec
        if spec.unit.ready is None or not spec.probe:
            return None
        return Probe(
            spec.unit.ready, spec.context, env=spec.env, cwd=spec.cwd, log_path=spec.log_path
        )

    # --- state machine --------------------------------------------------------------
    def _fail(
        self, reason: str, exit: ExitStatus | None = None, *, timed_out: bool = False
    ) -> None:
        self._transition(InstanceState.FAILED, reason, exit=exit, timed_out=timed_out)

    def _transition(
        self,
        to: InstanceState,
        reason: str,
        exit: ExitStatus | None = None,
        *,
        timed_out: bool = False,
    ) -> None:
        """Move to ``to`` and report it; ``timed_out``: the verdict of a readiness timeout."""
        current = self.status.state
        if to not in _ALLOWED[current]:
            raise IllegalTransition(
                f"{self.spec.instance}: {current.value} → {to.value} ({reason})"
            )
        self.status.state = to
        self.status.since = time.time()
        self.status.reason = reason
        if to is not InstanceState.READY and current is InstanceState.READY:
            self.ready = trio.Event()  # no longer ready: waiters must wait for the next time
        if exit is not None:
            self.status.last_exit = exit
        self._emit(
            UnitTransition(
                instance=self.spec.instance,
                node=self.spec.node,
                from_state=current,
                to_state=to,
                reason=reason,
                restarts=self.status.restarts,
                pid=self.status.pid,
                exit=exit,
                readiness_timeout=timed_out,
                probe=self.status.probe,
                time=self.status.since,
            )
        )
