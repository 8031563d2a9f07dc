"""Several endpoint workers: one port, shared admission, their lives tied to the parent's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import trio
from endpoint_fakes import FakeLane, http_client, running_endpoint, wait_until
from prometheus_client.parser import text_string_to_metric_families

from ddsup.endpoint._shared_counts import SharedCounts

ENDPOINT = [sys.executable, "-m", "ddsup", "endpoint", "--bind", "127.0.0.1", "--port", "0"]


def test_counts_written_by_one_process_are_read_by_all() -> None:
    first = SharedCounts.create(rows=3, row=0)
    try:
        assert first.fd is not None
        second = SharedCounts(os.dup(first.fd), rows=3, row=1)
        try:
            first.add(5, 2)
            second.add(5, 1)
            second.add(6, 1)
            second.add(6, -1)
            assert (first.total(5), second.total(5)) == (3, 3)
            assert first.total(6) == 0
        finally:
            second.close()
    finally:
        first.close()


async def test_admission_counts_requests_held_by_every_worker() -> None:
    """Requests held on several connections fill a lane whichever worker took each."""
    lane = FakeLane("a")
    lane.hold = trio.Event()
    held = 6
    answers: list[int] = []

    async def post(client: httpx.AsyncClient, url: str) -> None:
        answers.append((await client.post(url, json={"model": "m"})).status_code)

    async with running_endpoint([lane], max_queue_per_lane=held, workers=2) as ep:
        url = f"{ep.url}/v1/completions"
        clients = [http_client() for _ in range(held + 1)]
        async with trio.open_nursery() as nursery:
            for client in clients[:held]:  # one connection each: they spread over the workers
                nursery.start_soon(post, client, url)
            with trio.fail_after(10):
                await wait_until([lane], lambda: lane.completions == held)
            response = await clients[-1].post(url, json={"model": "m"})
            assert response.status_code == 429
            assert response.json()["error"]["type"] == "overloaded"
            assert ep.table.ready("m")[0].outstanding == held
            lane.hold.set()
        # the nursery waited for every held request's answer: a worker's count drops once
        # it has written an answer, which can be before the client has read it, so the
        # count reaching 0 is no sign that the clients may be closed
        assert answers == [200] * held
        with trio.fail_after(10):
            while ep.table.ready("m")[0].outstanding:  # noqa: ASYNC110
                await trio.sleep(0.01)  # shared-memory counts: no event, bounded poll
        for client in clients:
            await client.aclose()


async def test_one_scrape_counts_the_requests_of_every_worker() -> None:
    lane = FakeLane("a")
    async with running_endpoint([lane], workers=2) as ep:
        clients = [http_client() for _ in range(8)]  # eight connections over two workers
        for client in clients:
            response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 200
        async with http_client() as scraper:
            text = (await scraper.get(f"{ep.url}/metrics")).text
        for client in clients:
            await client.aclose()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    requests = {s.labels["status"]: s.value for s in families["ddsup_endpoint_requests"].samples}
    assert requests == {"200": 8.0}
    workers = {s.labels["pid"] for s in families["ddsup_endpoint_worker_info"].samples}
    assert workers == {str(pid) for pid in ep.pids}
    assert len(workers) == 2


@dataclass
class Process:
    """A ``ddsup endpoint`` process and what it printed."""

    proc: trio.Process
    url: str


@asynccontextmanager
async def endpoint_process(
    lane: FakeLane, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[Process]:
    argv = [*ENDPOINT, "--lane", f"m=http://127.0.0.1:{lane.port}", *extra]
    proc = await trio.lowlevel.open_process(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    try:
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(1)
                assert chunk, "the endpoint exited before printing its URL"
                line += chunk
        yield Process(proc, line.split()[-1].decode())
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()
        assert proc.stderr is not None
        await proc.stderr.aclose()


async def _worker_pids(url: str) -> list[int]:
    async with http_client() as client:
        text = (await client.get(f"{url}/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return sorted(int(s.labels["pid"]) for s in families["ddsup_endpoint_worker_info"].samples)


async def _gone(pids: list[int], within: float = 10.0) -> bool:
    """Whether every PID is gone (or a zombie) within ``within`` seconds (bounded poll)."""
    with trio.move_on_after(within):
        while any(_alive(pid) for pid in pids):  # noqa: ASYNC110
            await trio.sleep(0.05)  # processes of another parent: no event to await
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_workers_serve_one_port_and_stop_with_the_endpoint(tmp_path: Path) -> None:
    lane = FakeLane("a")
    env = {**os.environ, "DDSUP_STATE_DIR": str(tmp_path)}
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        async with endpoint_process(lane, "--workers", "2", env=env) as ep:
            pids = await _worker_pids(ep.url)
            assert len(pids) == 2
            children = {c.pid for c in psutil.Process(ep.proc.pid).children()}
            assert set(pids) <= children
            published = json.loads((tmp_path / "endpoint-workers.json").read_text())
            assert published == {
                "pid": ep.proc.pid,
                "port": int(ep.url.rsplit(":", 1)[1]),
                "workers": pids,
            }
            assert (tmp_path / "endpoint-workers.json").stat().st_mode & 0o777 == 0o600
            async with http_client() as client:
                response = await client.post(f"{ep.url}/v1/completions", json={"model": "m"})
            assert response.status_code == 200
            ep.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await ep.proc.wait() == 0
            assert await _gone(pids, within=0)
            assert not (tmp_path / "endpoint-workers.json").exists()
        nursery.cancel_scope.cancel()


async def test_workers_end_when_their_parent_is_killed() -> None:
    lane = FakeLane("a")
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        async with endpoint_process(lane, "--workers", "2") as ep:
            pids = await _worker_pids(ep.url)
            ep.proc.kill()  # no stop sequence: the workers must notice by themselves
            await ep.proc.wait()
            assert await _gone(pids), f"workers {pids} outlived their parent"
        nursery.cancel_scope.cancel()


async def test_a_worker_that_dies_ends_the_endpoint_with_a_clear_error() -> None:
    lane = FakeLane("a")
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        async with endpoint_process(lane, "--workers", "2") as ep:
            pids = await _worker_pids(ep.url)
            os.kill(pids[0], signal.SIGKILL)
            with trio.fail_after(20):
                assert await ep.proc.wait() == 1
            assert ep.proc.stderr is not None
            stderr = b""
            while chunk := await ep.proc.stderr.receive_some(65536):
                stderr += chunk
            assert b"ended unexpectedly (killed by SIGKILL)" in stderr
            assert f"pid {pids[0]}".encode() in stderr
            assert b"Traceback" not in stderr
            assert await _gone(pids, within=0)
        nursery.cancel_scope.cancel()
