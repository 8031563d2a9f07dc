"""One unit instance's lifecycle: start, probe, restart by policy, stop.

A :class:`Service` is owned by exactly one task (``run``), which always reaps its process.
Its states and the transitions allowed between them are ``ddsup.record._states``.

This module is the state machine's loop and its controls from outside; the parts with a
concept of their own live beside it, each a class or functions with explicit
parameters: one start of the process and its watchers of exit, readiness and liveness
(``_one_start``), what follows an end (``_verdict``, whose arithmetic is
``_restart_policy``), the hold of a replica rank (``_replica_hold``), and a checked
transition turned into its event (``_transition``).

Restart rule (docs/units.md): after an unclean exit (a lane's own exit always is; or
any exit with ``restart = "always"``) the next start waits a backoff; too many starts (or
``start_limit_burst`` attempts in a row that never became ready) fail the unit. A
readiness timeout stops the process and counts as a failure; when it fails the unit,
the run exits 75. A ready lane that fails its liveness probes (``_liveness``) is
SIGKILLed, and that counts as a failure too.

A requested restart (``ddsup restart``, :meth:`Service.request_restart`) stops the
process (``kill_signal``, ``timeout_stop``) and starts it again at once; it neither
counts against ``start_limit_burst`` nor as a failure for the backoff.

A rank of a multi-node replica (``ServiceSpec.replica``) lives and dies with its replica
(``ddsup.decide._replicas``): when its process ends (any exit, 0 included, or a readiness
timeout), or the run takes it down because a peer's did, it is held in ``restarting``
until the run resumes it (:meth:`resume`: after a delay, with a fresh rendezvous port)
or fails it (:meth:`fail_held`). With ``restart = "no"`` any exit of a rank fails it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import trio

from ddsup.process import ChildProcess, ExitStatus, OutputLog, SpawnError
from ddsup.record import LIVE as _LIVE
from ddsup.record import InstanceState, NodeEvent, human_duration
from ddsup.service._one_start import OneStart, StartHooks
from ddsup.service._replica_hold import ReplicaHold, held_reason
from ddsup.service._restart_policy import RestartPolicy
from ddsup.service._spec import ServiceSpec as ServiceSpec
from ddsup.service._spec import ServiceStatus as ServiceStatus
from ddsup.service._spec import Watch
from ddsup.service._transition import transition
from ddsup.service._verdict import Ended, verdict
from ddsup.units import Restart, format_duration

OUTPUT_GRACE = 1.0  # seconds the output of a service's processes may drain after its end
RESTART_REQUESTED = "restart requested"


class Service:
    """Runs one unit instance until it exits for good, fails, or is asked to stop."""

    def __init__(self, spec: ServiceSpec, emit: Callable[[NodeEvent], None]) -> None:
        self.spec = spec
        self._emit = emit
        self.status = ServiceStatus(since=time.time())
        self.ready = trio.Event()  # ready (oneshot: completed successfully)
        self.finished = trio.Event()
        self._scope = trio.CancelScope()
        self._start_scope = trio.CancelScope()  # the current start (or the wait before it)
        self._stop_requested = False
        self._start: OneStart | None = None  # the latest start of the process
        self._policy = RestartPolicy(spec.unit.service)
        self._started_once = False
        self._timeout_reason = ""
        self._unresponsive: str | None = None  # the latest start failed its liveness probes
        self._stopped_exit: ExitStatus | None = None  # how the last process ended
        self._restart_requested = False
        self._delay_scope: trio.CancelScope | None = None  # a restart delay's
        self._copiers: trio.Nursery | None = None  # the tasks copying output into the log
        self._replica = ReplicaHold()  # replica ranks only: the run's orders
        self._hooks = StartHooks(
            emit=self._send,
            stopping=self._stopping,
            restarting=self._restarting,
            became_ready=self._became_ready,
            unresponsive=self._unresponsive_now,
            responsive=self._responsive_again,
        )
        service = spec.unit.service
        self.output = OutputLog(
            spec.log_path,
            max_size=service.log_max_size,
            max_files=service.log_max_files,
            on_error=spec.log_error,
        )

    @property
    def _child(self) -> ChildProcess | None:
        """The running process, if any (for signals from outside)."""
        return None if self._start is None else self._start.child

    @property
    def _process_scope(self) -> trio.CancelScope | None:
        """The running process's scope, which a requested restart cancels."""
        return None if self._start is None else self._start.process_scope

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
        child = self._child
        if child is not None:
            child.signal_group(signal.SIGKILL)

    def request_restart(self, reason: str = RESTART_REQUESTED) -> bool:
        """Stop the process and start it again at once; False when there is none to restart.

        A process that runs (starting or ready) is stopped as for a stop; one waiting out a
        restart delay starts now.
        """
        if self._stop_requested or self._restart_requested:
            return False
        state = self.status.state
        process_scope = self._process_scope
        if state in (InstanceState.STARTING, InstanceState.READY) and process_scope:
            self._restart_requested = True
            self._transition(InstanceState.RESTARTING, reason)
            process_scope.cancel()
            return True
        if state is InstanceState.RESTARTING and self._delay_scope is not None:
            self._restart_requested = True
            self._delay_scope.cancel()
            return True
        return False

    def send_signal(self, sig: int) -> None:
        child = self._child
        if child is not None and child.status is None:
            child.signal_group(sig)

    def take_down(self, reason: str) -> None:
        """A replica peer went down: end this rank's process and hold it (replicas only).

        A rank already held, with no resume pending, has nothing to take down.
        """
        if self._stop_requested or self.status.state.final or not self.spec.replica:
            return
        if self._replica.take_down(reason):
            self._start_scope.cancel()

    def resume(self, delay: float, attempt: int, respec: Callable[[], ServiceSpec]) -> None:
        """The run restarts this held rank's replica: start again after ``delay``."""
        self._replica.resume(delay, attempt, respec)

    def fail_held(self, reason: str, readiness_timeout: bool) -> None:
        """The run gives this held rank's replica up: it has failed for good."""
        self._replica.fail(reason, readiness_timeout)

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
        delay = self.spec.start_delay
        if delay > 0:
            until = time.time() + delay  # what status shows: when its turn comes
            self._transition(InstanceState.WAITING, f"stagger {human_duration(delay)}", until=until)
        resumed = requested = False
        next_delay: float | None
        while True:
            requested = await self._wait_before_start(delay) or requested
            if not (resumed or requested) and not self._may_start():
                return
            if self._started_once:
                self.status.restarts += 1
            self._started_once = True
            status, ready_for = await self._start_once()
            if status is None and self.status.state.final:
                return  # failed for good inside _run_once (the process could not start)
            if self._stop_requested:
                return  # stopped while it exited: run() records the stop, not a restart
            requested, self._restart_requested = self._restart_requested, False
            if requested:  # ddsup restart: at once, not counted
                resumed, next_delay = False, 0.0
            elif self.spec.replica and self.spec.unit.service.restart is not Restart.NO:
                resumed, next_delay = True, await self._hold(status)
            else:
                assert status is not None
                resumed, next_delay = False, self._verdict(status, ready_for)
            if next_delay is None:
                return
            delay = next_delay

    async def _wait_before_start(self, delay: float) -> bool:
        """The stagger or restart delay; True when a requested restart cut it short. A
        replica rank taken down meanwhile ends it early too."""
        self._start_scope = trio.CancelScope()
        with self._start_scope:
            self._delay_scope = self._start_scope
            await trio.sleep(delay)
        self._delay_scope = None
        if self._restart_requested:
            self._restart_requested = False
            return True
        return False

    def _may_start(self) -> bool:
        """Count this start against the start limit; past it, the unit has failed."""
        refused = self._policy.admit(trio.current_time())
        if refused is None:
            self.status.attempt = self._policy.attempt
            return True
        timed_out = self.status.readiness_timeout
        last_exit = None if timed_out else self.status.last_exit
        if timed_out:
            last = f"; last: {self._timeout_reason}"
        elif last_exit is not None:
            last = f"; last exit: {last_exit.describe()}"
        else:
            last = ""
        self._fail(f"start limit hit: {refused}{last}", exit=last_exit, timed_out=timed_out)
        return False

    def _verdict(self, status: ExitStatus, ready_for: float) -> float | None:
        """After the process ended by itself (``_verdict``): the restart delay, or None
        when it is over."""
        ended = Ended(
            status,
            ready_for,
            timed_out=self.status.readiness_timeout,
            timeout_reason=self._timeout_reason,
            unresponsive=self._unresponsive,
        )
        decided = verdict(self.spec, self._policy, ended)
        if decided.completed:
            self.ready.set()
        self._transition(decided.to, decided.reason, decided.exit, timed_out=decided.timed_out)
        return decided.delay

    async def _hold(self, status: ExitStatus | None) -> float | None:
        """A replica rank is down: held until the run resumes it (the delay) or fails it."""
        down_reason = self._replica.down_reason
        timed_out = self.status.readiness_timeout and down_reason is None
        why, exit = held_reason(
            down_reason,
            status,
            timed_out=timed_out,
            timeout_reason=self._timeout_reason,
            unresponsive=self._unresponsive,
        )
        held = self._replica.hold()
        self._transition(InstanceState.RESTARTING, why, exit=exit, timed_out=timed_out)
        order = await self._replica.wait(held)
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
            if self._replica.down_reason is None:
                return await self._run_once()
        self.status.readiness_timeout = False
        return self._stopped_exit, 0.0

    async def _run_once(self) -> tuple[ExitStatus | None, float]:
        """One start of the process (``_one_start``); returns its exit and how long it was
        ready, or None when it could not start (the unit has failed)."""
        assert self._copiers is not None  # an engine may outlive it: the next start never waits
        start = OneStart(self.spec, self.status, self.output, self._copiers, self._hooks)
        self._start = start
        try:
            final = await start.run()
        except SpawnError as err:
            self._fail(str(err))
            return None, 0.0
        finally:
            self._stopped_exit = start.final
        return final, self._ready_for(start.watch)

    def _ready_for(self, watch: Watch) -> float:
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

    # --- what a start reports (its StartHooks) ----------------------------------------
    def _send(self, event: NodeEvent) -> None:
        self._emit(event)  # looked up on each call: a test may replace it

    def _stopping(self) -> bool:
        return self._stop_requested

    def _restarting(self) -> bool:
        return self._restart_requested

    def _became_ready(self, reason: str) -> None:
        self._policy.became_ready()
        self.ready.set()
        self._transition(InstanceState.READY, reason)

    def _unresponsive_now(self, answer: str) -> None:
        if self.status.state is InstanceState.READY:
            self._transition(InstanceState.UNRESPONSIVE, f"liveness probe failed: {answer}")

    def _responsive_again(self, answer: str | None) -> None:
        if self.status.state is InstanceState.UNRESPONSIVE and not self._stop_requested:
            self.status.probe = answer
            self.ready.set()
            self._transition(InstanceState.READY, "liveness probe passed again")

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
        until: float | None = None,
    ) -> None:
        """Move to ``to`` and report it (``_transition``); ``timed_out``: the verdict of a
        readiness timeout; ``until``: when a wait ends."""
        event = transition(
            self.spec,
            self.status,
            self._policy.limit,
            to,
            reason,
            exit,
            timed_out=timed_out,
            until=until,
        )
        if to is not InstanceState.READY and event.from_state is InstanceState.READY:
            self.ready = trio.Event()  # no longer ready: waiters must wait for the next time
        self._emit(event)
