"""The rehearsal worker (``units/examples/rehearsal/generate.py``) as a user runs it.

The worker runs as a real subprocess against a real HTTP server on a loopback port bound
to 0. The server is a small trio + h11 one that lives in the test's own nursery, so a test
decides per request what the "endpoint" answers (429 with Retry-After, 500, a dropped
connection, a request held until the test releases it) and counts what the worker sent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import h11
import pytest
import trio

from support.polls import until

ROOT = Path(__file__).resolve().parents[2]
GENERATE = ROOT / "units" / "examples" / "rehearsal" / "generate.py"
RUN_LIMIT_S = 20.0  # a worker run longer than this is a hang, not a slow machine


@dataclass(frozen=True)
class Reply:
    """What the test endpoint answers; ``Reply(close=True)`` drops the connection instead."""

    status: int = 200
    body: Any = None
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


Policy = Callable[[int, int], Awaitable[Reply]]  # (prompt number, attempt) → reply


def completion(number: int) -> Reply:
    message = {"role": "assistant", "content": f"answer {number}"}
    usage = {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    return Reply(body={"choices": [{"index": 0, "message": message}], "usage": usage})


async def answer_all(number: int, attempt: int) -> Reply:
    return completion(number)


@dataclass
class Endpoint:
    """An OpenAI-ish app: ``/v1/models`` and ``/v1/chat/completions`` by ``policy``."""

    policy: Policy = answer_all
    arrivals: dict[int, list[float]] = field(default_factory=lambda: defaultdict(list))
    models: list[str] = field(default_factory=list)  # the model of every completion request
    keys: set[str] = field(default_factory=set)  # every Authorization header seen

    async def __call__(self, target: str, headers: dict[str, str], body: bytes) -> Reply:
        self.keys.add(headers.get("authorization", ""))
        if target == "/v1/models":
            return Reply(body={"object": "list", "data": [{"id": "test-model"}]})
        if target != "/v1/chat/completions":
            return Reply(404, {"error": {"message": f"no route {target}"}})
        request = json.loads(body)
        number = int(request["messages"][0]["content"].removeprefix("prompt "))
        self.models.append(request["model"])
        self.arrivals[number].append(trio.current_time())
        return await self.policy(number, len(self.arrivals[number]))

    def sent(self) -> dict[int, int]:
        return {number: len(times) for number, times in self.arrivals.items()}


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(65536))


async def _serve_connection(app: Endpoint, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER)
    async with stream:
        try:
            while True:
                request = await _next_event(conn, stream)
                if not isinstance(request, h11.Request):
                    return  # the client closed its keep-alive connection
                body = b""
                while not isinstance(event := await _next_event(conn, stream), h11.EndOfMessage):
                    body += event.data
                headers = {k.decode(): v.decode() for k, v in request.headers}
                reply = await app(request.target.decode(), headers, body)
                if reply.close:
                    return
                payload = json.dumps(reply.body).encode()
                sent = [("content-type", "application/json"), *reply.headers]
                sent.append(("content-length", str(len(payload))))
                await stream.send_all(
                    conn.send(h11.Response(status_code=reply.status, headers=sent))
                )
                await stream.send_all(conn.send(h11.Data(data=payload)))
                await stream.send_all(conn.send(h11.EndOfMessage()))
                conn.start_next_cycle()
        except (trio.BrokenResourceError, h11.ProtocolError):
            return  # the worker went away mid-request (a test killed it)


@asynccontextmanager
async def serving(app: Endpoint) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port for the block; yields the ``/v1`` base URL."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            trio.serve_listeners,
            partial(_serve_connection, app),
            await trio.open_tcp_listeners(0, host="127.0.0.1"),
        )
        port = listeners[0].socket.getsockname()[1]
        yield f"http://127.0.0.1:{port}/v1"
        nursery.cancel_scope.cancel()


def write_prompts(path: Path, count: int) -> Path:
    lines = [json.dumps({"id": f"t{n:03d}", "prompt": f"prompt {n}"}) for n in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def read_output(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class Worker:
    process: trio.Process
    log: Path
    output: Path
    checkpoint: Path

    def log_text(self) -> str:
        return self.log.read_text()

    async def finish(self) -> int:
        with trio.fail_after(RUN_LIMIT_S):
            return await self.process.wait()


def worker_env(base_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DDSUP_"))}
    if base_url is not None:
        env["OPENAI_BASE_URL"] = base_url
    return env | extra


@asynccontextmanager
async def started_worker(
    tmp_path: Path, env: dict[str, str], *args: str, name: str = "run"
) -> AsyncIterator[Worker]:
    """Start the worker; whatever happens in the block, it is killed and reaped at the end."""
    output, log = tmp_path / "results.jsonl", tmp_path / f"{name}.log"
    argv = [sys.executable, str(GENERATE), "--output", str(output), *args]
    with log.open("wb") as log_file:
        process = await trio.lowlevel.open_process(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file
        )
    try:
        yield Worker(process, log, output, tmp_path / "results.jsonl.checkpoint.json")
    finally:
        if process.returncode is None:
            process.kill()
        with trio.CancelScope(shield=True):
            await process.wait()


async def run_worker(
    tmp_path: Path, base_url: str | None, *args: str, name: str = "run", **env: str
) -> Worker:
    async with started_worker(tmp_path, worker_env(base_url, **env), *args, name=name) as worker:
        await worker.finish()
    return worker


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll an external condition (a file another process writes), bounded by 10 s."""
    await until(condition, what, limit=10.0)


