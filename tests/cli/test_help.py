"""Every subcommand's help: a description, and for every option its help and its default."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ddsup._cli import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    listed = {choice.dest for choice in sub._choices_actions}  # the internal agent is not
    return {name: p for name, p in sub.choices.items() if name in listed}


SUBCOMMANDS = sorted(_subcommands())


def test_the_internal_agent_is_not_listed() -> None:
    assert "agent" not in SUBCOMMANDS and {"start", "restart", "runs", "prune"} <= set(SUBCOMMANDS)


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_option_says_what_it_does_and_its_default(name: str) -> None:
    parser = _subcommands()[name]
    assert parser.description and len(parser.description) > 20, f"ddsup {name}: no description"
    formatter = parser._get_formatter()
    one_of = {a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions}
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
            continue
        assert action.help, f"ddsup {name} {action.option_strings or action.dest}: no help"
        takes_value = action.option_strings and action.nargs != 0
        if takes_value and not action.required and action not in one_of:
            text = formatter._expand_help(action)
            assert "default" in text, (
                f"ddsup {name} {action.option_strings[0]}: no default in {text!r}"
            )


@pytest.mark.parametrize("name", ["start", "logs", "restart", "prune"])
def test_help_runs_and_shows_the_description(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ddsup", name, "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    description = " ".join(_subcommands()[name].description.split()[:5])
    assert description in " ".join(done.stdout.split())
    assert "(default: " in done.stdout


def test_the_readme_shows_every_option_of_start() -> None:
    """The README's command table is where a newcomer looks first: its ``ddsup start``
    row names each option that changes what a run does (not -h, -v, -q)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in readme.splitlines() if line.startswith("| `ddsup start DIR")]
    shown = set(re.findall(r"--[a-z-]+", row.split("` |")[0]))
    options = {
        s for a in _subcommands()["start"]._actions for s in a.option_strings if s.startswith("--")
    }
    assert options - {"--help", "--verbose", "--quiet"} <= shown, row
