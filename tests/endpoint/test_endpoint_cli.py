"""``ddsup endpoint`` as a process, and the pure parts: lane choice, samples, config."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace

import pytest
import trio
from endpoint_fakes import TEST_CONFIG, FakeLane, http_client

from ddsup.endpoint import EndpointConfig, LaneInfo, LaneTable, serve
from ddsup.endpoint._admission import choose
from ddsup.endpoint._metrics_sampler import parse_waiting
from ddsup.units._model import EndpointSection

ENDPOINT = [sys.executable, "-m", "ddsup", "endpoint", "--bind", "127.0.0.1", "--port", "0"]


async def test_cli_serves_a_static_lane_table_and_stops_on_sigterm(workers: int) -> None:
    lane = FakeLane("a", "llama")
    env = {**os.environ, "TEST_ENDPOINT_KEY": "k3y"}
    argv = [
        *ENDPOINT,
        "--workers",
        str(workers),
        "--lane",
        "llama=http://127.0.0.1:{port}",
        "--api-key-env",
        "TEST_ENDPOINT_KEY",
    ]
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        argv[-3] = argv[-3].format(port=lane.port)
        proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdout is not None
            line = b""
            with trio.fail_after(30):
                while not line.endswith(b"\n"):
                    chunk = await proc.stdout.receive_some(1)
                    assert chunk, "the endpoint exited before printing its URL"
                    line += chunk
            assert line.startswith(b"endpoint listening on http://127.0.0.1:")
            url = line.split()[-1].decode()
            async with http_client() as client:
                response = await client.post(
                    f"{url}/v1/completions",
                    json={"model": "llama"},
                    headers={"authorization": "Bearer k3y"},
                )
            assert response.status_code == 200
            assert response.json()["lane"] == "a"
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lane", "nonsense"], b"MODEL=http://HOST:PORT"),
        (["--retry-after", "soon"], b"bad duration"),
        (["--api-key-env", "DDSUP_TEST_SURELY_UNSET"], b"DDSUP_TEST_SURELY_UNSET"),
        (["--retries", "-1"], b"retries"),
        (["--workers", "0"], b'write a count >= 1 or "auto"'),
        (["--workers", "all"], b'write a count >= 1 or "auto"'),
    ],
)
async def test_cli_usage_errors_exit_64(args: list[str], message: bytes) -> None:
    result = await trio.run_process([*ENDPOINT, *args], capture_stderr=True, check=False)
    assert result.returncode == 64
    assert message in result.stderr
    assert b"Traceback" not in result.stderr


def _states(*outstanding: int) -> list[object]:
    table = LaneTable(
        LaneInfo(f"l{i}", "m", f"http://127.0.0.1:{1000 + i}") for i in range(len(outstanding))
    )
    states = table.ready("m")
    for state, n in zip(states, outstanding, strict=True):
        for _ in range(n):
            state.begin()
    return list(states)


def test_choice_prefers_fewest_then_rotates_and_respects_limits() -> None:
    states = _states(3, 1, 1, 5)
    picks = [choose(states, (), limit=8, now=0, stale_after=1, turn=t) for t in range(4)]  # type: ignore[arg-type]
    assert [p.info.instance for p in picks if p] == ["l1", "l2", "l1", "l2"]
    tried = ("l1", "l2")
    pick = choose(states, tried, limit=8, now=0, stale_after=1, turn=0)  # type: ignore[arg-type]
    assert pick is not None
    assert pick.info.instance == "l0"
    assert choose(states, (), limit=1, now=0, stale_after=1, turn=0) is None  # type: ignore[arg-type]


def test_fresh_samples_count_and_stale_ones_do_not() -> None:
    (state,) = _states(2)
    state.record_sample(10, now=100.0)  # type: ignore[attr-defined]
    assert state.queue(100.5, stale_after=1.0) == 10  # type: ignore[attr-defined]
    assert state.queue(101.5, stale_after=1.0) == 2  # type: ignore[attr-defined]
    state.record_sample(None, now=102.0)  # type: ignore[attr-defined]
    assert state.queue(102.0, stale_after=1.0) == 2  # type: ignore[attr-defined]


def test_parse_waiting() -> None:
    text = (
        b"# HELP vllm:num_requests_waiting Requests waiting.\n"
        b"# TYPE vllm:num_requests_waiting gauge\n"
        b'vllm:num_requests_waiting{model_name="a"} 3.0\n'
        b'vllm:num_requests_waiting_by_reason{reason="x"} 50.0\n'
        b'vllm:num_requests_waiting{model_name="b"} 1.5\n'
        b"vllm:num_requests_waiting 2"  # the last line, without a newline
    )
    assert parse_waiting(text) == 7
    assert parse_waiting(b"vllm:num_requests_running 4\n") is None
    assert parse_waiting(b"vllm:num_requests_waiting NaN\n") is None
    assert parse_waiting(b"# vllm:num_requests_waiting 9\nvllm:num_requests_waiting\n") is None


def test_config_from_unit_section_never_shows_the_key() -> None:
    section = EndpointSection(
        port=9100, max_queue_per_lane=7, retries=1, retry_after=2.0, workers=None
    )
    config = EndpointConfig.from_section(section, api_key="secret-value")
    assert (config.port, config.max_queue_per_lane, config.retries) == (9100, 7, 1)
    assert config.workers is None
    assert config.worker_count() == len(os.sched_getaffinity(0))
    assert config.retry_after == 2.0
    assert config.api_key == "secret-value"
    assert "secret-value" not in repr(config)


async def test_serve_follows_its_feeder_and_ends_with_it(
    capsys: pytest.CaptureFixture[str], workers: int
) -> None:
    lane = FakeLane("a")
    fed, finish, served = trio.Event(), trio.Event(), trio.Event()

    async def feeder(table: LaneTable) -> None:
        table.set_ready([lane.info])
        fed.set()
        await finish.wait()  # the controller's feed ends: the endpoint must end too

    async def run_serve() -> None:
        await serve(replace(TEST_CONFIG, workers=workers), table, feeder, paced_gc=False)
        served.set()

    table = LaneTable()
    async with trio.open_nursery() as nursery:
        await nursery.start(lane.serve)
        nursery.start_soon(run_serve)
        with trio.fail_after(30):
            await fed.wait()
            while "listening" not in (out := capsys.readouterr().out):  # noqa: ASYNC110
                await trio.sleep(0.01)  # serve prints once it serves: no event to await
        url = out.split()[-1]
        async with http_client() as client:
            with trio.fail_after(10):  # the fed lane reaches the workers: probe, as ddsup does
                while (await client.get(f"{url}/health")).status_code != 200:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            response = await client.post(f"{url}/v1/completions", json={"model": "m"})
        assert response.json()["lane"] == "a"
        finish.set()
        with trio.fail_after(5):
            await served.wait()
        nursery.cancel_scope.cancel()


async def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = [*ENDPOINT[:-1], str(port), "--lane", "m=http://127.0.0.1:1"]
        result = await trio.run_process(argv, capture_stderr=True, check=False)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}".encode() in result.stderr
    assert b"Traceback" not in result.stderr