def line_count(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


async def test_honours_retry_after_and_writes_every_prompt_once(tmp_path: Path) -> None:
    async def throttle_every_third(number: int, attempt: int) -> Reply:
        if number % 3 == 0 and attempt == 1:
            return Reply(429, {"error": {"type": "overloaded"}}, (("retry-after", "0.1"),))
        return completion(number)

    prompts = write_prompts(tmp_path / "prompts.jsonl", 30)
    app = Endpoint(throttle_every_third)
    async with serving(app) as url:
        worker = await run_worker(tmp_path, url, "--prompts", str(prompts), "--concurrency", "8")

    assert worker.process.returncode == 0, worker.log_text()
    records = read_output(worker.output)
    assert sorted(r["id"] for r in records) == [f"t{n:03d}" for n in range(30)]
    by_id = {r["id"]: r for r in records}
    for number in range(30):
        record, times = by_id[f"t{number:03d}"], app.arrivals[number]
        assert record["text"] == f"answer {number}"
        assert record["usage"]["total_tokens"] == 4
        assert record["attempts"] == len(times) == (2 if number % 3 == 0 else 1)
        if number % 3 == 0:
            assert times[1] - times[0] >= 0.099, f"prompt {number} retried too early"
    assert set(app.models) == {"test-model"}  # learnt from /v1/models
    assert app.keys == {""}  # no OPENAI_API_KEY: no Authorization header
    assert "10 429s seen" in worker.log_text()


async def test_a_prompt_that_fails_for_good_is_recorded_and_exit_is_1(tmp_path: Path) -> None:
    async def broken(number: int, attempt: int) -> Reply:
        if number == 4:
            return Reply(500, {"error": {"message": "model crashed on this prompt"}})
        if number == 8:
            return Reply(close=True)
        if number == 9 and attempt == 1:
            return Reply(503, {"error": {"message": "lane restarting"}})
        return completion(number)

    prompts = write_prompts(tmp_path / "prompts.jsonl", 12)
    app = Endpoint(broken)
    async with serving(app) as url:
        args = ("--prompts", str(prompts), "--max-attempts", "3", "--retry-base", "0.01")
        worker = await run_worker(
            tmp_path, url, *args, OPENAI_API_KEY="sekrit", DDSUP_MODEL="chosen-model"
        )

    assert worker.process.returncode == 1, worker.log_text()
    by_id = {r["id"]: r for r in read_output(worker.output)}
    assert len(by_id) == 12
    assert by_id["t004"]["text"] is None
    assert "HTTP 500" in by_id["t004"]["error"]
    assert by_id["t004"]["attempts"] == 1
    assert by_id["t008"]["text"] is None
    assert by_id["t008"]["error"]
    assert by_id["t008"]["attempts"] == 3
    assert by_id["t009"]["text"] == "answer 9"
    assert by_id["t009"]["attempts"] == 2
    assert app.sent()[4] == 1
    assert app.sent()[8] == 3
    assert all(by_id[f"t{n:03d}"]["text"] == f"answer {n}" for n in (0, 1, 2, 3, 5, 6, 7, 10, 11))
    assert set(app.models) == {"chosen-model"}  # $DDSUP_MODEL, not /v1/models
    assert app.keys == {"Bearer sekrit"}
    assert "failed for good: t004" in worker.log_text()
    assert "failed for good: t008" in worker.log_text()


async def test_resume_sends_no_prompt_twice(tmp_path: Path) -> None:
    failing = {5}

    async def flaky(number: int, attempt: int) -> Reply:
        if number in failing:
            return Reply(500, {"error": {"message": "not today"}})
        return completion(number)

    prompts = write_prompts(tmp_path / "prompts.jsonl", 40)
    app = Endpoint(flaky)
    async with serving(app) as url:
        first = await run_worker(tmp_path, url, "--prompts", str(prompts), "--limit", "20")
        assert first.process.returncode == 1, first.log_text()
        assert line_count(first.output) == 20
        with first.output.open("a") as f:
            f.write('{"id": "t039", "prompt": "prom')  # killed mid-write
        failing.clear()
        second = await run_worker(tmp_path, url, "--prompts", str(prompts), name="second")

    assert second.process.returncode == 0, second.log_text()
    assert "dropping a truncated last line" in second.log_text()
    assert app.sent() == {n: 2 if n == 5 else 1 for n in range(40)}  # a failure is retried
    records = read_output(second.output)  # every line parses: the partial one was cut off
    assert len(records) == 41
    assert {r["id"] for r in records} == {f"t{n:03d}" for n in range(40)}
    assert [r["text"] for r in records if r["id"] == "t005"] == [None, "answer 5"]


@dataclass
class Held:
    """A policy answering prompts below ``first`` at once and holding the rest until
    ``release`` is set; ``all_held`` is set once ``expect`` requests are being held."""

    first: int
    expect: int
    release: trio.Event = field(default_factory=trio.Event)
    all_held: trio.Event = field(default_factory=trio.Event)
    holding: int = 0

    async def __call__(self, number: int, attempt: int) -> Reply:
        if number >= self.first and not self.release.is_set():
            self.holding += 1
            if self.holding == self.expect:
                self.all_held.set()
            await self.release.wait()
        return completion(number)


async def test_sigusr1_checkpoints_and_carries_on(tmp_path: Path) -> None:
    prompts = write_prompts(tmp_path / "prompts.jsonl", 20)
    held = Held(first=5, expect=4)  # concurrency 4: prompts 5-8 held, 0-4 answered
    app = Endpoint(held)
    async with serving(app) as url:
        args = ("--prompts", str(prompts), "--concurrency", "4")
        async with started_worker(tmp_path, worker_env(url), *args) as worker:
            with trio.fail_after(RUN_LIMIT_S):
                await held.all_held.wait()
            await wait_for(lambda: line_count(worker.output) == 5, "5 results")
            worker.process.send_signal(signal.SIGUSR1)
            await wait_for(worker.checkpoint.exists, "the checkpoint file")
            state = json.loads(worker.checkpoint.read_text())
            assert state["completed"] == [f"t{n:03d}" for n in range(5)]
            assert worker.process.returncode is None  # it carries on
            held.release.set()
            assert await worker.finish() == 0, worker.log_text()

    assert sorted(r["id"] for r in read_output(worker.output)) == [f"t{n:03d}" for n in range(20)]
    assert len(json.loads(worker.checkpoint.read_text())["completed"]) == 20
    assert not worker.checkpoint.with_name(worker.checkpoint.name + ".tmp").exists()


async def test_sigterm_checkpoints_exits_143_and_the_next_run_resumes(tmp_path: Path) -> None:
    prompts = write_prompts(tmp_path / "prompts.jsonl", 20)
    held = Held(first=5, expect=4)  # concurrency 4: prompts 5-8 held, 0-4 answered
    app = Endpoint(held)
    async with serving(app) as url:
        args = ("--prompts", str(prompts), "--concurrency", "4")
        async with started_worker(tmp_path, worker_env(url), *args) as worker:
            with trio.fail_after(RUN_LIMIT_S):
                await held.all_held.wait()
            await wait_for(lambda: line_count(worker.output) == 5, "5 results")
            worker.process.send_signal(signal.SIGTERM)
            assert await worker.finish() == 143, worker.log_text()
        state = json.loads(worker.checkpoint.read_text())
        assert state["completed"] == [f"t{n:03d}" for n in range(5)]
        held.release.set()
        again = await run_worker(tmp_path, url, "--prompts", str(prompts), name="again")

    assert again.process.returncode == 0, again.log_text()
    records = read_output(again.output)
    assert sorted(r["id"] for r in records) == [f"t{n:03d}" for n in range(20)]
    # the 4 requests in flight at SIGTERM were sent again; nothing that was done was
    assert app.sent() == {n: 2 if 5 <= n < 9 else 1 for n in range(20)}


@pytest.mark.parametrize(("end_near", "code"), [(True, 85), (False, 143)])
async def test_with_requeue_a_stop_after_sigusr1_asks_for_the_next_attempt(
    tmp_path: Path, end_near: bool, code: int
) -> None:
    """SIGUSR1 (the job's time limit is near), then the stop: requeue, the work is not
    done; a stop without it (``ddsup stop``) is a stop, as without ``--requeue``."""
    prompts = write_prompts(tmp_path / "prompts.jsonl", 20)
    held = Held(first=5, expect=4)
    async with serving(Endpoint(held)) as url:
        args = ("--prompts", str(prompts), "--concurrency", "4", "--requeue")
        env = worker_env(url, DDSUP_REQUEUE_EXIT="85")
        async with started_worker(tmp_path, env, *args) as worker:
            with trio.fail_after(RUN_LIMIT_S):
                await held.all_held.wait()
            await wait_for(lambda: line_count(worker.output) == 5, "5 results")
            if end_near:
                worker.process.send_signal(signal.SIGUSR1)
                await wait_for(worker.checkpoint.exists, "the checkpoint file")
            worker.process.send_signal(signal.SIGTERM)
            assert await worker.finish() == code, worker.log_text()
        held.release.set()

    assert ("requeue: 15 prompts left for the next attempt" in worker.log_text()) == end_near
    state = json.loads(worker.checkpoint.read_text())
    assert state["completed"] == [f"t{n:03d}" for n in range(5)]


async def test_without_openai_base_url_it_says_so_and_exits_2(tmp_path: Path) -> None:
    worker = await run_worker(tmp_path, None)
    assert worker.process.returncode == 2
    assert "OPENAI_BASE_URL is not set" in worker.log_text()
    assert "Traceback" not in worker.log_text()


async def test_a_bad_prompts_file_is_named_with_its_line(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": 7}\n')
    worker = await run_worker(tmp_path, "http://127.0.0.1:9/v1", "--prompts", str(prompts))
    assert worker.process.returncode == 2
    assert f"{prompts}:2: expected" in worker.log_text()
    assert "Traceback" not in worker.log_text()


async def test_against_ddsup_fake_vllm_with_the_bundled_prompts(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", "fake-llama"]
    server = await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert server.stdout is not None
        with trio.fail_after(RUN_LIMIT_S):
            banner = b""
            while b"\n" not in banner:
                chunk = await server.stdout.receive_some(4096)
                assert chunk, "fake-vllm exited before listening"
                banner += chunk
        url = banner.split(b"\n")[0].decode().removeprefix("fake-vllm listening on ")
        env = worker_env(url + "/v1", DDSUP_STATE_DIR=str(tmp_path))
        argv = [sys.executable, str(GENERATE), "--limit", "30"]  # defaults: prompts, output
        with trio.fail_after(RUN_LIMIT_S):
            worker = await trio.run_process(argv, env=env, capture_stderr=True, check=False)
    finally:
        server.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            await server.wait()
        if server.returncode is None:
            server.kill()
            with trio.CancelScope(shield=True):
                await server.wait()

    assert worker.returncode == 0, worker.stderr.decode()
    records = read_output(tmp_path / "results.jsonl")
    assert [r["id"] for r in sorted(records, key=lambda r: r["id"])] == [
        f"p{n:04d}" for n in range(1, 31)
    ]
    assert all(r["text"] and r["usage"]["completion_tokens"] > 0 for r in records)
