"""``ddsup start``: the command line becomes :class:`RunOptions`, then the controller runs.

Everything that can be decided before the run begins (units, allocation, plan) is
checked first (:func:`~ddsup.controller._prepare.prepare_run`): a failure there prints each
problem once, whatever the verbosity, and leaves no state directory behind.

Then the agents are launched (``_head_start``) before trio and the controller are
imported: the agents' Python start-up and the rest of ``ddsup start``'s then overlap
instead of adding up. So this module imports only what the head start needs (no trio),
and ``_controller`` (trio, the controller: the channel's messages, the run's state, the
services) by name once the agents are on their way, as ``_cli`` imports a command's
module.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from ddsup._errors import UnitFileError, UsageError
from ddsup.agent import end_process
from ddsup.controller._head_start import HeadStart, head_start
from ddsup.controller._options import RunOptions, Verbosity
from ddsup.controller._prepare import PreparedRun, prepare_run
from ddsup.controller._run_facts import attempt_of
from ddsup.plan import AllocationRequest, LauncherChoice
from ddsup.record import StateDir, begin_attempt
from ddsup.units import parse_duration, printable

CONTROLLER_MODULE = "ddsup.controller._controller"  # trio and the controller: after the launch

DESCRIPTION = """\
Run the units of DIR in the foreground: plan, preflight on every node, lanes
(staggered per node), the endpoint once enough lanes are ready, then the worker. The
run ends when the worker exits (its status is ddsup's), on SIGTERM/SIGINT (128+N), or
when a unit fails for good (70; 75: not ready in time). Bad command lines (64),
invalid unit files (65) and plans that do not fit (69) are reported before anything
starts, and leave no state directory."""


def configure_start(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.add_argument("directory", metavar="DIR", help="directory of unit files (*.toml)")
    parser.add_argument(
        "--launcher",
        choices=[c.value for c in LauncherChoice],
        default=LauncherChoice.AUTO.value,
        help="how node agents start: slurm inside an allocation, else local (default: auto)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        metavar="N",
        help="local: simulate N nodes; Slurm: use the first N (default: 1 local, all in Slurm)",
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int,
        default=None,
        metavar="G",
        help="GPUs of each node instead of detecting them (default: detected)",
    )
    parser.add_argument(
        "--rehearse",
        action="store_true",
        help="run lanes' `vllm serve` as fake-vllm with the same flags; simulate GPUs if none",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="the run's state directory (default: ./ddsup-<job id or timestamp>)",
    )
    parser.add_argument(
        "--srun-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra srun option for the agents' step (repeatable; default: none)",
    )
    parser.add_argument(
        "--agent-timeout",
        default="30s",
        metavar="DURATION",
        help="a node agent silent this long is lost, and its node with it (default 30s)",
    )
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-v", "--verbose", action="store_true", help="print every transition")
    verbosity.add_argument(
        "-q", "--quiet", action="store_true", help="print only errors and the result"
    )


def options_from_args(args: argparse.Namespace) -> RunOptions:
    """The options of ``ddsup start``; UsageError for values no run could use."""
    verbosity = Verbosity.NORMAL
    if args.verbose:
        verbosity = Verbosity.VERBOSE
    elif args.quiet:
        verbosity = Verbosity.QUIET
    try:
        agent_timeout = parse_duration(args.agent_timeout, typical=30.0)
    except ValueError as err:
        raise UsageError(f"--agent-timeout: {err}") from None
    if agent_timeout <= 0:
        raise UsageError("--agent-timeout must be longer than 0s")
    return RunOptions(
        directory=Path(args.directory),
        agent_timeout=agent_timeout,
        allocation=AllocationRequest(
            launcher=LauncherChoice(args.launcher),
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
        ),
        state_dir=args.state_dir,
        srun_args=tuple(args.srun_arg),
        verbosity=verbosity,
        rehearse=args.rehearse,
    )


def run_start(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    try:
        prepared = prepare_run(options)
    except UnitFileError as err:
        for problem in err.problems:
            print(problem, file=sys.stderr)
        count = len(err.problems)
        shown = printable(str(options.directory))
        print(
            f"ddsup: error: {count} problem{'s' * (count != 1)} in the unit files of "
            f"{shown}; nothing was started",
            file=sys.stderr,
        )
        return err.exit_status
    # a requeued or resubmitted job goes on in its state dir, the earlier attempts kept
    state, attempt = begin_attempt(options.state_dir, requeued=attempt_of(os.environ) > 0)
    _put_own_interpreter_first_on_path()
    head = head_start(prepared, state, attempt)  # the agents are on their way
    run_controller: Callable[[PreparedRun, StateDir, HeadStart], int] = importlib.import_module(
        CONTROLLER_MODULE
    ).run_controller
    end_process(run_controller(prepared, state, head))


def _put_own_interpreter_first_on_path() -> None:
    """Units that run ``ddsup …`` or ``python3 …`` get this ddsup and its Python.

    A job script may call ``/path/to/venv/bin/ddsup`` without activating the venv; its
    units then still find the same installation, as they would with the venv activated.
    """
    bin_dir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir
