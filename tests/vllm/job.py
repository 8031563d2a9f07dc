"""One ``ddsup start`` of real vLLM lanes in a PID namespace of its own, seen from the test.

:class:`VllmJob` writes the example's units pointed at the tiny model (``job_units``),
starts ``ddsup start`` under the orphan oracle (``support.pid_namespace``), follows its
``events.jsonl``, finds its processes (a lane's API server, its ``VLLM::EngineCore``,
the node agent) by host PID, signals them, and at the end returns what the oracle saw.
Whatever happens, the namespace and everything in it is gone when the job is closed.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psutil

from support.pid_namespace import Namespace, OracleReport, oracle_argv, read_report
from support.runs import read_events, start_argv, start_env
from support.vllm import VllmInstall

from .job_units import write_job

LOAD_LIMIT = 420.0  # seconds for two lanes to load (35 s quiet, 130 s on a busy 2-core host)
POLL = 0.05  # seconds between looks at events.jsonl and /proc (files have no events)

Events = list[dict[str, Any]]


class VllmJob:
    """``ddsup start`` of the tiny model's lanes (see the module docstring)."""

    def __init__(
        self,
        install: VllmInstall,
        workdir: Path,
        *,
        grace: float = 0.0,
        gpus: int = 2,
        vllm_flags: Sequence[str] = (),
        endpoint: dict[str, Any] | None = None,
        worker: Sequence[str] | None = None,
    ) -> None:
        self.install = install
        self.units = workdir / "units"
        self.state = workdir / "state"
        self.output = workdir / "output.log"
        self.report_path = workdir / "oracle.json"
        self.grace = grace  # seconds leftovers may take once ddsup start has exited
        self.gpus = gpus
        self.port = write_job(
            self.units, install, vllm_flags=vllm_flags, endpoint=endpoint, worker=worker
        )
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self.namespace: Namespace | None = None
        self.started_at = 0.0  # time.time() of the start
        self.exited_at: float | None = None  # time.monotonic() when ddsup start was seen gone

    # --- life -------------------------------------------------------------------------
    def __enter__(self) -> VllmJob:
        argv = start_argv(self.units, self.state, "--gpus-per-node", str(self.gpus))
        env = start_env(self.install.environment())
        self.started_at = time.time()
        with self.output.open("wb") as output:
            self._process = subprocess.Popen(
                oracle_argv(self.report_path, self.grace, argv),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        self.namespace = Namespace.of(self._process)
        return self

    def __exit__(self, *exc: object) -> None:
        process = self._process
        if process is not None:
            if process.poll() is None:
                process.kill()  # unshare --kill-child: the namespace goes with it
            process.wait()
        if self.namespace is not None:
            self.namespace.close()

    def _ns(self) -> Namespace:
        assert self.namespace is not None, "the job has not been started"
        return self.namespace

    # --- what the run says --------------------------------------------------------------
    def events(self) -> Events:
        return read_events(self.state, live=True)

    def said(self) -> str:
        """The end of what ``ddsup start`` printed, for failure messages."""
        text = self.output.read_text(errors="replace") if self.output.exists() else ""
        return text[-4000:]

    def wait_for(
        self, predicate: Callable[[Events], bool], what: str, limit: float = 60.0
    ) -> Events:
        """Until the run's events satisfy ``predicate`` (a bounded poll: a file)."""
        deadline = time.monotonic() + limit
        while True:
            events = self.events()
            if predicate(events):
                return events
            if self._ns().start_exited():
                raise AssertionError(f"ddsup start ended while waiting for {what}:\n{self.said()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {limit:g}s; ddsup said:\n{self.said()}")
            time.sleep(POLL)

    def wait_ready(self, *instances: str, after: float = 0.0, limit: float = LOAD_LIMIT) -> float:
        """Until each instance became ready after wall time ``after``; when the last did."""

        def ready_times(events: Events) -> dict[str, float]:
            return {
                e["instance"]: e["time"]
                for e in events
                if e["event"] == "unit" and e.get("to") == "ready" and e["time"] > after
            }

        names = ", ".join(instances)
        events = self.wait_for(
            lambda ev: set(instances) <= set(ready_times(ev)), f"{names} ready", limit
        )
        return max(ready_times(events)[i] for i in instances)

    def transitions(self, instance: str, after: float = 0.0) -> Events:
        return [
            e
            for e in self.events()
            if e["event"] == "unit" and e.get("instance") == instance and e["time"] > after
        ]

    def lane_port(self, instance: str) -> int:
        plan = json.loads((self.state / "plan.json").read_text())
        [port] = [i["port"] for i in plan["instances"] if i["instance"] == instance]
        return int(port)

    def lane_served(self, instance: str) -> float:
        """Requests the lane has finished, by its own ``/metrics``."""
        reply = httpx.get(f"http://127.0.0.1:{self.lane_port(instance)}/metrics", timeout=30)
        total = 0.0
        for line in reply.text.splitlines():
            if line.startswith("vllm:request_success_total{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    # --- its processes ----------------------------------------------------------------
    def lane_process(self, instance: str) -> psutil.Process:
        """The lane's running API server (its latest start's process)."""
        starts = [
            e["pid"] for e in self.events() if e["event"] == "process" and e["instance"] == instance
        ]
        assert starts, f"{instance} never started"
        pid = self._ns().host_pid(starts[-1])  # events name PIDs as the namespace sees them
        assert pid is not None, f"{instance}'s process {starts[-1]} is not running"
        return psutil.Process(pid)

    def engine_process(self, instance: str) -> psutil.Process:
        """The lane's ``VLLM::EngineCore`` (the API server's child, retitled)."""
        server = self.lane_process(instance)
        for child in server.children(recursive=True):
            if _title(child).startswith("VLLM::EngineCore"):
                return child
        raise AssertionError(f"{instance} has no VLLM::EngineCore yet")

    def wait_engine(self, instance: str, limit: float = LOAD_LIMIT) -> psutil.Process:
        """Until the lane's engine runs (vLLM is loading: its API server waits for it)."""
        deadline = time.monotonic() + limit
        while True:
            try:
                return self.engine_process(instance)
            except (AssertionError, psutil.Error):
                if time.monotonic() > deadline or self._ns().start_exited():
                    raise
            time.sleep(POLL)

    def agent_process(self, node: str = "node0") -> psutil.Process:
        """The node agent (``ddsup agent … --node NODE``, a child of ``ddsup start``)."""
        start = psutil.Process(self._ns().start)
        for child in start.children():
            words = _title(child).split()
            at = words.index("--node") + 1 if "--node" in words[:-1] else 0
            if "agent" in words and at and words[at] == node:
                return child
        raise AssertionError(f"no agent for {node} below ddsup start")

    def live_processes(self) -> list[str]:
        """Titles of the namespace's processes now (for figures and messages)."""
        titles = []
        for pid in self._ns().members():
            try:
                titles.append(_title(psutil.Process(pid)))
            except psutil.Error:
                continue
        return titles

    # --- the end ----------------------------------------------------------------------
    def signal_start(self, signum: int) -> float:
        """Signal ``ddsup start`` (through its pidfd); when, on the monotonic clock."""
        self._ns().signal_start(signum)
        return time.monotonic()

    def wait_exit(self, limit: float) -> float:
        """Until ``ddsup start`` has exited (AssertionError after ``limit`` seconds); when."""
        if not self._ns().wait_start(limit):
            raise AssertionError(f"ddsup start still running after {limit:g}s:\n{self.said()}")
        self.exited_at = time.monotonic()
        return self.exited_at

    def verdict(self) -> OracleReport:
        """What the oracle saw once ``ddsup start`` had exited (and its grace passed)."""
        assert self._process is not None
        try:
            self._process.wait(timeout=self.grace + 30.0)
        except subprocess.TimeoutExpired as err:
            raise AssertionError("the orphan oracle did not finish") from err
        return read_report(self.report_path)

    def result(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.state / "result.json").read_text())
        return data


def _title(process: psutil.Process) -> str:
    """A process's command line as ``ps`` shows it (setproctitle rewrites it)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""
