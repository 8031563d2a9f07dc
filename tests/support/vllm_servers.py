"""One ``vllm serve`` command line, run as real vLLM or as ``ddsup fake-vllm``.

The contract suite holds the fake to the real engine by running the same tests against
both. Each flavour gets the argv a lane's unit would write; the fake's is what a
rehearsal makes of it (:func:`~ddsup.fake_vllm.fake_vllm_argv`), with its engine process
kept in the server's process group as vLLM's is. Servers start in a session of their
own, so that one ``killpg`` ends the whole tree whatever it left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from ddsup.fake_vllm import fake_vllm_argv
from support.polls import until_sync
from support.ports import free_port
from support.vllm import VllmInstall

SERVED = "tiny"  # --served-model-name of every server here
FAKE_MODEL = "/models/tiny"  # the fake reads no weights
REAL_START = 300.0  # seconds: 24-30 s on a quiet machine, 80 s on a busy one
FAKE_START = 30.0
ENGINE_TITLE = "VLLM::EngineCore"


@dataclass
class Server:
    """A started server: its process (the session leader), its URL and its flavour."""

    flavour: str
    process: subprocess.Popen[bytes]
    url: str
    model: str
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def engine(self) -> psutil.Process | None:
        """The engine core process in the server's tree, once it is titled."""
        try:
            tree = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return None
        for child in tree:
            try:
                if " ".join(child.cmdline()).startswith(ENGINE_TITLE):
                    return child
            except psutil.Error:
                continue
        return None

    def healthy(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self) -> None:
        limit = REAL_START if self.flavour == "real" else FAKE_START

        def ready() -> bool:
            assert self.process.poll() is None, f"{self.flavour} server exited: {self.tail()}"
            return self.healthy()

        until_sync(ready, f"the {self.flavour} server's /health", limit=limit, interval=0.5)

    def wait_exit(self, limit: float) -> int:
        try:
            return self.process.wait(timeout=limit)
        except subprocess.TimeoutExpired as err:
            raise AssertionError(f"the {self.flavour} server still runs after {limit:g}s") from err

    def end(self) -> None:
        """SIGKILL the whole session (vLLM leaves workers behind its API server's exit)."""
        group = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        self.process.wait()
        until_sync(lambda: not _session_alive(group), "the server's session to end", limit=30)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def start_server(
    flavour: str,
    install: VllmInstall | None,
    log: Path,
    *extra: str,
    fake: tuple[str, ...] = (),
) -> Server:
    """Start ``vllm serve`` of the tiny model (``real``) or the fake on its argv."""
    port = free_port()
    if flavour == "real":
        assert install is not None
        argv = install.serve_argv(port, "--served-model-name", SERVED, *extra)
        env = {**os.environ, **install.environment()}
        model = str(install.model)
    else:
        unit_argv = ["vllm", "serve", FAKE_MODEL, "--port", str(port), "--max-model-len", "512",
                     "--dtype", "float32", "--served-model-name", SERVED, *extra]  # fmt: skip
        command = [sys.executable, "-m", "ddsup", "fake-vllm"]
        argv = [*fake_vllm_argv(unit_argv, command), "--spawn-engine", "--no-engine-setsid", *fake]
        env = dict(os.environ)
        model = FAKE_MODEL
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    return Server(flavour, process, f"http://127.0.0.1:{port}", model, log)


def wait_engine(server: Server) -> psutil.Process:
    """The server's engine core, once it has started and titled itself."""
    limit = REAL_START if server.flavour == "real" else FAKE_START

    def found() -> psutil.Process | None:
        assert server.process.poll() is None, f"the server exited: {server.tail()}"
        return server.engine()

    engine = until_sync(found, "the engine core process", limit=limit, interval=0.2)
    assert engine is not None
    return engine


def _session_alive(sid: int) -> bool:
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False
