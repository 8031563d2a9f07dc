"""Faults while real vLLM lanes serve, in one loaded run (loading costs most of the time).

Two lanes of the vllm-llama-8b example serve the tiny model on one machine, and the test
is their client through ddsup's endpoint with the stock ``openai`` client. In order, on
the same run (each phase begins with both lanes ready and ends with them ready again):

1. a burst past the admission limit: 429 with ``Retry-After``; every admitted request
   completes and the lanes stay in the rotation;
2. SIGKILL of a lane's ``VLLM::EngineCore``: vLLM's API server exits 0, and the lane is
   back in the rotation under the example's ``restart = "on-failure"``; no request that
   had not started streaming fails;
3. SIGSTOP of a lane's API server: out of the rotation, killed, restarted, back; no
   request that had not started streaming fails;
4. SIGTERM of ``ddsup start``: exit 143, ``result.json`` says stopped, nothing left in
   the run's PID namespace (the orphan oracle).

A queue the endpoint never saw (requests sent to the lanes directly), read from the lanes'
real ``vllm:num_requests_waiting``, must be answered 429 too: a test of its own, on its
own run.

One test, not four: the suite's guard ends whatever a test leaves running, and a run
shared by several tests would be such a leftover. Each phase says which one failed.
"""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path

import httpx
import pytest

from support.polls import until_sync
from support.vllm import VllmInstall

from .job import VllmJob
from .job_units import model_name
from .load import Answer, Load, Request, ask, burst, client

LANES = ("lane@0", "lane@1")
MAX_QUEUE = 4  # [endpoint] max_queue_per_lane of this run: a burst goes past it
RETRY_AFTER = 2  # seconds: the example's [endpoint] retry_after
GIVE_UP = 3.0  # seconds: the client gives up a request of its own stuck behind a lane's queue
DIRECT = 16  # clients that keep a request each at each lane directly, past the endpoint
QUEUE_LIMIT = 120.0  # seconds the lanes keep their own queue for the endpoint to refuse
BACK_LIMIT = 300.0  # seconds for a lane to be ready again: a restart reloads the model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


def test_faults_while_serving(real_vllm: VllmInstall, tmp_path: Path, figures: list[str]) -> None:
    job = VllmJob(
        real_vllm,
        tmp_path,
        # vLLM runs two sequences at once and queues the rest: a burst builds a queue
        vllm_flags=("--max-num-seqs", "2"),
        endpoint={"max_queue_per_lane": MAX_QUEUE},
    )
    with job:
        ready = job.wait_ready(*LANES, "endpoint")
        figures.append(f"serving run: two lanes ready {ready - job.started_at:.1f}s after start")
        _burst(job, figures)
        _engine_death(job, figures)
        _stopped_api_server(job, figures)
        _sigterm(job, figures)


# --- 1. backpressure ------------------------------------------------------------------


def test_the_lanes_own_queue_is_read_for_admission(
    real_vllm: VllmInstall, tmp_path: Path, figures: list[str]
) -> None:
    job = VllmJob(
        real_vllm,
        tmp_path,
        vllm_flags=("--max-num-seqs", "2"),
        endpoint={"max_queue_per_lane": MAX_QUEUE},
    )
    with job:
        job.wait_ready(*LANES, "endpoint")
        _burst(job, figures)
        _queue_at_the_lanes(job, figures)


def _burst(job: VllmJob, figures: list[str]) -> None:
    """Past the limit the endpoint answers 429 with Retry-After; what it admits completes."""
    began = time.time()
    answers = burst(job.url, model_name(), count=6 * MAX_QUEUE, max_tokens=48)
    refused = [a for a in answers if a.status == 429]
    served = [a for a in answers if a.status == 200]
    assert refused, f"burst: no 429 for {len(answers)} requests at once: {answers}"
    assert len(refused) + len(served) == len(answers), f"burst: other answers: {answers}"
    assert all(a.completed for a in served), f"burst: admitted, not completed: {served}"
    assert all(_retry_after(a) >= RETRY_AFTER for a in refused), f"burst: {refused}"
    _still_serving(job, began, "burst")
    figures.append(
        f"burst of {len(answers)}: {len(served)} × 200 (all complete), {len(refused)} × 429 "
        f"with Retry-After {refused[0].retry_after}; lanes stayed ready"
    )


