"""End to end through ``ddsup fake-vllm`` lanes: the real lane stand-in, real processes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import trio
from endpoint_fakes import TEST_CONFIG, http_client

from ddsup.endpoint import LaneInfo, LaneTable, open_endpoint


@asynccontextmanager
async def fake_vllm(model: str, *extra: str) -> AsyncIterator[str]:
    """A ``ddsup fake-vllm`` process; yields its base URL and always ends it."""
    argv = [sys.executable, "-m", "ddsup", "fake-vllm", "--port", "0", "--model", model, *extra]
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        line = b""
        with trio.fail_after(20):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(1)
                assert chunk, "fake-vllm exited before printing its URL"
                line += chunk
        yield line.split()[-1].decode()
    finally:
        proc.terminate()
        with trio.move_on_after(10) as scope:
            await proc.wait()
        if scope.cancelled_caught:
            proc.kill()
            await proc.wait()
        await proc.stdout.aclose()


async def test_completions_and_streams_through_fake_vllm(workers: int) -> None:
    async with fake_vllm("m", "--lane-id", "one") as one, fake_vllm("m", "--lane-id", "two") as two:
        table = LaneTable([LaneInfo("one", "m", one), LaneInfo("two", "m", two)])
        config = replace(TEST_CONFIG, workers=workers)
        async with open_endpoint(config, table) as serving, http_client() as client:
            url = f"http://127.0.0.1:{serving.port}/v1"
            body = {"model": "m", "prompt": "hello", "max_tokens": 4}
            lanes = set()
            for _ in range(4):
                response = await client.post(f"{url}/completions", json=body)
                assert response.status_code == 200
                assert response.json()["choices"][0]["text"]
                lanes.add(response.headers.get("x-fake-vllm-lane"))
            assert lanes == {"one", "two"}
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
            chat["max_tokens"] = 5
            events = []
            async with client.stream("POST", f"{url}/chat/completions", json=chat) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
            assert events[-1] == "[DONE]"
            assert all("choices" in json.loads(e) for e in events[:-1])
            models = (await client.get(f"{url}/models")).json()
            assert [m["id"] for m in models["data"]] == ["m"]
            with trio.fail_after(5):
                while any(s.waiting is None for s in table.states()):  # noqa: ASYNC110
                    await trio.sleep(0.02)  # the sampler reads fake-vllm's real /metrics
