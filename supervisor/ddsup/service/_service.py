"""One unit instance's lifecycle: start, probe, restart by policy, stop.

A :class:`Service` is owned by exactly one task (``run``), which always reaps its process.
Its states and the transitions allowed between them are ``ddsup.record._states``.

Restart rule (docs/units.md; the arithmetic is ``_restart_policy``): after an unclean
exit (or any exit with ``restart = "always"``) the next start waits a backoff; too many
starts inside ``start_limit_interval`` fail the unit. A readiness timeout stops the
process and counts as a failure; when it fails the unit, the run exits 75. A ready
lane that fails its liveness probes (``_liveness``) is SIGKILLed, and that counts as a
failure too.

A requested restart (``ddsup restart``, :meth:`Service.request_restart`) stops the
process (``kill_signal``, ``timeout_stop``) and starts it again at once; it neither
counts against ``start_limit_burst`` nor as a failure for the backoff.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ddsup.process import (
    ChildProcess,
    ExitStatus,
    OutputLog,
    SpawnError,
    output_pipe,
    spawn,
)
from ddsup.record._display import human_duration
from ddsup.record._events import (
    COMPLETED,
    LivenessFailed,
    ProcessExited,
    ProcessStarted,
    RecordedEvent,
    UnitTransition,
)
from ddsup.record._states import ALLOWED as _ALLOWED
from ddsup.record._states import LIVE as _LIVE
from ddsup.record._states import IllegalTransition, InstanceState
from ddsup.service._liveness import Liveness, watch_liveness
from ddsup.service._readiness import Probe
from ddsup.service._restart_policy import RestartPolicy
from ddsup.service._spec import ServiceSpec as ServiceSpec
from ddsup.service._spec import ServiceStatus
from ddsup.units._durations import format_duration
from ddsup.units._model import Restart, UnitType

OUTPUT_GRACE = 1.0  # seconds the output of a service's processes may drain after its end
RESTART_REQUESTED = "restart requested"


@dataclass
class _Watch:
    """What one start of the process has shown so far (shared by its two tasks)."""

    ready_at: float | None = None
    timed_out: bool = False
    exited: bool = False
    unresponsive: str | None = None  # why the liveness probes ended it (None: they did not)


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
        self._policy = RestartPolicy(spec.unit.service)
        self._started_once = False
        self._timeout_reason = ""
        self._unresponsive: str | None = None  # the latest start failed its liveness probes
        self._stopped_exit: ExitStatus | None = None  # how the last process ended
        self._restart_requested = False
        self._process_scope: trio.CancelScope | None = None  # the running process's
        self._delay_scope: trio.CancelScope | None = None  # a restart delay's
        self._copiers: trio.Nursery | None = None  # the tasks copying output into the log
        service = spec.unit.service
        self.output = OutputLog(
            spec.log_path,
            max_size=service.log_max_size,
            max_files=service.log_max_files,
            on_error=spec.log_error,
        )

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

    def request_restart(self, reason: str = RESTART_REQUESTED) -> bool:
        """Stop the process and start it again at once; False when there is none to restart.

        A process that runs (starting or ready) is stopped as for a stop; one waiting out a
        restart delay starts now.
        """
        if self._stop_requested or self._restart_requested:
            return False
        state = self.status.state
        if state in (InstanceState.STARTING, InstanceState.READY) and self._process_scope:
            self._restart_requested = True
            self._transition(InstanceState.RESTARTING, reason)
            self._process_scope.cancel()
            return True
        if state is InstanceState.RESTARTING and self._delay_scope is not None:
            self._restart_requested = True
            self._delay_scope.cancel()
            return True
        return False

    def send_signal(self, sig: int) -> None:
        if self._child is not None and self._child.status is None:
            self._child.signal_group(sig)

    # --- the owning task ------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with trio.open_nursery() as copiers:
                self._copiers = copiers
                try:
                    with self._scope:
                        await self._run()
                finally:  # over: what its processes wrote drains a moment more, then ends
                    self.output.end_copies(trio.current_time() + OUTPUT_GRACE)
        finally:
            if not self.status.state.final:
                self._finish_stopped()
            self.output.close()
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
            stagger = human_duration(self.spec.start_delay)
            self._transition(InstanceState.WAITING, f"stagger {stagger}")
            await trio.sleep(self.spec.start_delay)
        requested = False
        while requested or self._may_start():
            if self._started_once:
                self.status.restarts += 1
            self._started_once = True
            status, ready_for = await self._run_once()
            if status is None:
                return  # failed for good inside _run_once (the process could not start)
            if self._stop_requested:
                return  # stopped while it exited: run() records the stop, not a restart
            requested, self._restart_requested = self._restart_requested, False
            if requested:
                continue  # ddsup restart: at once, not counted
            delay = self._verdict(status, ready_for)
            if delay is None:
                return
            requested = await self._wait_to_restart(delay)

    async def _wait_to_restart(self, delay: float) -> bool:
        """The restart delay; True when a requested restart cut it short."""
        with trio.CancelScope() as scope:
            self._delay_scope = scope
            await trio.sleep(delay)
        self._delay_scope = None
        if self._restart_requested:
            self._restart_requested = False
            return True
        return False

    def _may_start(self) -> bool:
        """Count this start against the start limit; past it, the unit has failed."""
        service = self.spec.unit.service
        if self._policy.admit(trio.current_time()):
            return True
        timed_out = self.status.readiness_timeout
        last_exit = None if timed_out else self.status.last_exit
        if timed_out:
            last = f"; last: {self._timeout_reason}"
        elif last_exit is not None:
            last = f"; last exit: {last_exit.describe()}"
        else:
            last = ""
        self._fail(
            f"start limit hit: {self._policy.recent_starts} starts within "
            f"{format_duration(service.start_limit_interval)} (start_limit_burst = "
            f"{service.start_limit_burst}){last}",
            exit=last_exit,
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
        clean = not timed_out and not self._unresponsive and success
        restart = service.restart is Restart.ALWAYS or (
            service.restart is Restart.ON_FAILURE and not clean
        )
        why = self._timeout_reason if timed_out else self._unresponsive or status.describe()
        exit = None if timed_out else status
        if not restart:
            if clean:
                self._transition(InstanceState.EXITED, why, exit=status)
            else:
                self._fail(why, exit=exit, timed_out=timed_out)
            return None
        delay = self._policy.next_delay(ready_for)
        self._transition(
            InstanceState.RESTARTING,
            f"{why}; restart in {human_duration(delay)}",
            exit=exit,
            timed_out=timed_out,
        )
        return delay

    async def _run_once(self) -> tuple[ExitStatus | None, float]:
        """One start of the process; returns its exit and how long it was ready.

        Its output is copied into the log by a task of its own, which outlives the process
        until the pipe's last writer is gone (at most :data:`OUTPUT_GRACE` after the
        service's end).
        """
        spec = self.spec
        self.status.probe = None
        self._transition(InstanceState.STARTING, "starting")
        log_offset = self.output.size
        read_end, write_end = output_pipe()
        try:
            child = await spawn(  # ddsup:containment: unit= puts it in its unit's cgroup
                spec.argv, env=spec.env, cwd=spec.cwd, output=write_end, unit=spec.instance
            )
        except SpawnError as err:
            os.close(read_end)
            self._fail(str(err))
            return None, 0.0
        finally:
            os.close(write_end)
        self._child = child
        self.status.pid = child.pid
        # log_offset: where this process's output begins in the log (``logs --since``)
        self._emit(
            ProcessStarted(
                instance=spec.instance, node=spec.node, pid=child.pid, log_offset=log_offset
            )
        )
        watch = _Watch()
        assert self._copiers is not None  # an engine may outlive it: the next start never waits
        self.output.copy_in(self._copiers, read_end, name=f"output of {spec.instance}")
        try:
            await self._watch_process(child, watch)
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
            if self._restart_requested and not watch.exited:
                self._emit(
                    ProcessExited(instance=spec.instance, node=spec.node, pid=child.pid, exit=final)
                )
        return final, self._ready_for(watch)

    async def _watch_process(self, child: ChildProcess, watch: _Watch) -> None:
        """Until the process exits (or its scope is cancelled: a readiness timeout, a
        requested restart), with its readiness watched beside it."""
        spec = self.spec
        async with trio.open_nursery() as nursery:
            self._process_scope = nursery.cancel_scope
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
        self._process_scope = None

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
        liveness = Liveness.of(self.spec.unit)
        if probe is not None and liveness is not None and watch.ready_at is not None:
            await self._watch_liveness(probe, liveness, watch)

    async def _watch_liveness(self, probe: Probe, liveness: Liveness, watch: _Watch) -> None:
        """Until ``liveness.limit`` probes in a row failed: then SIGKILL (see ``_liveness``)."""

        def failed(failures: int, answer: str) -> None:
            if self._stop_requested or watch.exited:
                return
            self.status.probe = answer
            instance, node, limit = self.spec.instance, self.spec.node, liveness.limit
            self._emit(
                LivenessFailed(
                    instance=instance, node=node, failures=failures, limit=limit, probe=answer
                )
            )
            if self.status.state is InstanceState.READY:
                self._transition(InstanceState.UNRESPONSIVE, f"liveness probe failed: {answer}")

        def passed() -> None:
            if self.status.state is InstanceState.UNRESPONSIVE and not self._stop_requested:
                self.status.probe = probe.last_result
                self.ready.set()
                self._transition(InstanceState.READY, "liveness probe passed again")

        last = await watch_liveness(probe, liveness, failed=failed, passed=passed)
        watch.unresponsive = (
            f"not answering: {liveness.limit} liveness probes failed in a row "
            f"(last: {last}); killed"
        )
        if self._child is not None:
            self._child.signal_group(signal.SIGKILL)

    def _become_ready(self, watch: _Watch, reason: str) -> None:
        if self._stop_requested or watch.exited:
            return  # stopped while starting, or the probe's pass came after the exit
        watch.ready_at = trio.current_time()
        self.ready.set()
        self._transition(InstanceState.READY, reason)

    def _ready_for(self, watch: _Watch) -> float:
        """How long the process was ready; records a readiness timeout for the verdict."""
        self.status.readiness_timeout = watch.timed_out
        self._unresponsive = watch.unresponsive
        if watch.timed_out:
            timeout_start = self.spec.unit.service.timeout_start
            limit = format_duration(timeout_start)
            self._timeout_reason = f"not ready within timeout_start = {limit}" + (
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
            log_error=spec.log_error,
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
