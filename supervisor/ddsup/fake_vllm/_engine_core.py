"""``--spawn-engine``: a stand-in for vLLM's ``EngineCore`` process.

vLLM's API server starts its engine as a separate process that can outlive it: when the
API server is SIGKILLed, the engine (and its GPU memory) stays. ddsup must find and end
such processes by ``DDSUP_INVOCATION_ID``, so the fake makes one on purpose: a cheap
``python -c`` child in its own session (``setsid``), with the parent's environment,
that sleeps in ``read(2)`` on a pipe from the parent. A normal shutdown writes ``stop``
and the child exits 0; if the parent dies without saying so (SIGKILL, a planned crash)
the pipe only reaches EOF and the child lives on in ``pause(2)`` until it is killed.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import DdsupError

_CHILD = """
import os, signal, sys
seen = b""
while True:
    chunk = os.read(0, 64)
    if not chunk:
        break
    seen += chunk
    if b"stop" in seen:
        sys.exit(0)
signal.pause()
"""

_STOP_GRACE = 5.0


@dataclass(frozen=True)
class EngineCore:
    """The running engine child; ``stop()`` is the parent's normal-shutdown message."""

    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        """Tell the engine to exit and reap it (killing it if it does not listen)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(b"stop\n")
            self.process.stdin.close()
        except BrokenPipeError:
            pass  # it is already gone; wait() below reaps it
        try:
            self.process.wait(timeout=_STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def spawn_engine_core(pid_file: Path | None) -> EngineCore:
    """Start the engine child; write its PID to ``pid_file`` when given."""
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "EngineCore_0"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # setsid(): the engine leaves our process group
        )
    except OSError as err:
        raise DdsupError(f"fake-vllm: cannot start the engine process: {err}") from err
    engine = EngineCore(process)
    if pid_file is not None:
        try:
            pid_file.write_text(f"{engine.pid}\n")
        except OSError as err:
            engine.stop()
            raise DdsupError(
                f"fake-vllm: cannot write --engine-pid-file {pid_file}: {err}"
            ) from err
    return engine
