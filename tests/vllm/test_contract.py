"""The contract fake-vllm is held to: every test runs against real vLLM and the fake.

What ddsup and its users rely on of a lane, checked on both: the routes the endpoint
forwards and their methods, ``/v1/models``, error bodies, the ``/metrics`` names and
labels admission reads, streaming frames and ``[DONE]``, what ``/health``, chat and the
exit status do when the engine core dies, and SIGTERM while the model loads. The real
half needs ``.venv-vllm`` (skipped locally without it, a failure in CI); the fake half
always runs.

One server per flavour serves the module's read-only tests (a real start is 30-80 s);
the engine-death and loading tests start their own, and the module's last test stops
the shared one with SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ddsup.endpoint._metrics_sampler import parse_waiting
from support.polls import until_sync
from support.vllm import VllmInstall
from support.vllm_servers import SERVED, Server, start_server, wait_engine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

FLAVOURS = ["real", "fake"]
CHAT: dict[str, object] = {"model": SERVED, "messages": [{"role": "user", "content": "hello"}]}
EXIT_LIMIT = 60.0  # seconds for a dying server to exit (vLLM: at once, or its 5 s watchdog)
IGNORED_FOR = 10.0  # seconds a loading server outlives SIGTERM (vLLM 0.32: 60 s and more)


def _install(request: pytest.FixtureRequest, flavour: str) -> VllmInstall | None:
    if flavour != "real":
        return None
    found: VllmInstall = request.getfixturevalue("real_vllm")
    return found


@pytest.fixture(scope="module", params=FLAVOURS)
def server(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    kept_sessions: set[int],
) -> Iterator[Server]:
    flavour: str = request.param
    log = tmp_path_factory.mktemp(f"contract-{flavour}") / "server.log"
    started = start_server(flavour, _install(request, flavour), log)
    kept_sessions.add(started.pid)
    try:
        started.wait_ready()
        yield started
    finally:
        started.end()
        kept_sessions.discard(started.pid)


Own = tuple[str, VllmInstall | None, Path]


@pytest.fixture(params=FLAVOURS)
def own(request: pytest.FixtureRequest, tmp_path: Path) -> Own:
    """A flavour, its install, a log: for a test that starts a server of its own."""
    flavour: str = request.param
    return flavour, _install(request, flavour), tmp_path / "server.log"


def _post(server: Server, path: str, body: object) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def _chat(**more: object) -> dict[str, object]:
    return {**CHAT, "max_tokens": 3, "ignore_eos": True, **more}


# -- routes and methods -------------------------------------------------------------------

ANSWERED = [  # (method, path, body): 200 from a generative model's server
    ("GET", "/health", None),
    ("GET", "/ping", None),
    ("POST", "/ping", None),
    ("GET", "/version", None),
    ("GET", "/load", None),
    ("GET", "/v1/models", None),
    ("GET", "/metrics", None),
    ("POST", "/v1/completions", {"model": SERVED, "prompt": "hi", "max_tokens": 2}),
    ("POST", "/v1/chat/completions", _chat()),
    ("POST", "/v1/chat/completions/batch", {**_chat(), "messages": [CHAT["messages"]] * 2}),
    ("POST", "/v1/responses", {"model": SERVED, "input": "hi", "max_output_tokens": 3}),
    ("POST", "/v1/messages", {**CHAT, "max_tokens": 3}),
    ("POST", "/v1/messages/count_tokens", CHAT),
    ("POST", "/tokenize", {"model": SERVED, "prompt": "hi there"}),
    ("POST", "/detokenize", {"model": SERVED, "tokens": [70, 71]}),
]


@pytest.mark.parametrize(
    ("method", "path", "body"), ANSWERED, ids=[f"{m} {p}" for m, p, _ in ANSWERED]
)
def test_the_routes_a_lane_serves(server: Server, method: str, path: str, body: object) -> None:
    answer = httpx.request(method, server.url + path, json=body, timeout=60)
    assert answer.status_code == 200, answer.text


def test_version_and_load_bodies(server: Server) -> None:
    assert isinstance(httpx.get(server.url + "/version").json()["version"], str)
    assert httpx.get(server.url + "/load").json() == {"server_load": 0}


@pytest.mark.parametrize("path", ["/v1/chat/completions/render", "/v1/completions/derender"])
def test_scale_out_routes_are_refused_without_the_flag(server: Server, path: str) -> None:
    answer = _post(server, path, _chat())
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "PermissionDeniedError"


def test_an_unknown_route_and_a_wrong_method(server: Server) -> None:
    missing = httpx.get(server.url + "/no/such/route")
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = httpx.get(server.url + "/v1/chat/completions")
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})
    assert wrong.headers["allow"] == "POST"


# -- /v1/models and error bodies ----------------------------------------------------------


def test_models_lists_the_served_name(server: Server) -> None:
    body = httpx.get(server.url + "/v1/models").json()
    assert body["object"] == "list"
    [card] = body["data"]
    assert {k: card[k] for k in ("id", "object", "owned_by", "root", "parent", "max_model_len")} == {
        "id": SERVED, "object": "model", "owned_by": "vllm", "root": server.model,
        "parent": None, "max_model_len": 512,
    }  # fmt: skip
    assert isinstance(card["created"], int)
    [permission] = card["permission"]
    assert permission["object"] == "model_permission"


ERRORS = [  # (path, body, status, type, param)
    ("/v1/chat/completions", {"model": SERVED}, 400, "Bad Request", "body.messages"),
    ("/v1/chat/completions", [1, 2], 400, "Bad Request", "body"),
    ("/v1/completions", {"model": SERVED, "prompt": 5}, 400, "Bad Request", "body.prompt"),
    ("/v1/completions", {"model": SERVED, "prompt": "x", "stop": 3}, 400, "Bad Request", "body.stop"),
    ("/v1/chat/completions", _chat(n=0), 400, "BadRequestError", None),
    ("/v1/chat/completions", _chat(max_tokens=4096), 400, "BadRequestError", "max_tokens"),
    ("/v1/chat/completions", _chat(stream_options={"include_usage": True}), 400,
     "BadRequestError", "stream_options"),
    ("/v1/chat/completions", _chat(model="nope"), 404, "NotFoundError", "model"),
    ("/v1/messages", CHAT, 400, "Bad Request", "body.max_tokens"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status", "kind", "param"), ERRORS)
def test_error_bodies(
    server: Server, path: str, body: object, status: int, kind: str, param: str | None
) -> None:
    answer = _post(server, path, body)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == (kind, param, status)


def test_bad_json_names_the_body(server: Server) -> None:
    answer = httpx.post(
        server.url + "/v1/chat/completions",
        content=b"{bad",
        headers={"content-type": "application/json"},
    )
    error = answer.json()["error"]
    assert (answer.status_code, error["type"]) == (400, "Bad Request")
    assert error["param"].startswith("body") and "JSON decode error" in error["message"]


def test_an_unknown_model_in_the_messages_api_is_anthropics_shape(server: Server) -> None:
    answer = _post(server, "/v1/messages", {**CHAT, "model": "nope", "max_tokens": 2})
    assert answer.status_code == 404
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "NotFoundError"
    assert body["error"]["message"].startswith("The model `nope` does not exist.")


# -- /metrics -----------------------------------------------------------------------------


def test_metrics_names_and_labels_the_endpoint_reads(server: Server) -> None:
    _post(server, "/v1/chat/completions", _chat()).raise_for_status()
    answer = httpx.get(server.url + "/metrics")
    assert answer.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    for gauge in (
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
    ):
        family = families[gauge]
        assert family.type == "gauge"
        [sample] = family.samples
        assert sample.labels == {"engine": "0", "model_name": SERVED}
    successes = {s.labels["finished_reason"]: s.value for s in families["vllm:request_success"].samples
                 if s.name == "vllm:request_success_total"}  # fmt: skip
    assert {"stop", "length", "abort"} <= set(successes) and successes["length"] >= 1
    for counter in ("vllm:prompt_tokens", "vllm:generation_tokens"):
        assert families[counter].type == "counter"
    assert parse_waiting(answer.content) == 0  # the endpoint's reader, on this text


# -- streaming ----------------------------------------------------------------------------


def _data(body: str) -> list[str]:
    assert body.endswith("\n\n")
    events = body.split("\n\n")[:-1]
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: ") :] for e in events]


def test_chat_stream_frames_end_with_done(server: Server) -> None:
    answer = _post(server, "/v1/chat/completions", _chat(stream=True))
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = _data(answer.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {SERVED} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_stream_usage_comes_last_without_choices(server: Server) -> None:
    answer = _post(server, "/v1/completions", {
        "model": SERVED, "prompt": "hi", "max_tokens": 3, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    })  # fmt: skip
    events = _data(answer.text)
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["object"] == "text_completion" and last["choices"] == []
    assert last["usage"]["completion_tokens"] == 3


def test_messages_stream_is_anthropics_named_events(server: Server) -> None:
    answer = _post(server, "/v1/messages", {**CHAT, "max_tokens": 3, "stream": True})
    names = [block.split("\n")[0] for block in answer.text.split("\n\n") if block]
    assert names[:2] == ["event: message_start", "event: content_block_start"]
    assert names[-3:] == [
        "event: content_block_stop",
        "event: message_delta",
        "event: message_stop",
    ]
    assert "[DONE]" not in answer.text


def test_the_stock_openai_client(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
    assert [m.id for m in client.models.list()] == [SERVED]
    reply = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    assert reply.usage is not None and reply.usage.completion_tokens <= 2
    stream = client.chat.completions.create(
        model=SERVED, messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True
    )
    assert {chunk.object for chunk in stream} == {"chat.completion.chunk"}


# -- the process: engine death, SIGTERM while loading, SIGTERM when serving ---------------


def test_engine_death_fails_health_and_chat_then_the_server_exits_zero(own: Own) -> None:
    """vLLM 0.32: EngineDeadError; /health 503 (or refused), chat 500, exit status 0."""
    lane = start_server(*own)
    try:
        lane.wait_ready()
        engine = wait_engine(lane)
        engine.kill()
        answer = _chat_or_refused(lane)
        assert answer in (500, None), answer
        until_sync(lambda: not lane.healthy(), "/health to fail", limit=EXIT_LIMIT)
        assert lane.wait_exit(EXIT_LIMIT) == 0, lane.tail()
    finally:
        lane.end()


def _chat_or_refused(lane: Server) -> int | None:
    try:
        answer = _post(lane, "/v1/chat/completions", _chat())
    except httpx.TransportError:
        return None
    if answer.status_code == 500:
        assert answer.json()["error"]["type"] == "InternalServerError"
    return answer.status_code


def test_sigterm_while_loading_is_ignored(own: Own) -> None:
    """vLLM's API server ignores SIGTERM while it starts (its engine core, given the
    same signal, shuts down; the server then never becomes ready): a supervisor that
    waits for its exit waits for its kill."""
    lane = start_server(*own, fake=("--startup-delay", "600"))
    try:
        wait_engine(lane)  # the engine core is up: the model is loading
        assert not lane.healthy()
        os.killpg(lane.pid, signal.SIGTERM)  # as ddsup stops a lane: its process group
        with pytest.raises(subprocess.TimeoutExpired):
            lane.process.wait(timeout=IGNORED_FOR)
    finally:
        lane.end()


def test_sigterm_when_serving_exits_zero(server: Server) -> None:
    """The module's last test: it stops the shared server (vLLM's default
    ``--shutdown-timeout`` is 0: in-flight requests are aborted, the exit is prompt)."""
    os.killpg(server.pid, signal.SIGTERM)
    assert server.wait_exit(EXIT_LIMIT) == 0, server.tail()