def _queue_at_the_lanes(job: VllmJob, figures: list[str]) -> None:
    """A queue the endpoint never saw (requests sent to the lanes directly) is read from
    the lanes' /metrics: with at most two requests of its own in flight, far below the
    limit, the endpoint still answers 429.

    Each lane's queue is kept up by ``DIRECT`` clients that send their next request as
    soon as one ends, so it holds for as long as the endpoint takes (a burst sent once
    drains, and a lane that drains first takes the endpoint's requests, rightly).
    vLLM serves in order, so a request the endpoint admits before it has sampled a lane's
    queue waits behind that queue: each is given up after ``GIVE_UP`` seconds (the
    client's hang-up ends it at the endpoint and the lane) and the next one is sent."""
    model, began = model_name(), time.time()
    stop = threading.Event()
    lanes_waited: list[Answer] = []

    def keep_asking(url: str) -> None:
        # vLLM's server (uvicorn on uvloop) closes a kept-alive connection 5 s after its
        # answer by its own timer, and after a stall of its loop (this load stalls it:
        # the liveness blips) the timer runs before the request that came meanwhile is
        # read, which the client sees as a connection error. These clients only keep a
        # queue at the lane, so they retry that as the stock client does by default.
        with client(url, 900.0, retries=2) as api:
            while not stop.is_set():
                lanes_waited.append(ask(api, model, 300))

    with ThreadPoolExecutor(max_workers=2 * DIRECT + 2) as pool:
        direct = [
            pool.submit(keep_asking, _lane_url(job, lane)) for lane in LANES for _ in range(DIRECT)
        ]
        try:
            with client(job.url, GIVE_UP) as api:
                until_sync(
                    lambda: all(_lane_waiting(job, lane) >= MAX_QUEUE for lane in LANES),
                    "a queue of their own at both lanes",
                    limit=300.0,
                )
                queued = time.monotonic()
                asked: list[Future[Answer]] = []
                refused: Answer | None = None
                while refused is None and time.monotonic() < queued + QUEUE_LIMIT:
                    while sum(not f.done() for f in asked) < 2:
                        asked.append(pool.submit(ask, api, model, 8))
                    # the next answer (each comes within GIVE_UP), not a fixed pause
                    wait([f for f in asked if not f.done()], return_when=FIRST_COMPLETED)
                    refused = next(
                        (f.result() for f in asked if f.done() and f.result().status == 429), None
                    )
                refused_after = time.monotonic() - queued
                still_queued = [_lane_waiting(job, lane) for lane in LANES]
                wait(asked)  # each ends within GIVE_UP: closing the client would cut it
        finally:
            stop.set()
        for future in direct:
            future.result()
    answers = [f.result() for f in asked]
    failed = [a for a in lanes_waited if not a.completed]
    assert not failed, f"lanes' queue: direct requests failed: {failed}"
    assert refused is not None, (
        f"lanes' queue: no 429 in {QUEUE_LIMIT:g} s while both lanes had a queue of their "
        f"own (waiting at the end {still_queued}); endpoint answers "
        f"{[a.status or a.error for a in answers]}; failed /metrics samples "
        f"{_endpoint_metric(job, 'ddsup_endpoint_lane_metrics_errors_total')}"
    )
    assert _retry_after(refused) >= RETRY_AFTER, refused
    other = [a for a in answers if a.status not in (200, 429) and not _given_up(a)]
    assert not other, f"lanes' queue: other answers: {other}"
    figures.append(
        f"lanes' own queue (vllm:num_requests_waiting) refused: 429 {refused_after:.1f}s after "
        f"both lanes queued, at the endpoint's request {answers.index(refused) + 1} with ≤ 2 of "
        f"its own in flight; failed /metrics samples "
        f"{_endpoint_metric(job, 'ddsup_endpoint_lane_metrics_errors_total'):g}"
    )
    blips = _still_serving(job, began, "lanes' queue", blips=True)
    figures.append(f"lanes' queue: lanes out of the rotation a moment (liveness): {blips}")


def _lane_waiting(job: VllmJob, lane: str) -> float:
    """The lane's own ``vllm:num_requests_waiting``, read from its /metrics directly."""
    text = httpx.get(f"{_lane_url(job, lane)}/metrics", timeout=30).text
    prefix = "vllm:num_requests_waiting{"
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def _given_up(answer: Answer) -> bool:
    return answer.status is None and "Timeout" in (answer.error or "")


# --- 2. the engine dies -----------------------------------------------------------------


def _engine_death(job: VllmJob, figures: list[str]) -> None:
    lane = "lane@1"
    with Load(job.url, model_name()) as load:
        _serving(load)
        killed = time.time()
        job.engine_process(lane).send_signal(signal.SIGKILL)
        back = job.wait_ready(lane, after=killed, limit=BACK_LIMIT)
        routed = _routed_again(job, lane)
    exits = [e for e in job.events() if e["event"] == "exit" and e["instance"] == lane]
    assert exits and exits[-1]["time"] > killed, f"engine death: {lane} never exited"
    assert exits[-1]["exit"] == {"code": 0}, f"engine death: vLLM exited {exits[-1]['exit']}"
    exited = exits[-1]["time"]
    restarting = _first(job, lane, "restarting", after=killed)
    window = load.since(killed)
    _none_failed_before_streaming(window, "engine death")
    figures.append(
        f"engine death ({lane}'s EngineCore SIGKILLed): vLLM exited 0 after "
        f"{exited - killed:.1f}s, restarting {restarting - exited:.2f}s after that exit; "
        f"ready again after {back - killed:.1f}s, routed again after {routed - killed:.1f}s; "
        f"requests since: {load.summary(window)}"
    )


