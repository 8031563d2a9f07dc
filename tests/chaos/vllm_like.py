"""A lane with vLLM's process model, for the no-orphan tests: ``python3 vllm_like.py …``.

vLLM's API server forks an engine process that calls ``setsid`` and names itself with the
``setproctitle`` package (which overwrites ``/proc/PID/environ`` unless ``SPT_NOENV`` is
set); when the API server dies, the engine lives on. This program does that, with the
variations that defeat one no-orphan layer after another:

- ``--clobber``: the engine drops ``SPT_NOENV`` first, so ``setproctitle`` wipes its environment
  (and with it the run's tag) as it would without ddsup's ``SPT_NOENV=1``;
- ``--env-clear``: the engine re-executes itself with nothing of its environment but a
  ``PATH`` (``env -i PATH=…``; with no variable at all setproctitle cannot find argv);
- ``--double-fork``: the engine is a grandchild whose parent exits at once (a daemon):
  it is an orphan from its first instant;
- ``--exit-after S``: the API server exits (status ``--exit-code``) after S seconds,
  leaving the engine behind; with ``--once FILE`` only the start that creates FILE does.

The engine writes its PID to ``--pid-file`` (atomically) once it has retitled itself.
Imports the standard library and ``setproctitle`` only (it runs inside ddsup's units).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ENGINE_TITLE = "VLLM::EngineCore"


def _retitle(title: str, clobber: bool) -> None:
    if clobber:
        os.environ.pop("SPT_NOENV", None)
    import setproctitle  # imported here: SPT_NOENV is read when the module sets up

    setproctitle.setproctitle(title)


def _engine(args: argparse.Namespace) -> None:
    """The engine: retitle, say where it is, sleep until killed."""
    _retitle(ENGINE_TITLE, args.clobber)
    if args.pid_file:
        tmp = f"{args.pid_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as handle:
            handle.write(f"{os.getpid()}\n")
        os.replace(tmp, args.pid_file)
    while True:
        time.sleep(600)


def _start_engine(args: argparse.Namespace) -> None:
    """Fork the engine (setsid; optionally through a parent that exits, with no env)."""
    if os.fork() != 0:
        return
    os.setsid()
    if args.double_fork and os.fork() != 0:
        os._exit(0)  # the intermediate parent: its child is an orphan now
    if args.env_clear:
        argv = [sys.executable, os.path.abspath(__file__), "--engine-only"]
        argv += ["--pid-file", args.pid_file] if args.pid_file else []
        argv += ["--clobber"] if args.clobber else []
        os.execve(sys.executable, argv, {"PATH": os.defpath})  # (setproctitle needs one)
    _engine(args)
    os._exit(0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--pid-file", default="")
    parser.add_argument("--clobber", action="store_true")
    parser.add_argument("--env-clear", action="store_true")
    parser.add_argument("--double-fork", action="store_true")
    parser.add_argument("--exit-after", type=float, default=None)
    parser.add_argument("--exit-code", type=int, default=1)
    parser.add_argument("--once", default="", help="only the start that creates this file exits")
    args = parser.parse_args()
    if args.engine_only:
        _engine(args)
    _start_engine(args)
    _retitle("vllm serve (API server)", clobber=False)  # the tag stays on the server
    exits = args.exit_after is not None
    if exits and args.once:
        try:
            open(args.once, "x").close()
        except FileExistsError:
            exits = False
    if exits:
        time.sleep(args.exit_after)
        return int(args.exit_code)
    while True:
        time.sleep(600)


if __name__ == "__main__":
    sys.exit(main())
