"""``ddsup start``: the command line becomes :class:`RunOptions`, then the controller runs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import trio

from ddsup.plan._resolve import AllocationRequest, LauncherChoice
from ddsup.record._state_dir import StateDir, default_state_dir
from ddsup.run._controller import Controller
from ddsup.run._options import RunOptions, Verbosity
from ddsup.run._process_end import end_process


def configure_start(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", help="directory of unit files")
    parser.add_argument(
        "--launcher", choices=[c.value for c in LauncherChoice], default=LauncherChoice.AUTO.value
    )
    parser.add_argument(
        "--nodes", type=int, default=None, help="local: simulate N nodes; Slurm: use the first N"
    )
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


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """The options of ``ddsup start``; UsageError for values no run could use."""
    verbosity = Verbosity.NORMAL
    if args.verbose:
        verbosity = Verbosity.VERBOSE
    elif args.quiet:
        verbosity = Verbosity.QUIET
    return RunOptions(
        directory=Path(args.directory),
        allocation=AllocationRequest(
            launcher=LauncherChoice(args.launcher),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        ),
        state_dir=args.state_dir,
        srun_args=tuple(args.srun_arg),
        verbosity=verbosity,
    )


def run_start(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    state = StateDir((options.state_dir or default_state_dir()).resolve())
    state.create()
    _put_own_interpreter_first_on_path()
    controller = Controller(options, state)
    status = trio.run(controller.main, restrict_keyboard_interrupt_to_checkpoints=True)
    end_process(status)


def _put_own_interpreter_first_on_path() -> None:
    """Units that run ``ddsup …`` or ``python3 …`` get this ddsup and its Python.

    A job script may call ``/path/to/venv/bin/ddsup`` without activating the venv; its
    units then still find the same installation, as they would with the venv activated.
    """
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
