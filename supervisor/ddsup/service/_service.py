"""One unit instance's lifecycle: start, probe, restart by policy, stop.

A :class:`Service` is owned by exactly one task (``run``), which always reaps its process.
Its states are ``ddsup.record._states``; when it may start again, and after how long, its
:class:`RestartPolicy` (docs/units.md). A readiness timeout stops the process and is a
failed attempt; when that finally fails the unit, the run exits 75.

A rank of a multi-node replica (``ServiceSpec.replica``) lives and dies with its replica
(``ddsup.run._replicas``): when its process ends (any exit, 0 included, or a readiness
timeout), or the run takes it down because a peer's did, it is held in ``restarting``
until the run resumes it (:meth:`resume`: after a delay, with a fresh rendezvous port)
or fails it (:meth:`fail_held`). With ``restart = "no"`` any exit of a rank fails it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import trio

from ddsup.process import ChildProcess, ExitStatus, SpawnError, spawn
from ddsup.record._display import span
from ddsup.record._events import (
    COMPLETED,
    ProbeAnswered,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    UnitTransition,
)
from ddsup.record._states import ALLOWED as _ALLOWED
from ddsup.record._states import LIVE as _LIVE
from ddsup.record._states import IllegalTransition, InstanceState
from ddsup.service._readiness import Probe
from ddsup.service._restart_policy import RestartPolicy
from ddsup.service._spec import REPLICA_RESTARTS, Resume, Watch
from ddsup.service._spec import ServiceSpec as ServiceSpec
from ddsup.service._spec import ServiceStatus as ServiceStatus
from ddsup.units._model import Restart, UnitType


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
        self._start_scope = trio.CancelScope()  # the current start (or the wait before it)
        self._stop_requested = False
        self._child: ChildProcess | None = None
        self._policy = RestartPolicy(spec.unit.service)
        self._started_once = False
        self._timeout_reason = ""
        self._stopped_exit: ExitStatus | None = None  # how the last process ended
        self._down_reason: str | None = None  # the run took this rank down, and why
        self._held: trio.Event | None = None  # set when a held rank may go on
        self._resume = Resume()

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

    def take_down(self, reason: str) -> None:
        """A replica peer went down: end this rank's process and hold it (replicas only).

        A rank already held, with no resume pending, has nothing to take down.
        """
        if self._stop_requested or self.status.state.final or not self.spec.replica:
            return
        if self._held is not None and not self._held.is_set():
            return
        self._down_reason = reason
        self._start_scope.cancel()

    def resume(self, delay: float, attempt: int, respec: Callable[[], ServiceSpec]) -> None:
        """The run restarts this held rank's replica: start again after ``delay``."""
        self._go_on(Resume(delay, attempt, respec))

    def fail_held(self, reason: str, readiness_timeout: bool) -> None:
        """The run gives this held rank's replica up: it has failed for good."""
        self._go_on(Resume(failure=(reason, readiness_timeout)))

    def _go_on(self, order: Resume) -> None:
        if self._held is not None and not self._held.is_set():
            self._resume = order
            self._held.set()

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
            return
        if self.status.state is not InstanceState.STOPPING:
            self._transition(InstanceState.STOPPING, "stop requested")
        self._transition(InstanceState.EXITED, "stopped", exit=self._stopped_exit)

    async def _run(self) -> None:
        delay = self.spec.start_delay
        if delay > 0:
            self._transition(InstanceState.WAITING, f"stagger {span(delay)}")
        resumed = False
        while True:
            await self._wait_before_start(delay)
            if not resumed and not self._may_start():
                return
            if self._started_once:
                self.status.restarts += 1
            self._started_once = True
            status, ready_for = await self._start_once()
            if status is None and self.status.state.final:
                return  # failed for good inside _run_once (the process could not start)
            if self._stop_requested:
                return  # stopped while it exited: run() records the stop, not a restart
            if self.spec.replica and self.spec.unit.service.restart is not Restart.NO:
                next_delay = await self._hold(status)
                resumed = True
            else:
                assert status is not None
                next_delay = self._verdict(status, ready_for)
            if next_delay is None:
                return
            delay = next_delay

    async def _wait_before_start(self, delay: float) -> None:
        """The stagger or restart delay; a replica rank taken down meanwhile ends it early."""
        self._start_scope = trio.CancelScope()
        with self._start_scope:
            await trio.sleep(delay)

    def _may_start(self) -> bool:
        """Count this start against the start limit; past it, the unit has failed."""
        refused = self._policy.admit(trio.current_time())
        if refused is None:
            self.status.attempt = self._policy.attempt
            return True
        timed_out = self.status.readiness_timeout
        last = f"; last: {self._timeout_reason}" if timed_out else ""
        self._fail(f"start limit hit: {refused}{last}", timed_out=timed_out)
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
        clean = not timed_out and success and not self.spec.replica
        restart = service.restart is Restart.ALWAYS or (
            service.restart is Restart.ON_FAILURE and not clean
        )
        why = self._timeout_reason if timed_out else status.describe()
        exit = None if timed_out else status
        exhausted = self._policy.exhausted() if restart else None
        if exhausted is not None:  # no start can follow: fail now, not after a backoff
            self._fail(f"start limit hit: {exhausted}; last: {why}", exit=exit, timed_out=timed_out)
            return None
        if not restart:
            if clean:
                self._transition(InstanceState.EXITED, why, exit=status)
            else:
                self._fail(why, exit=exit, timed_out=timed_out)
            return None
        delay = self._policy.delay(ready_for)
        why = f"{why}; restart in {span(delay)}"
        self._transition(InstanceState.RESTARTING, why, exit=exit, timed_out=timed_out)
        return delay

    async def _hold(self, status: ExitStatus | None) -> float | None:
        """A replica rank is down: held until the run resumes it (the delay) or fails it."""
        timed_out = self.status.readiness_timeout and self._down_reason is None
        if self._down_reason is not None:
            why, exit = self._down_reason, None
        elif timed_out:
            why, exit = self._timeout_reason, None
        else:
            why, exit = (status.describe() if status else "ended"), status
        self._down_reason, self._held = None, trio.Event()
        held, why = self._held, f"{why}; {REPLICA_RESTARTS}"
        self._transition(InstanceState.RESTARTING, why, exit=exit, timed_out=timed_out)
        await held.wait()
        order, self._held = self._resume, None
        if order.failure is not None:
            reason, readiness_timeout = order.failure
            self._fail(reason, timed_out=readiness_timeout)
            return None
        if order.respec is not None:
            self.spec = order.respec()
        self.status.attempt = order.attempt
        return order.delay

    async def _start_once(self) -> tuple[ExitStatus | None, float]:
        """One start: the process's exit and how long it was ready. A replica rank taken
        down (before its process started, or while it ran) ends it early."""
        self.status.probe = None
        self.status.readiness_timeout = False
        self._stopped_exit = None
        self._transition(InstanceState.STARTING, "starting")
        self._start_scope = trio.CancelScope()
        with self._start_scope:
            if self._down_reason is None:
                return await self._run_once()
        self.status.readiness_timeout = False
        return self._stopped_exit, 0.0

    async def _run_once(self) -> tuple[ExitStatus | None, float]:
        """Run the process once; its exit and how long it was ready (None: it never ran)."""
        spec = self.spec
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
        watch = Watch()
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
        self, probe: Probe | None, watch: Watch, process_scope: trio.CancelScope
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

    def _become_ready(self, watch: Watch, reason: str) -> None:
        if self._stop_requested or watch.exited:
            return  # stopped while starting, or the probe's pass came after the exit
        watch.ready_at = trio.current_time()
        self._policy.became_ready()
        self.ready.set()
        self._transition(InstanceState.READY, reason)

    def _ready_for(self, watch: Watch) -> float:
        """How long the process was ready; records a readiness timeout for the verdict."""
        self.status.readiness_timeout = watch.timed_out
        if watch.timed_out:
            timeout_start = self.spec.unit.service.timeout_start
            self._timeout_reason = f"not ready within timeout_start = {span(timeout_start)}" + (
                f" (last probe: {self.status.probe})" if self.status.probe else ""
            )
            return 0.0
        return 0.0 if watch.ready_at is None else trio.current_time() - watch.ready_at

    def _make_probe(self) -> Probe | None:
        spec = self.spec
        if spec.unit.ready is None or not spec.probe:
            return None
        return Probe(
            spec.unit.ready,
            spec.context,
            env=spec.env,
            cwd=spec.cwd,
            log_path=spec.log_path,
            on_answer=self._probe_answered,
        )

    def _probe_answered(self, answer: str) -> None:
        """The probe answered differently than before in this start: say so (status)."""
        self._emit(ProbeAnswered(instance=self.spec.instance, node=self.spec.node, answer=answer))

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
        starting = to is InstanceState.STARTING
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
                attempt=self.status.attempt,
                attempt_limit=self._policy.limit if self.status.attempt is not None else None,
                master_port=self.spec.master_port if starting else None,
                time=self.status.since,
            )
        )
