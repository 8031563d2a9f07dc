"""The ``ddsup`` command line: parse arguments, dispatch, map errors to exit statuses.

Each subcommand lives in the module of its concept, which provides two functions:
``configure_<name>(parser)`` adds its arguments and ``run_<name>(args) -> int`` runs it.
Modules are imported lazily so ``ddsup verify`` does not pay for the endpoint's imports.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from ddsup._errors import EXIT_NO_PERMISSION, EXIT_USAGE, DdsupError

# subcommand → (module, help). The order here is the order of ``ddsup --help``.
COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("ddsup.controller._start", "run a deployment in the foreground"),
    "verify": ("ddsup.units", "check unit files without running anything"),
    "plan": ("ddsup.plan", "print the placement of every unit instance"),
    "submit": ("ddsup.jobs", "render a Slurm batch script from the units and submit it"),
    "schema": ("ddsup.units", "print the JSON Schema of unit files"),
    "status": ("ddsup.ops._status_command", "show the state of a run"),
    "stop": ("ddsup.ops._stop", "stop a run (like SIGTERM to ddsup start)"),
    "logs": ("ddsup.ops._logs", "print the log of a unit instance (or all, interleaved)"),
    "restart": ("ddsup.ops._restart", "restart instances of a live run (lanes drained first)"),
    "runs": ("ddsup.ops._runs", "list the runs here and how they ended"),
    "prune": ("ddsup.ops._runs", "remove the state directories of finished runs"),
    "cleanup": ("ddsup.ops._cleanup", "end every process of a run on this node"),
    "report": ("ddsup.ops.report", "write an HTML report of a run (where the GPU time went)"),
    "fake-vllm": ("ddsup.fake_vllm", "serve a vLLM stand-in for rehearsals and tests"),
    "agent": ("ddsup.agent._agent", argparse.SUPPRESS),
    "endpoint": ("ddsup.endpoint", "run the logical endpoint (started by ddsup start)"),
}


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage; ddsup promises 64 (EX_USAGE) like sysexits.h."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """``--version``: the version and where this ddsup came from (``ddsup._install``,
    imported on use: it asks git when ddsup runs from a checkout)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=_VERSION)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        text: str = importlib.import_module("ddsup._install").version_text()
        sys.stdout.write(text + "\n")  # on stdout, as argparse's own version action
        parser.exit(0)


_VERSION = "print the version and where it came from (a checkout and its commit, or a wheel)"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help says its default: as written in it, or appended here.

    Only options that take a value and have one (switches default to off; ``None`` means
    "not given", whose meaning the help text itself must say).
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        plain = default is None or default is False or default is argparse.SUPPRESS
        if "default" in text or plain or action.nargs == 0 or not action.option_strings:
            return text
        return f"{text} (default: none)" if default == [] else f"{text} (default: %(default)s)"


def _function(command: str, prefix: str) -> Callable[..., object]:
    module = importlib.import_module(COMMANDS[command][0])
    return getattr(module, f"{prefix}_{command.replace('-', '_')}")  # type: ignore[no-any-return]


def build_parser(commands: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; ``commands`` (when given and not empty) limits it to those subcommands,
    configured (and their modules imported); None: every one, configured; empty: every one
    listed, none configured (``ddsup --help``, ``--version``, a bad command). Each
    subparser costs start-up time (argparse compiles its patterns): a command builds its own.
    """
    parser = _Parser(
        prog="ddsup",
        description="A process supervisor for GPU inference jobs: runs vLLM lanes, an "
        "OpenAI-compatible endpoint and a client worker from TOML unit files, on Slurm or "
        "on this machine, and leaves no process behind.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name, (_module, help_text) in COMMANDS.items():
        if commands and name not in commands:
            continue
        if help_text == argparse.SUPPRESS:  # internal (agent): not listed
            sub_parser = sub.add_parser(name, formatter_class=HelpFormatter)
        else:  # configure_<name> may give a longer description
            sub_parser = sub.add_parser(
                name,
                help=help_text,
                description=help_text[:1].upper() + help_text[1:] + ".",
                formatter_class=HelpFormatter,
            )
        if commands is None or name in commands:
            _function(name, "configure")(sub_parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ddsup`` script and ``python -m ddsup``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    wanted = [a for a in args_list if a in COMMANDS][:1]
    parser = build_parser(wanted or ())
    args = parser.parse_args(args_list)
    try:
        status = _function(args.command, "run")(args)
    except DdsupError as err:
        print(f"ddsup: error: {err}", file=sys.stderr)
        return err.exit_status
    except PermissionError as err:  # a file another user's run left that slipped past a check
        where = f" on {err.filename!r}" if err.filename else ""
        print(f"ddsup: error: permission denied{where}", file=sys.stderr)
        return EXIT_NO_PERMISSION
    except KeyboardInterrupt:
        return 130
    return status if isinstance(status, int) else 1
