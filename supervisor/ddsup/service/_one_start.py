"""One start of a service's process, and the watchers of its exit, readiness and liveness.

Apart from :class:`~ddsup.service._service.Service` because a start is a concept of its
own with a lifetime shorter than the service's: it spawns the process, copies its output
into the log, races the exit against the readiness probe (and, once ready, keeps probing
liveness), and always reaps what it spawned. What a start decides about the service's
state (ready, unresponsive, ready again) it reports through :class:`StartHooks`, so that
the state machine and its events stay in one place (``_service``) and this module needs
no reference back to it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

import trio

from ddsup.process import ChildProcess, ExitStatus, OutputLog, output_pipe, spawn
from ddsup.record import LivenessFailed, NodeEvent, ProbeAnswered, ProcessExited, ProcessStarted
from ddsup.service._liveness import Liveness, watch_liveness
from ddsup.service._readiness import Probe
from ddsup.service._spec import ServiceSpec, ServiceStatus, Watch
from ddsup.units import UnitType


@dataclass(frozen=True)
class StartHooks:
    """What a start tells (and asks) the service that owns it; all called in its task."""

    emit: Callable[[NodeEvent], None]  # record an event (looked up anew on each call)
    stopping: Callable[[], bool]  # a stop was requested
    restarting: Callable[[], bool]  # a restart was requested (``ddsup restart``)
    became_ready: Callable[[str], None]  # the process became ready (the reason)
    unresponsive: Callable[[str], None]  # a liveness probe failed (its answer)
    responsive: Callable[[str | None], None]  # liveness passes again (the probe's answer)


def stop_wait(spec: ServiceSpec, ready: bool) -> float:
    """Seconds a stop waits after ``kill_signal`` before it SIGKILLs the process group.

    A lane that has not been ready in this start is loading: it is in no rotation and
    has nothing to drain, and vLLM's API server ignores SIGTERM until it serves, so
    ``timeout_stop`` (tens of seconds, for a drain) would only delay the end of the run
    or the restart: it gets ``timeout_stop_loading`` (or ``timeout_stop``, if shorter).
    """
    service = spec.unit.service
    if spec.unit.type is UnitType.LANE and not ready:
        return min(service.timeout_stop, service.timeout_stop_loading)
    return service.timeout_stop


class OneStart:
    """One process of a service, from spawn to reaped; created anew for every start.

    ``child`` is the running process (for signals from outside) and ``process_scope``
    the scope a requested restart cancels; both are None when there is none.
    """

    def __init__(
        self,
        spec: ServiceSpec,
        status: ServiceStatus,
        output: OutputLog,
        copiers: trio.Nursery,
        hooks: StartHooks,
    ) -> None:
        self.spec = spec
        self.status = status
        self.output = output
        self.copiers = copiers
        self.hooks = hooks
        self.watch = Watch()
        self.child: ChildProcess | None = None
        self.process_scope: trio.CancelScope | None = None
        self.final: ExitStatus | None = None  # how the process ended, also when cancelled

    async def run(self) -> ExitStatus:
        """Spawn the process and watch it until it ends; raises ``SpawnError``.

        Its output is copied into the log by a task of its own, which outlives the process
        until the pipe's last writer is gone (at most ``OUTPUT_GRACE`` after the service's
        end).
        """
        spec, hooks = self.spec, self.hooks
        log_offset = await self.output.size()
        read_end, write_end = output_pipe()
        try:
            child = await spawn(  # ddsup:containment: unit= puts it in its unit's cgroup
                spec.argv, env=spec.env, cwd=spec.cwd, output=write_end, unit=spec.instance
            )
        except BaseException:  # SpawnError, or a stop that cancelled us before the fork
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self.child = child
        self.status.pid = child.pid
        # log_offset: where this process's output begins in the log (``logs --since``)
        hooks.emit(
            ProcessStarted(
                instance=spec.instance, node=spec.node, pid=child.pid, log_offset=log_offset
            )
        )
        # an engine may outlive its process: the next start never waits for the copier
        self.output.copy_in(self.copiers, read_end, name=f"output of {spec.instance}")
        try:
            await self._watch_process(child)
        finally:
            with trio.CancelScope(shield=True):
                ready = self.watch.ready_at is not None
                final = await child.stop(spec.unit.service.kill_signal, stop_wait(spec, ready))
            # recorded here, so that a stop (which cancels us) reports the exit too
            self.final = final
            self.status.last_exit = final
            self.status.pid = None
            self.child = None
            if hooks.restarting() and not self.watch.exited:
                hooks.emit(
                    ProcessExited(instance=spec.instance, node=spec.node, pid=child.pid, exit=final)
                )
        return final

    async def _watch_process(self, child: ChildProcess) -> None:
        """Until the process exits (or its scope is cancelled: a readiness timeout, a
        requested restart), with its readiness watched beside it."""
        spec = self.spec
        try:
            async with trio.open_nursery() as nursery:
                self.process_scope = nursery.cancel_scope
                oneshot = spec.unit.type is UnitType.ONESHOT
                probe = None if oneshot else self._make_probe()
                if probe is None and not oneshot:
                    # Ready once started, decided here and now: a separate task could run
                    # after the exit below was seen (the order of one scheduler batch is
                    # random), and report a process that has already ended as ready.
                    self._become_ready("started")
                else:
                    nursery.start_soon(self._watch_readiness, probe, nursery.cancel_scope)
                ended = await child.wait()
                self.watch.exited = True
                # recorded now, as seen: the stop below (the sweep for escaped
                # descendants) and the restart decision come after
                self.hooks.emit(
                    ProcessExited(instance=spec.instance, node=spec.node, pid=child.pid, exit=ended)
                )
                nursery.cancel_scope.cancel()
        finally:
            self.process_scope = None

    async def _watch_readiness(self, probe: Probe | None, process_scope: trio.CancelScope) -> None:
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
            self.watch.timed_out = True
            process_scope.cancel()
            return
        self._become_ready("probe passed")
        liveness = Liveness.of(self.spec.unit)
        if probe is not None and liveness is not None and self.watch.ready_at is not None:
            await self._watch_liveness(probe, liveness)

    async def _watch_liveness(self, probe: Probe, liveness: Liveness) -> None:
        """Until ``liveness.limit`` probes in a row failed: then SIGKILL (see ``_liveness``)."""
        hooks, watch = self.hooks, self.watch

        def failed(failures: int, answer: str) -> None:
            if hooks.stopping() or watch.exited:
                return
            self.status.probe = answer
            instance, node, limit = self.spec.instance, self.spec.node, liveness.limit
            hooks.emit(
                LivenessFailed(
                    instance=instance, node=node, failures=failures, limit=limit, probe=answer
                )
            )
            hooks.unresponsive(answer)

        def passed() -> None:
            hooks.responsive(probe.last_result)

        last = await watch_liveness(probe, liveness, failed=failed, passed=passed)
        watch.unresponsive = (
            f"not answering: {liveness.limit} liveness probes failed in a row "
            f"(last: {last}); killed"
        )
        if self.child is not None:
            self.child.signal_group(signal.SIGKILL)

    def _become_ready(self, reason: str) -> None:
        if self.hooks.stopping() or self.watch.exited:
            return  # stopped while starting, or the probe's pass came after the exit
        self.watch.ready_at = trio.current_time()
        self.hooks.became_ready(reason)

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
            on_answer=self._probe_answered,
        )

    def _probe_answered(self, answer: str) -> None:
        """The probe answered differently than before in this start: say so (status)."""
        self.hooks.emit(
            ProbeAnswered(instance=self.spec.instance, node=self.spec.node, answer=answer)
        )