# --- 3. the API server hangs ----------------------------------------------------------


def _stopped_api_server(job: VllmJob, figures: list[str]) -> None:
    lane = "lane@0"
    with Load(job.url, model_name()) as load:
        _serving(load)
        server = job.lane_process(lane)
        stopped = time.time()
        server.suspend()  # SIGSTOP: the port still accepts, nothing answers
        job.wait_ready(lane, after=stopped, limit=BACK_LIMIT)
        routed = _routed_again(job, lane)
    path = [(e["to"], e["time"]) for e in job.transitions(lane, after=stopped)]
    states = [to for to, _ in path]
    assert states[:2] == ["unresponsive", "restarting"], f"SIGSTOP: {lane} went {states}"
    assert states[-1] == "ready", f"SIGSTOP: {lane} went {states}"
    killed = [e for e in job.events() if e["event"] == "exit" and e["instance"] == lane]
    assert killed[-1]["exit"] == {"signal": "SIGKILL"}, f"SIGSTOP: {killed[-1]}"
    window = load.since(stopped)
    _none_failed_before_streaming(window, "SIGSTOP")
    out, restarting, back = path[0][1], path[1][1], path[-1][1]
    figures.append(
        f"SIGSTOP of {lane}'s API server: out of the rotation after {out - stopped:.1f}s, "
        f"SIGKILLed after {killed[-1]['time'] - stopped:.1f}s, restarting "
        f"{restarting - killed[-1]['time']:.2f}s after that exit; ready again after "
        f"{back - stopped:.1f}s, routed again after {routed - stopped:.1f}s; requests "
        f"since: {load.summary(window)}"
    )


# --- 4. the end -------------------------------------------------------------------------


def _sigterm(job: VllmJob, figures: list[str]) -> None:
    sent = job.signal_start(signal.SIGTERM)
    exited = job.wait_exit(limit=120.0)
    report = job.verdict()
    assert report.returncode == 128 + signal.SIGTERM, f"SIGTERM: exit {report.returncode}"
    assert job.result()["status"] == "stopped", job.result()
    assert report.leftovers == {}, f"SIGTERM while serving left {report.leftovers}"
    figures.append(
        f"SIGTERM of ddsup start while serving: exit {report.returncode} after "
        f"{exited - sent:.1f}s (vLLM's own drain and shutdown), processes left 0"
    )


# --- helpers ----------------------------------------------------------------------------


def _none_failed_before_streaming(requests: list[Request], phase: str) -> None:
    """A request that failed before its stream started could have gone to another lane."""
    early = [r for r in requests if not r.ok and not r.streaming]
    assert not early, f"{phase}: {len(early)} failed before streaming: {early[:3]}"


def _serving(load: Load) -> None:
    """Until the load has had a few answers (each is seconds on a busy 2-core machine)."""
    load.wait_for(lambda done: sum(r.ok for r in done) >= 4, limit=180.0)


def _first(job: VllmJob, lane: str, to: str, after: float) -> float:
    """When ``lane`` first went ``to`` a state after wall time ``after``."""
    return float(next(e["time"] for e in job.transitions(lane, after=after) if e["to"] == to))


def _routed_again(job: VllmJob, lane: str) -> float:
    """Until the endpoint sends requests to ``lane`` again (its own count of finished
    requests grows while the load runs through the endpoint); when."""
    first = job.lane_served(lane)
    deadline = time.monotonic() + 180.0
    while job.lane_served(lane) <= first:
        assert time.monotonic() < deadline, f"{lane} is ready but gets no requests"
        time.sleep(0.2)
    return time.time()


def _still_serving(job: VllmJob, since: float, phase: str, *, blips: bool = False) -> int:
    """Both lanes stayed in the rotation since wall time ``since`` (none left it, none
    restarted), and the endpoint is healthy; the moments out of the rotation are counted.

    ``blips``: a lane may have been out a moment, back without a restart. Requests sent
    to a lane directly, past the endpoint, can starve its API server's /health on two
    CPUs past the liveness probe's timeout, and the probe then does its job."""
    moved = [e for lane in LANES for e in job.transitions(lane, after=since)]
    allowed = ("ready", "unresponsive") if blips else ()
    left = [e for e in moved if e["to"] not in allowed]
    assert not left, f"{phase}: a lane left the rotation or restarted: {left}"
    assert httpx.get(f"{job.url}/health", timeout=30).status_code == 200, phase
    return sum(e["to"] == "unresponsive" for e in moved)


def _retry_after(answer: Answer) -> int:
    assert answer.retry_after is not None, f"429 without Retry-After: {answer}"
    return int(answer.retry_after)


def _lane_url(job: VllmJob, lane: str) -> str:
    return f"http://127.0.0.1:{job.lane_port(lane)}"


def _endpoint_metric(job: VllmJob, name: str) -> float:
    text = httpx.get(f"{job.url}/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))
