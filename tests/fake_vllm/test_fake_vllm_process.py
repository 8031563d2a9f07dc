"""``ddsup fake-vllm`` as a real process: startup, crashes, signals, the engine child."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import httpx
import psutil
import pytest
import trio
from fake_vllm_helpers import Lane, fake_vllm_process, read_port

from ddsup._cli import main
from ddsup.fake_vllm import CRASH_EXIT_STATUS
from support.ports import free_port

EXIT_DEADLINE = 10.0


async def _wait(lane: Lane) -> int:
    with trio.fail_after(EXIT_DEADLINE):
        return await lane.process.wait()


async def _ok(client: httpx.AsyncClient, lane: Lane) -> None:
    response = await client.post(
        lane.url + "/v1/completions", json={"prompt": "x", "max_tokens": 2}
    )
    assert response.status_code == 200


async def _refused(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return True
    await stream.aclose()
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _wait_gone(pid: int) -> None:
    with trio.fail_after(EXIT_DEADLINE):
        while _alive(pid):  # noqa: ASYNC110 - not our child: no event to wait on, poll bounded
            await trio.sleep(0.02)


async def test_refuses_connections_until_loaded(client: httpx.AsyncClient) -> None:
    """Bound only after the delay: a bound socket would accept handshakes even unserved."""
    port = free_port()
    delay = 1.0
    start = trio.current_time()
    async with fake_vllm_process(
        "--port", str(port), "--startup-delay", str(delay), wait_listening=False
    ) as lane:
        probes = 0
        with trio.move_on_after(delay * 0.8):
            while True:
                assert await _refused(port), "the port accepted during the startup delay"
                probes += 1
                await trio.sleep(0.05)
        assert probes >= 5
        assert await read_port(lane.process) == port
        assert trio.current_time() - start >= delay
        assert (await client.get(f"http://127.0.0.1:{port}/health")).status_code == 200


async def _loading(lane: Lane, delay: str) -> None:
    """Wait for the line that says signals are handled and the model loads."""
    assert lane.process.stderr is not None
    wanted = f"fake-vllm: loading the model for {delay}s\n".encode()
    seen = b""
    with trio.fail_after(EXIT_DEADLINE):
        while wanted not in seen:
            chunk = await lane.process.stderr.receive_some(200)
            assert chunk, seen
            seen += chunk


async def test_sigint_while_loading_fails_the_start() -> None:
    """As vLLM 0.32: interrupted while it loads, the server exits 1 (its engine failed)."""
    async with fake_vllm_process(
        "--startup-delay", "30", wait_listening=False, stderr=True
    ) as lane:
        await _loading(lane, "30")
        lane.process.send_signal(signal.SIGINT)
        assert await _wait(lane) == CRASH_EXIT_STATUS


async def test_sigterm_while_loading_is_ignored_and_the_start_then_fails(tmp_path: Path) -> None:
    """As vLLM 0.32: the API server ignores SIGTERM while it loads, its engine core (in
    the process group) exits, and the server can then never become ready."""
    pid_file = tmp_path / "engine.pid"
    async with fake_vllm_process(
        "--startup-delay", "2", "--spawn-engine", "--engine-pid-file", str(pid_file),
        wait_listening=False, stderr=True,
    ) as lane:  # fmt: skip
        await _loading(lane, "2")
        engine = int(pid_file.read_text())
        lane.process.send_signal(signal.SIGTERM)
        await _wait_gone(engine)
        assert lane.process.returncode is None, "SIGTERM stopped a loading server"
        assert await _wait(lane) == CRASH_EXIT_STATUS


async def test_engine_death_fails_health_and_chat_then_exits_zero(
    client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """As vLLM 0.32 when its EngineCore dies: /health 503, chat 500, then exit 0."""
    pid_file = tmp_path / "engine.pid"
    async with fake_vllm_process("--spawn-engine", "--engine-pid-file", str(pid_file)) as lane:
        await _ok(client, lane)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        with trio.fail_after(EXIT_DEADLINE):
            while (await client.get(lane.url + "/health")).status_code == 200:  # noqa: ASYNC110 - another process's state: bounded poll
                await trio.sleep(0.02)
        chat = await client.post(
            lane.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        )
        assert chat.status_code == 500
        assert chat.json()["error"]["type"] == "InternalServerError"
        assert await _wait(lane) == 0  # the refused request ends it at once


async def test_engine_death_without_requests_exits_within_the_watchdog(tmp_path: Path) -> None:
    pid_file = tmp_path / "engine.pid"
    async with fake_vllm_process("--spawn-engine", "--engine-pid-file", str(pid_file)) as lane:
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        assert await _wait(lane) == 0


async def test_crash_after_requests(client: httpx.AsyncClient) -> None:
    async with fake_vllm_process("--crash-after-requests", "2") as lane:
        await _ok(client, lane)
        assert lane.process.returncode is None
        await _ok(client, lane)
        assert await _wait(lane) == CRASH_EXIT_STATUS != 0
        assert await _refused(lane.port)


async def test_crash_after_seconds() -> None:
    async with fake_vllm_process("--crash-after-seconds", "0.2") as lane:
        assert await _wait(lane) == CRASH_EXIT_STATUS


async def test_ignore_sigterm(client: httpx.AsyncClient) -> None:
    async with fake_vllm_process("--ignore-sigterm") as lane:
        lane.process.send_signal(signal.SIGTERM)
        await _ok(client, lane)  # served after the signal arrived
        assert lane.process.returncode is None
        lane.process.send_signal(signal.SIGKILL)
        assert await _wait(lane) == -signal.SIGKILL


async def test_drain_finishes_the_request_in_flight(client: httpx.AsyncClient) -> None:
    async with fake_vllm_process("--tokens-per-second", "20", "--shutdown-timeout", "10") as lane:
        ask = {"prompt": "x", "max_tokens": 8, "stream": True}
        async with client.stream("POST", lane.url + "/v1/completions", json=ask) as response:
            lines = response.aiter_lines()
            assert (await lines.__anext__()).startswith("data: {")  # in flight now
            lane.process.send_signal(signal.SIGTERM)
            rest = [line async for line in lines if line]
        assert rest[-1] == "data: [DONE]"
        assert len(rest) == 7 + 1  # the other seven tokens, then [DONE]
        assert await _wait(lane) == 0
        assert await _refused(lane.port)


async def test_drain_gives_up_after_the_shutdown_timeout(client: httpx.AsyncClient) -> None:
    async with fake_vllm_process("--tokens-per-second", "2", "--shutdown-timeout", "0.3") as lane:
        ask = {"prompt": "x", "max_tokens": 100, "stream": True}
        async with client.stream("POST", lane.url + "/v1/completions", json=ask) as response:
            lines = response.aiter_lines()
            await lines.__anext__()
            lane.process.send_signal(signal.SIGTERM)
            with pytest.raises(httpx.RemoteProtocolError):
                _ = [line async for line in lines]
        assert await _wait(lane) == 0


async def test_spawn_engine_outlives_sigkill(tmp_path: Path) -> None:
    invocation = f"fake-vllm-test-{uuid.uuid4().hex}"
    env = dict(os.environ, DDSUP_INVOCATION_ID=invocation)
    pid_file = tmp_path / "engine.pid"
    async with fake_vllm_process(
        "--spawn-engine", "--engine-pid-file", str(pid_file), env=env
    ) as lane:
        engine = int(pid_file.read_text())
        try:
            assert os.getsid(engine) == engine != os.getsid(lane.process.pid)  # setsid
            lane.process.kill()
            assert await _wait(lane) == -signal.SIGKILL
            with trio.move_on_after(0.3):  # it must not follow its parent: watch a while
                while True:
                    assert _alive(engine), "the engine died with its SIGKILLed parent"
                    await trio.sleep(0.02)
        finally:
            os.kill(engine, signal.SIGKILL)
        await _wait_gone(engine)


async def test_spawn_engine_ends_with_a_normal_exit(tmp_path: Path) -> None:
    env = dict(os.environ, DDSUP_INVOCATION_ID=f"fake-vllm-test-{uuid.uuid4().hex}")
    pid_file = tmp_path / "engine.pid"
    async with fake_vllm_process(
        "--spawn-engine", "--engine-pid-file", str(pid_file), env=env
    ) as lane:
        engine = int(pid_file.read_text())
        assert _alive(engine)
        lane.process.send_signal(signal.SIGTERM)
        assert await _wait(lane) == 0
        assert not _alive(engine)  # the parent told it to stop and reaped it


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["fake-vllm", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--host", "--port", "--model", "--lane-id", "--max-model-len", "--startup-delay",
        "--ttft", "--tokens-per-second", "--max-num-seqs", "--default-max-tokens",
        "--crash-after-requests", "--crash-after-seconds", "--fail-health",
        "--fail-health-after", "--ignore-sigterm", "--shutdown-timeout", "--spawn-engine",
        "--engine-pid-file", "--engine-setsid", "--engine-outlives-server", "--engine-clear-env",
        "MODEL", "--served-model-name", "--api-key", "--enable-lora", "--lora-modules",
        "--headless", "--tensor-parallel-size", "--pipeline-parallel-size", "--nnodes",
        "--node-rank", "usage: ddsup fake-vllm [MODEL] [options]",
    ):  # fmt: skip
        assert flag in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-num-seqs", "0"], "--max-num-seqs must be at least 1"),
        (["--ttft", "-1"], "--ttft must not be negative"),
        (["--engine-pid-file", "x"], "--engine-pid-file needs --spawn-engine"),
    ],
)
def test_bad_flags_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["fake-vllm", *args]) == 64
    assert message in capsys.readouterr().err
