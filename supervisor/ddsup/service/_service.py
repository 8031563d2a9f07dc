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
from typing import Any

import trio

from ddsup.process import ChildProcess, ExitStatus, SpawnError, spawn
from ddsup.record._events import Event
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
    """A snapshot for status output and the controller's bookkeeping."""

    instance: str
    node: str
    unit: str
    type: str
    state: InstanceState = InstanceState.INACTIVE
    since: float = 0.0
    pid: int | None = None
    restarts: int = 0
    last_exit: dict[str, Any] | None = None
    probe: str | None = None
    reason: str | None = None
    readiness_timeout: bool = False


class Service:
    """Runs one unit instance until it exits for good, fails, or is asked to stop."""

    def __init__(self, spec: ServiceSpec, emit: Callable[[Event], None]) -> None:
        self.spec = spec
        self._emit = emit
        unit = spec.unit
        self.status = ServiceStatus(
            instance=spec.instance,
            node=spec.node,
            unit=unit.base_name,
            type=unit.type.value,
            since=time.time(),
        )
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
        service = self.spec.unit.service
        if self.spec.start_delay > 0:
            self._transition(InstanceState.WAITING, f"stagger {self.spec.start_delay:g}s")
            await trio.sleep(self.spec.start_delay)
        while True:
            now = trio.current_time()
            while self._starts and now - self._starts[0] > service.start_limit_interval:
                self._starts.popleft()
            if len(self._starts) >= service.start_limit_burst:
                last = f"; last: {self._timeout_reason}" if self.status.readiness_timeout else ""
                self._fail(
                    f"start limit hit: {len(self._starts)} starts within "
                    f"{service.start_limit_interval:g}s (start_limit_burst = "
                    f"{service.start_limit_burst}){last}"
                )
                return
            self._starts.append(now)
            if self._started_once:
                self.status.restarts += 1
            self._started_once = True
            status, ready_for = await self._run_once()
            if status is None:
                return  # failed for good inside _run_once (the process could not start)
            if self._stop_requested:
                return  # stopped while it exited: run() records the stop, not a restart
            if self.spec.unit.type is UnitType.ONESHOT and status.is_success(
                service.success_exit_status
            ):
                self.ready.set()
                self._transition(InstanceState.EXITED, "completed", exit=status)
                return
            timed_out = self.status.readiness_timeout
            clean = not timed_out and status.is_success(service.success_exit_status)
            restart = service.restart is Restart.ALWAYS or (
                service.restart is Restart.ON_FAILURE and not clean
            )
            why = self._timeout_reason if timed_out else status.describe()
            if not restart:
                if clean:
                    self._transition(InstanceState.EXITED, why, exit=status)
                else:
                    self._fail(why, exit=None if timed_out else status)
                return
            if ready_for >= service.restart_max_sec:
                self._failures = 0
            delay = self._backoff()
            self._failures += 1
            self._transition(
                InstanceState.RESTARTING,
                f"{why}; restart in {delay:.3g}s",
                exit=None if timed_out else status,
            )
            await trio.sleep(delay)

    def _backoff(self) -> float:
        service = self.spec.unit.service
        base: float = min(service.restart_sec * (2.0**self._failures), service.restart_max_sec)
        return min(base * random.uniform(0.9, 1.1), service.restart_max_sec)

    async def _run_once(self) -> tuple[ExitStatus | None, float]:
        """One start of the process; returns its exit and how long it was ready."""
        spec = self.spec
        service = spec.unit.service
        self._transition(InstanceState.STARTING, "starting")
        try:
            log_offset = spec.log_path.stat().st_size
        except OSError:
            log_offset = 0
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
        self._emit_event("process", details={"pid": child.pid, "log_offset": log_offset})
        ready_at: float | None = None
        timed_out = False
        try:
            async with trio.open_nursery() as nursery:

                async def watch_ready() -> None:
                    nonlocal ready_at, timed_out
                    if spec.unit.type is UnitType.ONESHOT:
                        with trio.move_on_after(service.timeout_start) as scope:
                            await trio.sleep_forever()
                        timed_out = scope.cancelled_caught
                        nursery.cancel_scope.cancel()
                        return
                    probe = self._make_probe()
                    if probe is not None:
                        with trio.move_on_after(service.timeout_start) as scope:
                            await probe.wait_ready()
                        self.status.probe = probe.last_result
                        if scope.cancelled_caught:
                            timed_out = True
                            nursery.cancel_scope.cancel()
                            return
                    if self._stop_requested:
                        return  # stopped while starting: never report ready (no checkpoint
                        # since the cancel when there is no probe)
                    ready_at = trio.current_time()
                    self.ready.set()
                    self._transition(InstanceState.READY, "probe passed" if probe else "started")

                nursery.start_soon(watch_ready)
                ended = await child.wait()
                # recorded now, as seen: the stop below (the sweep for escaped
                # descendants) and the restart decision come after
                self._emit_event(
                    "exit",
                    reason=ended.describe(),
                    details={"pid": child.pid, "exit": ended.to_json()},
                )
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                final = await child.stop(service.kill_signal, service.timeout_stop)
            # recorded here, so that a stop (which cancels us) reports the exit too
            self._stopped_exit = final
            self.status.last_exit = final.to_json()
            self.status.pid = None
            self._child = None
        self.status.readiness_timeout = timed_out
        if timed_out:
            self._timeout_reason = (
                f"not ready within timeout_start = {service.timeout_start:g}s"
                + (f" (last probe: {self.status.probe})" if self.status.probe else "")
            )
            return final, 0.0
        ready_for = 0.0 if ready_at is None else trio.current_time() - ready_at
        return final, ready_for

    def _make_probe(self) -> Probe | None:
        spec = self.spec
        if spec.unit.ready is None or not spec.probe:
            return None
        return Probe(
            spec.unit.ready, spec.context, env=spec.env, cwd=spec.cwd, log_path=spec.log_path
        )

    # --- state machine --------------------------------------------------------------
    def _fail(self, reason: str, exit: ExitStatus | None = None) -> None:
        self._transition(InstanceState.FAILED, reason, exit=exit)

    def _transition(self, to: InstanceState, reason: str, exit: ExitStatus | None = None) -> None:
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
        details: dict[str, Any] = {"restarts": self.status.restarts}
        if exit is not None:
            details["exit"] = exit.to_json()
            self.status.last_exit = exit.to_json()
        if self.status.pid is not None:
            details["pid"] = self.status.pid
        if to is InstanceState.FAILED and self.status.readiness_timeout:
            details["readiness_timeout"] = True
        self._emit_event(
            "unit", from_state=current.value, to_state=to.value, reason=reason, details=details
        )

    def _emit_event(
        self,
        kind: str,
        *,
        from_state: str | None = None,
        to_state: str | None = None,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        self._emit(
            Event(
                event=kind,
                instance=self.spec.instance,
                node=self.spec.node,
                from_state=from_state,
                to_state=to_state,
                reason=reason,
                details=details or {},
            )
        )
