"""``ddsup start``: check the command line, create the state dir, run the controller."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import trio

from ddsup._errors import UsageError
from ddsup.record._state_dir import StateDir, default_state_dir
from ddsup.run._controller import Controller


def configure_start(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="directory of unit files")
    parser.add_argument("--launcher", choices=("auto", "local", "slurm"), default="auto")
    parser.add_argument("--nodes", type=int, default=None, help="local: simulate N nodes")
    parser.add_argument("--gpus-per-node", type=int, default=None, metavar="G")
    parser.add_argument("--state-dir", type=Path, default=None, metavar="PATH")
    parser.add_argument(
        "--srun-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra srun option for the agents' step (repeatable)",
    )
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", help="print every transition")
    verbosity.add_argument("-q", "--quiet", action="store_true", help="print only the result")


def run_start(args: argparse.Namespace) -> int:
    if args.nodes is not None and args.nodes < 1:
        raise UsageError("--nodes must be at least 1")
    if args.gpus_per_node is not None and args.gpus_per_node < 0:
        raise UsageError("--gpus-per-node must be 0 or more")
    state = StateDir((args.state_dir or default_state_dir()).resolve())
    state.create()
    _put_own_interpreter_first_on_path()
    controller = Controller(args, state)
    return trio.run(controller.main, restrict_keyboard_interrupt_to_checkpoints=True)


def _put_own_interpreter_first_on_path() -> None:
    """Units that run ``ddsup …`` or ``python3 …`` get this ddsup and its Python.

    A job script may call ``/path/to/venv/bin/ddsup`` without activating the venv; its
    units then still find the same installation, as they would with the venv activated.
    """
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
