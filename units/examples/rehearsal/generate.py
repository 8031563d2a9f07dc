"""Send every prompt of a JSONL file to an OpenAI-compatible endpoint; write one result a line.

This is the rehearsal example's worker, and a template for your own: a plain asyncio +
httpx client with nothing ddsup-specific in it. ddsup starts it once the endpoint is
ready and passes ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` (the endpoint's key, or a
placeholder when it needs none); the worker's exit status becomes the job's.

    python generate.py [--prompts prompts.jsonl] [--output results.jsonl] [--concurrency 32]

Input: one JSON object a line, ``{"id": "p0001", "prompt": "..."}``. Output: one line per
prompt, appended, ``{"id", "prompt", "text", "usage", "attempts"}``, plus ``"error"``
(and ``"text": null``) for a prompt that failed for good. The output is append-only, so a
prompt retried by a later run appears again: the last line for an id is the one to use.

Behaviour worth keeping when you adapt it:
- 429 answers are retried after the server's ``Retry-After`` (ddsup's endpoint sheds load
  this way), without limit; 502/503/504 and connection errors are retried with capped
  exponential backoff, ``--max-attempts`` times; any other status fails the prompt at once.
- SIGUSR1 (``#SBATCH --signal=B:USR1@300``, forwarded by ddsup) flushes the output and
  writes ``--checkpoint`` (the ids done so far; temp file + rename), then carries on.
  SIGTERM does the same and exits 143 (SIGINT: 130). A new run skips every id that already
  has a successful line in the output, so resubmitting the job resumes it.
- With ``--requeue``, SIGUSR1 also says the job's time is running out: a SIGTERM after it
  (``stop_before_end``) with prompts left exits ``$DDSUP_REQUEUE_EXIT`` (85), and ddsup
  requeues the job, whose next attempt sends what is left (units/examples/long-job). A
  SIGTERM without it (``ddsup stop``, ``scancel``) still exits 143: a stop, not a requeue.
- Exit 0 when every prompt has a result, 1 when some failed for good, 2 when it cannot
  start (no ``OPENAI_BASE_URL``, a bad prompts file, no model to be learnt).

To adapt: change ``request_body`` (sampling parameters, system prompt, ``/completions``)
and ``result_record`` (what you keep of the answer); the rest is plumbing.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

try:
    import httpx
except ImportError:  # run with the Python that has ddsup (and so httpx), or pip install httpx
    sys.exit(f"generate.py: error: httpx is not installed for {sys.executable}")

RETRY_STATUSES = frozenset({502, 503, 504})
MAX_RETRY_AFTER = 300.0  # never sleep longer than this on one Retry-After


class InputError(Exception):
    """The run cannot start (environment, prompts file, model): exit 2 with the message."""


def request_body(model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
    }


def result_record(item: dict[str, str], answer: dict[str, Any], attempts: int) -> dict[str, Any]:
    text = answer["choices"][0]["message"]["content"]
    return {**item, "text": text, "usage": answer.get("usage"), "attempts": attempts}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--prompts", type=Path, default=Path(__file__).with_name("prompts.jsonl"))
    add("--output", type=Path, help="default: $DDSUP_STATE_DIR/results.jsonl or ./results.jsonl")
    add("--checkpoint", type=Path, help="default: <output>.checkpoint.json")
    add(
        "--model",
        default=os.environ.get("DDSUP_MODEL"),
        help="default: $DDSUP_MODEL or the endpoint's first",
    )
    add("--concurrency", type=int, default=32, help="requests in flight at once (default 32)")
    add("--max-tokens", type=int, default=16, help="per answer (default 16)")
    add("--limit", type=int, help="only the first N prompts")
    add("--max-attempts", type=int, default=6, help="per prompt, 429s not counted (default 6)")
    add("--retry-base", type=float, default=0.5, help="first backoff, doubles to 30 s (0.5)")
    add("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    add("--requeue", action="store_true", help="stopped after SIGUSR1 with work left: exit 85")
    args = parser.parse_args()
    if args.output is None:
        args.output = Path(os.environ.get("DDSUP_STATE_DIR", "."), "results.jsonl")
    if args.checkpoint is None:
        args.checkpoint = args.output.with_name(args.output.name + ".checkpoint.json")
    if min(args.concurrency, args.max_attempts, args.max_tokens, args.limit or 1) < 1:
        parser.error("--concurrency, --max-attempts, --max-tokens and --limit must be >= 1")
    return args


def load_prompts(path: Path, limit: int | None) -> list[dict[str, str]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read prompts: {exc}") from exc
    prompts: list[dict[str, str]] = []
    seen: set[str] = set()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{path}:{lineno}: not JSON: {exc}") from exc
        if not (
            isinstance(item, dict)
            and isinstance(item.get("id"), str)
            and isinstance(item.get("prompt"), str)
        ):
            raise InputError(
                f'{path}:{lineno}: expected {{"id": "...", "prompt": "..."}} (strings)'
            )
        if item["id"] in seen:
            raise InputError(f"{path}:{lineno}: duplicate id {item['id']!r}")
        seen.add(item["id"])
        prompts.append({"id": item["id"], "prompt": item["prompt"]})
    if not prompts:
        raise InputError(f"{path}: no prompts in the file")
    return prompts[:limit]


def load_done(path: Path) -> set[str]:
    """Ids with a successful line in ``path``; cuts off a partial last line (killed mid-write)."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    tail = data[end:]
    if tail.strip():
        try:
            json.loads(tail)
            with path.open("ab") as f:
                f.write(b"\n")  # a complete last record without its newline: keep it
            end = len(data)
        except ValueError:
            print(f"{path}: dropping a truncated last line ({len(tail)} bytes)", file=sys.stderr)
            os.truncate(path, end)
    done: set[str] = set()
    for lineno, line in enumerate(data[:end].splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            print(f"{path}:{lineno}: not JSON, ignored", file=sys.stderr)
            continue
        if isinstance(record, dict) and isinstance(record.get("id"), str):
            (done.discard if record.get("error") else done.add)(record["id"])
    return done


class Results:
    """The output file, the checkpoint and the progress counters."""

    def __init__(self, args: argparse.Namespace, total: int, done: set[str]) -> None:
        self.path, self.checkpoint_path = args.output, args.checkpoint
        self.total, self.done, self.failed = total, done, set[str]()
        self.throttled = 0  # 429 answers seen
        self.started, self.sent = time.monotonic(), 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = self.path.open("a", encoding="utf-8", buffering=1)  # line-buffered

    def add(self, record: dict[str, Any]) -> None:
        self.file.write(json.dumps(record, ensure_ascii=False) + "\n")
        (self.failed if record.get("error") else self.done).add(record["id"])
        self.sent += 1
        finished = len(self.done) + len(self.failed)
        if finished * 10 // self.total != (finished - 1) * 10 // self.total:
            self.report()

    def report(self) -> None:
        finished, rate = len(self.done) + len(self.failed), self.sent / self.elapsed()
        print(
            f"progress: {finished}/{self.total} done, {len(self.failed)} failed, "
            f"{rate:.1f} req/s, {self.throttled} 429s seen",
            file=sys.stderr,
        )

    def elapsed(self) -> float:
        return max(time.monotonic() - self.started, 1e-6)

    def checkpoint(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        state = {"output": str(self.path), "completed": sorted(self.done)}
        state["failed"] = sorted(self.failed)
        temp = self.checkpoint_path.with_name(self.checkpoint_path.name + ".tmp")
        with temp.open("w", encoding="utf-8") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, self.checkpoint_path)
        print(f"checkpoint: {len(self.done)} done in {self.checkpoint_path}", file=sys.stderr)


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        try:  # the HTTP-date form
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def failed(item: dict[str, str], attempts: int, error: str) -> dict[str, Any]:
    return {**item, "text": None, "usage": None, "attempts": attempts, "error": error}


async def generate(
    client: httpx.AsyncClient,
    args: argparse.Namespace,
    model: str,
    item: dict[str, str],
    results: Results,
) -> dict[str, Any]:
    """One prompt's record, after retries; never raises for what the server or network did."""
    body = request_body(model, item["prompt"], args.max_tokens)
    attempts = failures = 0
    while True:
        attempts += 1
        try:
            response = await client.post("chat/completions", json=body)
        except httpx.TransportError as exc:
            error = f"{type(exc).__name__}: {exc}"
        else:
            if response.status_code == 200:
                try:
                    return result_record(item, response.json(), attempts)
                except (ValueError, LookupError, TypeError) as exc:
                    return failed(item, attempts, f"malformed answer: {exc!r}")
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code == 429:  # the server is alive and says when: not a failure
                results.throttled += 1
                wait = retry_after(response)
                await asyncio.sleep(args.retry_base if wait is None else wait)
                continue
            if response.status_code not in RETRY_STATUSES:
                return failed(item, attempts, error)
        failures += 1
        if failures >= args.max_attempts:
            return failed(item, attempts, error)
        await asyncio.sleep(min(args.retry_base * 2 ** (failures - 1), 30.0))


async def first_model(client: httpx.AsyncClient) -> str:
    try:
        response = await client.get("models")
        response.raise_for_status()
        return str(response.json()["data"][0]["id"])
    except (httpx.HTTPError, ValueError, LookupError, TypeError) as exc:
        raise InputError(
            f"cannot learn the model from {client.base_url}models ({exc}); pass --model"
        ) from exc


async def run(args: argparse.Namespace, base_url: str) -> int:
    prompts = load_prompts(args.prompts, args.limit)
    try:
        done = load_done(args.output) & {item["id"] for item in prompts}
        results = Results(args, len(prompts), done)
    except OSError as exc:
        raise InputError(f"{args.output}: cannot use the output file: {exc}") from exc
    todo = [item for item in prompts if item["id"] not in done]
    stop, stopped_by, end_near = asyncio.Event(), [0], asyncio.Event()

    def request_stop(signum: int) -> None:
        stopped_by[0] = stopped_by[0] or 128 + signum
        stop.set()

    def checkpoint() -> None:
        end_near.set()  # the job's time limit is near (#SBATCH --signal=B:USR1@…)
        results.checkpoint()

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, checkpoint)
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, request_stop, signum)
    print(
        f"{len(done)}/{len(prompts)} already in {args.output}; sending {len(todo)}", file=sys.stderr
    )
    key = os.environ.get("OPENAI_API_KEY")
    async with httpx.AsyncClient(
        base_url=base_url.rstrip("/") + "/",
        headers={"Authorization": f"Bearer {key}"} if key else {},
        limits=httpx.Limits(
            max_connections=args.concurrency, max_keepalive_connections=args.concurrency
        ),
        timeout=httpx.Timeout(args.timeout, connect=10.0),
    ) as client:
        model = args.model or (await first_model(client) if todo else "")
        queue = iter(todo)  # shared by the workers: each takes the next prompt when free

        async def worker() -> None:
            for item in queue:
                results.add(await generate(client, args, model, item, results))

        async def ticker() -> None:
            while True:
                await asyncio.sleep(2.0)
                results.report()

        tasks: list[asyncio.Future[Any]] = [
            asyncio.ensure_future(worker()) for _ in range(min(args.concurrency, len(todo)))
        ]
        workers, stopping = asyncio.gather(*tasks), asyncio.ensure_future(stop.wait())
        tasks += [asyncio.ensure_future(ticker()), stopping]
        either: set[asyncio.Future[Any]] = {workers, stopping}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()  # on a stop, requests in flight are dropped: a resume sends them again
        await asyncio.gather(*tasks, return_exceptions=True)
        if not stop.is_set():
            workers.result()  # re-raises a bug in a worker rather than hiding it
    results.checkpoint()
    for item_id in sorted(results.failed):
        print(f"failed for good: {item_id}", file=sys.stderr)
    print(
        f"{'stopped' if stopped_by[0] else 'finished'}: {len(results.done)}/{len(prompts)} done, "
        f"{len(results.failed)} failed, {results.sent} new in {results.elapsed():.1f} s, "
        f"{results.throttled} 429s seen",
        file=sys.stderr,
    )
    left = len(prompts) - len(results.done) - len(results.failed)
    if stopped_by[0] and left and args.requeue and end_near.is_set():
        code = int(os.environ.get("DDSUP_REQUEUE_EXIT", "85"))
        print(f"requeue: {left} prompts left for the next attempt (exit {code})", file=sys.stderr)
        return code
    return stopped_by[0] or (1 if results.failed else 0)


def main() -> int:
    args = parse_args()
    base_url = os.environ.get("OPENAI_BASE_URL")
    try:
        if not base_url:
            raise InputError(
                "OPENAI_BASE_URL is not set: give the endpoint's URL, e.g. "
                "http://127.0.0.1:9000/v1 (ddsup sets it for the worker it starts)"
            )
        return asyncio.run(run(args, base_url))
    except InputError as exc:
        print(f"generate.py: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
