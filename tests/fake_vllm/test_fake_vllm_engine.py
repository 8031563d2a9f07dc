"""fake-vllm's engine processes behave like vLLM's: real processes, real titles, real /proc.

vLLM's ``EngineCore`` and GPU workers rename themselves with ``setproctitle``, which on
Linux overwrites their environment block: ``/proc/PID/environ`` loses the
``DDSUP_INVOCATION_ID`` tag unless ``SPT_NOENV=1`` is in their environment. The tests
read what any observer (ddsup's sweeps, ``ps``) reads: ``/proc``.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import pytest
import trio
from fake_vllm_helpers import Lane, fake_vllm_process

DEADLINE = 10.0


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def _title(pid: int) -> str:
    return _cmdline(pid).split(b"\0")[0].decode(errors="replace")


async def _retitled(pid: int, title: str) -> None:
    """Wait until ``pid`` calls itself ``title``: a change of /proc has no event to await."""
    with trio.fail_after(DEADLINE):
        while _title(pid) != title:  # noqa: ASYNC110 - another process's title: bounded poll
            await trio.sleep(0.01)


async def _children(pid: int, count: int) -> list[psutil.Process]:
    """The ``count`` children of ``pid``, once they exist and carry their titles."""
    with trio.fail_after(DEADLINE):
        while True:  # another process's children: no event, bounded poll
            children = psutil.Process(pid).children()
            if len(children) == count and all("::Worker" in _title(c.pid) for c in children):
                return sorted(children, key=lambda c: _title(c.pid))
            await trio.sleep(0.01)


async def _first_line(lane: Lane) -> bytes:
    assert lane.process.stdout is not None
    line = b""
    with trio.fail_after(DEADLINE):
        while not line.endswith(b"\n"):
            chunk = await lane.process.stdout.receive_some(1)
            assert chunk, f"fake-vllm exited after {line!r}"
            line += chunk
    return line


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _gone(pid: int) -> None:
    with trio.fail_after(DEADLINE):
        while _alive(pid):  # noqa: ASYNC110 - not our child: no event to wait on, poll bounded
            await trio.sleep(0.02)


def _kill_tree(pid: int) -> None:
    """End an engine the test let escape, with its workers."""
    try:
        engine = psutil.Process(pid)
        for process in [*engine.children(recursive=True), engine]:
            process.kill()
    except psutil.NoSuchProcess:
        pass


@asynccontextmanager
async def _engine(
    tmp_path: Path, *args: str, spt_noenv: bool = False, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Lane, int, str]]:
    """A fake-vllm with ``--spawn-engine``; yields the lane, the engine PID, its tag."""
    invocation = f"fake-vllm-test-{uuid.uuid4().hex}"
    env = dict(env or os.environ, DDSUP_INVOCATION_ID=invocation)
    env.pop("SPT_NOENV", None)
    if spt_noenv:
        env["SPT_NOENV"] = "1"
    pid_file = tmp_path / f"engine-{uuid.uuid4().hex}.pid"
    headless = "--headless" in args  # no port to wait for: the banner says it started
    try:
        async with fake_vllm_process(
            "--spawn-engine", "--engine-pid-file", str(pid_file), *args, env=env,
            wait_listening=not headless,
        ) as lane:  # fmt: skip
            if headless:
                assert (await _first_line(lane)).startswith(b"fake-vllm headless")
            yield lane, int(pid_file.read_text()), invocation
    finally:  # the engine outlives its killed server by design: end it here, whatever failed
        with trio.CancelScope(shield=True):
            if pid_file.exists() and pid_file.read_text().strip():
                engine = int(pid_file.read_text())
                _kill_tree(engine)
                await _gone(engine)


async def test_engine_is_retitled_and_its_environ_loses_the_tag(tmp_path: Path) -> None:
    async with _engine(tmp_path) as (lane, engine, invocation):
        await _retitled(engine, "VLLM::EngineCore")
        assert psutil.Process(engine).ppid() == lane.process.pid
        assert f"DDSUP_INVOCATION_ID={invocation}".encode() not in _environ(engine)
        # the server itself keeps its name and its environment
        assert b"fake-vllm" in _cmdline(lane.process.pid)
        assert f"DDSUP_INVOCATION_ID={invocation}".encode() in _environ(lane.process.pid)


async def test_spt_noenv_keeps_the_tag(tmp_path: Path) -> None:
    async with _engine(tmp_path, spt_noenv=True) as (_lane, engine, invocation):
        await _retitled(engine, "VLLM::EngineCore")
        assert f"DDSUP_INVOCATION_ID={invocation}".encode() in _environ(engine).split(b"\0")


async def test_clear_env_drops_the_tag_even_with_spt_noenv(tmp_path: Path) -> None:
    async with _engine(tmp_path, "--engine-clear-env", spt_noenv=True) as (_, engine, _tag):
        await _retitled(engine, "VLLM::EngineCore")
        environ = _environ(engine)
        assert b"DDSUP_" not in environ and b"SPT_NOENV" not in environ


async def test_tensor_parallel_workers_are_retitled_children(tmp_path: Path) -> None:
    async with _engine(tmp_path, "--tensor-parallel-size", "2", spt_noenv=False) as (
        _lane, engine, invocation,
    ):  # fmt: skip
        await _retitled(engine, "VLLM::EngineCore")
        workers = await _children(engine, 2)
        assert [_title(w.pid) for w in workers] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
        for worker in workers:
            assert f"DDSUP_INVOCATION_ID={invocation}".encode() not in _environ(worker.pid)


async def test_pipeline_ranks_of_a_follower_node_and_the_title_prefix(tmp_path: Path) -> None:
    env = dict(os.environ, VLLM_PROCESS_NAME_PREFIX="LANE7")
    args = ("-tp", "2", "-pp", "2", "--nnodes", "2", "--node-rank", "1", "--headless")
    async with _engine(tmp_path, *args, env=env) as (_lane, engine, _tag):
        await _retitled(engine, "LANE7::EngineCore")
        workers = await _children(engine, 2)
        assert [_title(w.pid) for w in workers] == [
            "LANE7::Worker_PP1_TP0",
            "LANE7::Worker_PP1_TP1",
        ]


async def test_setsid_is_the_default_and_can_be_turned_off(tmp_path: Path) -> None:
    async with _engine(tmp_path) as (lane, engine, _tag):
        assert os.getsid(engine) == engine != os.getsid(lane.process.pid)
    async with _engine(tmp_path, "--no-engine-setsid") as (lane, engine, _tag):
        assert os.getpgid(engine) == os.getpgid(lane.process.pid)
        assert os.getsid(engine) == os.getsid(lane.process.pid)


async def test_engine_outlives_a_sigkilled_server_with_its_workers(tmp_path: Path) -> None:
    async with _engine(tmp_path, "-tp", "2") as (lane, engine, _tag):
        workers = await _children(engine, 2)
        lane.process.kill()
        with trio.fail_after(DEADLINE):
            await lane.process.wait()
        with trio.move_on_after(0.3):  # it must not follow its parent: watch a while
            while True:
                assert _alive(engine), "the engine died with its SIGKILLed parent"
                await trio.sleep(0.02)
        assert _title(engine) == "VLLM::EngineCore" and os.getsid(engine) == engine
        assert all(_alive(w.pid) for w in workers)
    for worker in workers:
        await _gone(worker.pid)  # the engine's death pipe ended them


async def test_engine_outlives_a_normal_exit_when_told_to(tmp_path: Path) -> None:
    async with _engine(tmp_path, "--engine-outlives-server") as (lane, engine, _tag):
        await _retitled(engine, "VLLM::EngineCore")
        lane.process.send_signal(signal.SIGTERM)
        with trio.fail_after(DEADLINE):
            assert await lane.process.wait() == 0
        assert _alive(engine) and os.getsid(engine) == engine


async def test_a_normal_exit_ends_the_engine_and_workers(tmp_path: Path) -> None:
    async with _engine(tmp_path, "-tp", "2") as (lane, engine, _tag):
        workers = await _children(engine, 2)
        lane.process.send_signal(signal.SIGTERM)
        with trio.fail_after(DEADLINE):
            assert await lane.process.wait() == 0
        assert not _alive(engine)  # the server stopped and reaped it before exiting
        for worker in workers:
            await _gone(worker.pid)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_headless_serves_no_port_and_ends_on_a_signal(signum: signal.Signals) -> None:
    async with fake_vllm_process("--headless", wait_listening=False) as lane:
        assert await _first_line(lane) == b"fake-vllm headless: no API server\n"
        assert not psutil.Process(lane.process.pid).net_connections(kind="inet")
        lane.process.send_signal(signum)
        with trio.fail_after(DEADLINE):
            assert await lane.process.wait() == 0
