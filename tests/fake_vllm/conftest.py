"""Fixtures that serve fake vLLM lanes in-process on the test's nursery, bound to port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import httpx
import pytest
import trio
from fake_vllm_helpers import Crashes, StartLane

from ddsup.fake_vllm import Behaviour, serve_fake_vllm


@pytest.fixture
def crashes() -> Crashes:
    return Crashes([])


@pytest.fixture
def start_lane(nursery: trio.Nursery, crashes: Crashes) -> StartLane:
    """``await start_lane(**behaviour)`` serves a lane in-process; returns its base URL."""

    async def start(**knobs: Any) -> str:
        behaviour = Behaviour(port=0, **knobs)
        port = await nursery.start(partial(serve_fake_vllm, behaviour, crash=crashes))
        return f"http://127.0.0.1:{port}"

    return start


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as http:
        yield http
