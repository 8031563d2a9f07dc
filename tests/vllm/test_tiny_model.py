"""The tier's own ground: the tiny model is served by real vLLM and answers a chat."""

from __future__ import annotations

import os
import subprocess

import httpx
import trio

from support.ports import free_port
from support.vllm import VllmInstall


async def test_vllm_serves_the_tiny_model(real_vllm: VllmInstall) -> None:
    port = free_port()
    env = {**os.environ, **real_vllm.environment()}
    argv = real_vllm.serve_argv(port, "--served-model-name", "tiny")
    with subprocess.Popen(  # noqa: ASYNC220 (ended below, whatever happens)
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    ) as server:
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

                async def healthy() -> bool:
                    try:
                        return (await client.get("/health")).status_code == 200
                    except httpx.TransportError:
                        return False

                with trio.fail_after(180):
                    while not await healthy():
                        assert server.poll() is None, "vllm serve exited while starting"
                        await trio.sleep(0.5)
                reply = await client.post(
                    "/v1/chat/completions",
                    json={
                        "model": "tiny",
                        "messages": [{"role": "user", "content": "hello"}],
                        "max_tokens": 8,
                    },
                )
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] == 8
        finally:
            os.killpg(server.pid, 9)
            server.wait()
