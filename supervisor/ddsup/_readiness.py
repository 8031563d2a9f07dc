"""Readiness probes: is a started unit ready to be used?

A probe is tried every ``interval`` until it passes: HTTP (a 200 response; anything else,
including other 2xx, is "not yet"), TCP (the port accepts a connection) or exec (a
command exits 0). Probing is inherently periodic — there is no event for "vLLM has
loaded its weights" — but the period is the user's ``interval``, not a global tick, and
the probe runs only while its unit is starting. ``timeout_start`` is enforced by the
caller (the service), which turns it into :class:`ddsup._errors.ReadinessTimeout`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import httpx
import trio

from ddsup._process import SpawnError, spawn
from ddsup._units import resolve_argv, resolve_specifiers
from ddsup._units._model import ProbeKind, ReadySection

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
        log_path: Path,
    ) -> None:
        self.section = section
        self._env = env
        self._cwd = cwd
        self._log_path = log_path
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
        async with httpx.AsyncClient(timeout=ATTEMPT_TIMEOUT, trust_env=False) as client:
            while True:
                with trio.move_on_after(ATTEMPT_TIMEOUT):
                    if await self._attempt(client):
                        self.last_result = "ok"
                        return
                await trio.sleep(self.section.interval)

    async def _attempt(self, client: httpx.AsyncClient) -> bool:
        kind = self.section.kind
        if kind is ProbeKind.HTTP:
            assert isinstance(self.target, str)
            try:
                response = await client.get(self.target)
            except httpx.HTTPError as err:
                self.last_result = f"{type(err).__name__}"
                return False
            self.last_result = f"HTTP {response.status_code}"
            return response.status_code == 200
        if kind is ProbeKind.TCP:
            assert isinstance(self.target, str)
            host, _, port = self.target.rpartition(":")
            try:
                stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
            except OSError as err:
                self.last_result = os.strerror(err.errno) if err.errno else str(err)
                return False
            await stream.aclose()
            self.last_result = "connected"
            return True
        assert isinstance(self.target, tuple)
        try:
            child = await spawn(self.target, env=self._env, cwd=self._cwd, log_path=self._log_path)
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
