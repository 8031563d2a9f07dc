#!/usr/bin/env python3
"""Write ``packaging/ddsup.bash-completion`` from ddsup's own argument parser.

The completion script is static (no Python runs at <Tab>, which matters on login nodes
with slow shared file systems), so it is generated from ``ddsup._cli.build_parser()``
and committed; ``--check`` fails when the committed file no longer matches the parser
(``.ci/package-check`` runs it), so a new flag cannot be forgotten.

    .venv/bin/python packaging/make-completion.py          # rewrite the file
    .venv/bin/python packaging/make-completion.py --check  # exit 1 if it is stale

What completes: subcommands; each subcommand's flags; the values of flags with choices
(``--launcher auto|local|slurm``); directories for unit directories and state
directories; files for ``verify`` and path-valued flags; the instance and unit names of
a run for ``UNIT`` arguments (``ddsup logs lane@<Tab>``), read by the shell itself from
the ``plan.json`` of the run that ``--state-dir`` names, else of the newest ``ddsup-*``
here. Hidden subcommands (``agent``) and hidden flags are left out.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

OUTPUT = Path(__file__).with_name("ddsup.bash-completion")


@dataclass(frozen=True)
class Command:
    """One subcommand as the completion script needs it."""

    name: str
    flags: tuple[str, ...]  # every option string, sorted
    values: dict[str, str]  # option taking a value → compgen arguments for its value
    positional: str  # compgen arguments for positional words ("" = nothing to offer)


INSTANCES = '-W "$(_ddsup_instances)"'

# Instance names (and their units) of a run, from its plan.json, in plain bash + sed: the
# run --state-dir names on the command line, else the newest ./ddsup-* with a run.json.
INSTANCES_FUNCTION = r"""_ddsup_instances() {
    local dir='' d i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --state-dir) dir=${COMP_WORDS[i+1]} ;;
            --state-dir=*) dir=${COMP_WORDS[i]#--state-dir=} ;;
        esac
    done
    if [[ -z $dir ]]; then
        for d in ddsup-*/; do
            [[ -f ${d}run.json ]] || continue
            [[ -z $dir || ${d}run.json -nt ${dir}/run.json ]] && dir=${d%/}
        done
    fi
    [[ -f $dir/plan.json ]] || return 0
    sed -n 's/^ *"instance": "\([^"]*\)",\{0,1\}$/\1/p' "$dir/plan.json" |
        while read -r name; do
            echo "$name"
            [[ $name == *@* ]] && echo "${name%%@*}"
        done | sort -u
}"""


def _compgen_for(action: argparse.Action) -> str:
    """What to offer for this action's value: a word list, directories, files or nothing."""
    if action.metavar == "UNIT":
        return INSTANCES
    if action.choices:
        return "-W '" + " ".join(str(c) for c in action.choices) + "'"
    hint = f"{action.dest} {action.metavar or ''}".lower()
    if "dir|file" in hint:
        return "-f"
    if "dir" in hint:
        return "-d"
    if "file" in hint or "path" in hint:
        return "-f"
    return ""


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(
        action, argparse._HelpAction | argparse._VersionAction
    )


def _command(name: str, parser: argparse.ArgumentParser) -> Command:
    flags: list[str] = []
    values: dict[str, str] = {}
    positional = ""
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue  # internal flags (ddsup start passes them) are not offered
        if not action.option_strings:
            positional = _compgen_for(action)
            continue
        flags.extend(action.option_strings)
        if _takes_value(action):
            for option in action.option_strings:
                values[option] = _compgen_for(action)
    return Command(name, tuple(sorted(flags)), values, positional)


def commands() -> tuple[list[str], list[Command]]:
    """Top-level options and the visible subcommands, in ``ddsup --help`` order."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "supervisor"))
    from ddsup._cli import build_parser

    parser = build_parser()
    top = sorted(o for a in parser._actions for o in a.option_strings)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    visible = [choice.dest for choice in sub._choices_actions]  # hidden ones have none
    return top, [_command(name, sub.choices[name]) for name in visible]


def _case_values(command: Command) -> list[str]:
    by_compgen: dict[str, list[str]] = {}
    for option, compgen in command.values.items():
        by_compgen.setdefault(compgen, []).append(option)
    lines = []
    for compgen, options in sorted(by_compgen.items()):
        pattern = "|".join(sorted(options))
        if compgen:
            lines.append(f"                {pattern}) _ddsup_reply {compgen}; return ;;")
        else:
            lines.append(f"                {pattern}) return ;;  # a value: nothing to offer")
    return lines


def _case_command(command: Command) -> list[str]:
    lines = [f"        {command.name})"]
    if command.values:
        lines += ['            case "$prev" in', *_case_values(command), "            esac"]
    lines += [
        '            if [[ "$cur" == -* ]]; then',
        f"                _ddsup_reply -W '{' '.join(command.flags)}'",
    ]
    if command.positional:
        lines += ["            else", f"                _ddsup_reply {command.positional}"]
    lines += ["            fi", "            ;;"]
    return lines


def render() -> str:
    top, subcommands = commands()
    names = " ".join(c.name for c in subcommands)
    body = [
        "# bash completion for ddsup -*- shell-script -*-",
        "# Generated by packaging/make-completion.py from ddsup's argument parser: do not",
        "# edit; run `python packaging/make-completion.py` after changing the command line.",
        "# Install: copy to /etc/bash_completion.d/ddsup (or",
        "# ~/.local/share/bash-completion/completions/ddsup), or `source` it.",
        "",
        "_ddsup_reply() {  # one candidate a line, so file names may hold spaces",
        '    mapfile -t COMPREPLY < <(compgen "$@" -- "$cur")',
        '    [[ "$1" == -[df] ]] && compopt -o filenames 2>/dev/null',
        "    return 0",
        "}",
        "",
        INSTANCES_FUNCTION,
        "",
        "_ddsup() {",
        "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}",
        "    local command='' i",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        "            -*) ;;",
        "            *) command=${COMP_WORDS[i]}; break ;;",
        "        esac",
        "    done",
        '    case "$command" in',
        "        '')",
        f"            _ddsup_reply -W '{names} {' '.join(top)}'",
        "            ;;",
    ]
    for command in subcommands:
        body += _case_command(command)
    body += ["    esac", "}", "", "complete -F _ddsup ddsup", ""]
    return "\n".join(body)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(
                f"{OUTPUT} is stale: run `python {Path(__file__).name}` in packaging/",
                file=sys.stderr,
            )
            return 1
        print(f"{OUTPUT.name} is up to date", file=sys.stderr)
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
