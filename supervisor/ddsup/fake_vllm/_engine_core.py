"""``--spawn-engine``: stand-ins for vLLM's ``EngineCore`` and GPU worker processes.

vLLM's API server starts its engine core as a separate process, and with tensor or
pipeline parallelism the engine starts one worker process per local GPU. Each renames
itself with the ``setproctitle`` package (vLLM 0.34 ``set_process_title``):
``VLLM::EngineCore``, ``VLLM::Worker_TP0`` … (``Worker_PP1_TP3`` with pipeline stages;
the prefix is ``$VLLM_PROCESS_NAME_PREFIX``). On Linux ``setproctitle`` makes room for
the title by overwriting the process's original environment block, so
``/proc/PID/environ`` no longer shows ``DDSUP_INVOCATION_ID`` afterwards unless
``SPT_NOENV`` is set in the environment: a no-orphan layer that trusts the environment
tag alone misses these processes. The engine can outlive its API server: a SIGKILLed or
crashed server cannot tell it to exit.

The fake reproduces that process model with a cheap ``python -c`` child that calls the
real ``setproctitle`` and forks its workers, which retitle too. Options (all tested):

- ``setsid``: the engine starts a session of its own (the default, for no-orphan tests:
  a kill of the server's process group misses it); otherwise it stays in the server's
  process group, as vLLM's does;
- ``outlives_server``: a normal server exit leaves the engine running as well;
- ``clear_env``: the engine starts with a cleared environment (``env -i PATH=$PATH``), so
  not even its first instant carries a ``DDSUP_*`` tag. (``PATH`` stays because
  ``setproctitle`` cannot retitle a process whose environment is empty.)

The server talks to the engine over its stdin pipe: ``stop`` makes it end its workers
and exit 0; end-of-file without ``stop`` (the server died, or detached on purpose) leaves
it alive in ``pause(2)`` until it is killed. Workers read a pipe from the engine and exit
when it closes, as vLLM's workers watch their parent's death pipe.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ddsup._errors import DdsupError

TITLE_PREFIX_ENV = "VLLM_PROCESS_NAME_PREFIX"
DEFAULT_TITLE_PREFIX = "VLLM"

# argv: prefix, worker names… . Only os, signal and setproctitle: it runs with a cleared
# environment too, and a ddsup import would be a needless second of start-up.
_CHILD = """
import os, signal, sys
try:
    from setproctitle import setproctitle
except ImportError:  # as vLLM: titles are cosmetic there
    def setproctitle(title):
        pass
prefix, workers = sys.argv[1], sys.argv[2:]
setproctitle(prefix + "::EngineCore")
children = []
for name in workers:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(write_end)
        for _, other in children:
            os.close(other)
        setproctitle(prefix + "::" + name)
        while os.read(read_end, 64):
            pass
        os._exit(0)
    os.close(read_end)
    children.append((pid, write_end))
seen = b""
while True:
    chunk = os.read(0, 64)
    if not chunk:
        signal.pause()
    seen += chunk
    if b"stop" in seen:
        break
for pid, write_end in children:
    os.close(write_end)
for pid, _ in children:
    os.waitpid(pid, 0)
"""

_STOP_GRACE = 5.0


@dataclass(frozen=True)
class EngineOptions:
    """How the engine process is started; see the module docstring."""

    setsid: bool = True
    outlives_server: bool = False
    clear_env: bool = False
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    nnodes: int = 1
    node_rank: int = 0
    pid_file: Path | None = None


def worker_names(options: EngineOptions) -> list[str]:
    """vLLM's worker process names on this node; none without parallelism.

    With one GPU vLLM runs the model inside the engine process (no worker process);
    otherwise the global ranks ``tp × pp`` are spread evenly over ``nnodes`` nodes, and a
    rank's name carries its pipeline stage and tensor rank when those sizes exceed 1.
    """
    tp, pp = options.tensor_parallel_size, options.pipeline_parallel_size
    world = tp * pp
    if world == 1:
        return []
    local = max(1, world // options.nnodes)
    names = []
    for rank in range(options.node_rank * local, min(world, (options.node_rank + 1) * local)):
        name = "Worker"
        if pp > 1:
            name += f"_PP{rank // tp}"
        if tp > 1:
            name += f"_TP{rank % tp}"
        names.append(name)
    return names


@dataclass(frozen=True)
class EngineCore:
    """The running engine child, and whether a normal exit leaves it running."""

    process: subprocess.Popen[bytes]
    outlives_server: bool

    @property
    def pid(self) -> int:
        return self.process.pid

    def finish(self) -> None:
        """The server's normal exit: stop the engine, or leave it running if it outlives us."""
        if self.outlives_server:
            self.detach()
        else:
            self.stop()

    def detach(self) -> None:
        """Close the pipe without ``stop``: the engine lives on, as after a server crash."""
        assert self.process.stdin is not None
        self.process.stdin.close()

    def stop(self) -> None:
        """Tell the engine to exit and reap it (killing it if it does not listen)."""
        assert self.process.stdin is not None
        try:
            if not self.process.stdin.closed:  # stopped once already: wait() only
                self.process.stdin.write(b"stop\n")
                self.process.stdin.close()
        except BrokenPipeError:
            pass  # it is already gone; wait() below reaps it
        try:
            self.process.wait(timeout=_STOP_GRACE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _cleared_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", os.defpath)}


def spawn_engine_core(options: EngineOptions) -> EngineCore:
    """Start the engine (and its workers); write its PID to ``options.pid_file``."""
    prefix = os.environ.get(TITLE_PREFIX_ENV) or DEFAULT_TITLE_PREFIX
    try:
        process = subprocess.Popen(
            [sys.executable, "-c", _CHILD, prefix, *worker_names(options)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=options.setsid,
            env=_cleared_env() if options.clear_env else None,
        )
    except OSError as err:
        raise DdsupError(f"fake-vllm: cannot start the engine process: {err}") from err
    engine = EngineCore(process, options.outlives_server)
    if options.pid_file is not None:
        try:
            options.pid_file.write_text(f"{engine.pid}\n")
        except OSError as err:
            engine.stop()
            raise DdsupError(
                f"fake-vllm: cannot write --engine-pid-file {options.pid_file}: {err}"
            ) from err
    return engine
