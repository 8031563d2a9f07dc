"""Readiness probes: is a started unit ready to be used?

A probe is tried every ``interval`` until it passes: HTTP (a 200 response; anything else,
including other 2xx, is "not yet"), TCP (the port accepts a connection) or exec (a
command exits 0). Probing is inherently periodic — there is no event for "vLLM has
loaded its weights" — but the period is the user's ``interval``, not a global tick, and
the probe runs only while its unit is starting. ``timeout_start`` is enforced by the
caller (the service), which marks the verdict of a timed-out start (``readiness_timeout``
on its transition, with the probe's last answer); when that fails the unit, the run ends
with :class:`ddsup._errors.ReadinessTimeout` (75).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import trio

from ddsup.channel import connect_tcp
from ddsup.process import LogError, LogFile, SpawnError, spawn
from ddsup.units import ProbeKind, ReadySection, resolve_argv, resolve_specifiers

ATTEMPT_TIMEOUT = 5.0


class Probe:
    """One unit instance's probe with its specifiers resolved."""

    def __init__(
        self,
        section: ReadySection,
        context: Mapping[str, str],
        *,
        env: Mapping[str, str],
        cwd: str,
        log_path: LogFile,
        on_answer: Callable[[str], None] | None = None,
        log_error: LogError | None = None,
    ) -> None:
        self.section = section
        self._on_answer = on_answer  # told each new answer (not each repeat of one)
        self._env = env
        self._cwd = cwd
        self._log_path = log_path
        self._log_error = log_error
        if isinstance(section.target, str):
            self.target: str | tuple[str, ...] = resolve_specifiers(section.target, context)
        else:
            self.target = resolve_argv(section.target, context)
        self.last_result = "not probed yet"

    def describe(self) -> str:
        target = self.target if isinstance(self.target, str) else " ".join(self.target)
        return f"{self.section.kind.value} {target}"

    async def wait_ready(self) -> None:
        """Return once the probe passes; cancel from outside to give up."""
        told = None
        while True:
            with trio.move_on_after(ATTEMPT_TIMEOUT):
                if await self._attempt():
                    self.last_result = "ok"
                    return
            if self._on_answer is not None and self.last_result != told:
                told = self.last_result
                self._on_answer(told)
            await trio.sleep(self.section.interval)

    async def check(self, within: float) -> bool:
        """One attempt that must pass ``within`` seconds (the liveness probes after ready)."""
        with trio.move_on_after(within):
            return await self._attempt()
        self.last_result = f"no answer within {within:g}s"
        return False

    async def _attempt(self) -> bool:
        kind = self.section.kind
        if kind is ProbeKind.HTTP:
            assert isinstance(self.target, str)
            code = await http_status(self.target)
            self.last_result = code if isinstance(code, str) else f"HTTP {code}"
            return code == 200
        if kind is ProbeKind.TCP:
            assert isinstance(self.target, str)
            host, _, port = self.target.rpartition(":")
            try:
                stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
            except OSError as err:
                self.last_result = _why(err)
                return False
            await stream.aclose()
            self.last_result = "connected"
            return True
        assert isinstance(self.target, tuple)
        try:
            child = await spawn(
                self.target,
                env=self._env,
                cwd=self._cwd,
                log_path=self._log_path,
                on_log_error=self._log_error,
            )
        except SpawnError as err:
            self.last_result = str(err)
            return False
        try:
            status = await child.wait()
        finally:
            with trio.CancelScope(shield=True):
                await child.stop(15, 1.0)
        self.last_result = status.describe()
        return status.code == 0


async def http_status(url: str) -> int | str:
    """The status code of ``GET url``, or why there is none.

    Plain HTTP is spoken directly (one request, ``Connection: close``, status line only):
    node agents then need not import an HTTP client library, which halves their start-up
    time. ``https://`` targets go through httpx, imported only when one is used.
    """
    parts = urlsplit(url)
    if parts.scheme == "https":
        import httpx

        try:
            async with httpx.AsyncClient(timeout=ATTEMPT_TIMEOUT, trust_env=False) as client:
                return (await client.get(url)).status_code
        except httpx.HTTPError as err:
            return type(err).__name__
    if parts.scheme != "http" or not parts.hostname:
        return f"unsupported probe URL {url!r}"
    target = parts.path or "/"
    if parts.query:
        target += "?" + parts.query
    host = parts.hostname
    request = (
        f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: ddsup-probe\r\n"
        "Accept: */*\r\nConnection: close\r\n\r\n"
    ).encode("latin-1")
    try:
        sock = await connect_tcp(host, parts.port or 80)
    except OSError as err:
        return _why(err)
    with sock:
        try:
            sent = 0
            while sent < len(request):
                sent += await sock.send(request[sent:])
            head = b""
            while b"\r\n" not in head and len(head) < 4096:
                chunk = await sock.recv(4096)
                if not chunk:
                    break
                head += chunk
        except OSError as err:
            return f"connection error: {os.strerror(err.errno) if err.errno else err}"
    fields = head.split(b"\r\n", 1)[0].split()
    if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        return "not an HTTP response"
    return int(fields[1])


def _why(err: OSError) -> str:
    """``Connection refused``: the reason of a failed connection, as the system says it.

    trio reports "all attempts to connect to … failed" with the attempts' own errors
    grouped in ``__cause__``; the first one's reason is the one a person wants to read.
    """
    grouped = getattr(err.__cause__, "exceptions", ())  # an ExceptionGroup (3.10: backport)
    if not err.errno and grouped:
        first = grouped[0]
        if isinstance(first, OSError) and first.errno:
            return os.strerror(first.errno)
    return os.strerror(err.errno) if err.errno else str(err)
