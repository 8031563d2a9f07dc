"""``ddsup verify`` and ``ddsup schema``.

``verify`` prints one ``path:line:col: error: message`` line per problem on stdout (so
editors and CI annotate them like compiler output) and a one-line summary on stderr;
exit 0 when clean, 65 when not. A path that does not exist is a problem like any other.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable

from ddsup._errors import EXIT_INVALID_UNITS, Problem, UnitFileError
from ddsup.units._job import JOB_FILE, load_job_file
from ddsup.units._jsonschema import json_schema
from ddsup.units._model import UnitSet
from ddsup.units._printable import printable
from ddsup.units._unitset import load_unit_files, load_unit_set


def configure_verify(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Check unit files without running anything: unknown keys and sections, types, "
        "ranges, durations, signals, specifiers and dependencies. Each DIR is checked "
        "as one set, with its job.toml (how ddsup submit asks Slurm for the job); the "
        "FILEs given are checked together as another."
    )
    parser.add_argument("paths", nargs="+", metavar="DIR|FILE", help="unit directory or files")


def run_verify(args: argparse.Namespace) -> int:
    problems: list[Problem] = []
    summaries: list[str] = []
    directories = [p for p in args.paths if os.path.isdir(p)]
    jobs = [p for p in args.paths if not os.path.isdir(p) and os.path.basename(p) == JOB_FILE]
    files = [p for p in args.paths if not os.path.isdir(p) and p not in jobs]
    for directory in directories:
        _verify_one(functools.partial(load_unit_set, directory), directory, problems, summaries)
        job = os.path.join(directory, JOB_FILE)
        if os.path.lexists(job):
            jobs.append(job)
    for job in jobs:
        _verify_job(job, problems, summaries)
    if files:
        _verify_one(
            functools.partial(load_unit_files, files), ", ".join(files), problems, summaries
        )
    for problem in sorted(problems, key=lambda p: (p.path, p.line, p.col, p.message)):
        print(problem)
    if problems:
        count = len(problems)
        print(f"{count} problem{'s' if count != 1 else ''} found", file=sys.stderr)
        return EXIT_INVALID_UNITS
    for summary in summaries:
        print(summary, file=sys.stderr)
    return 0


def _verify_one(
    load: Callable[[], UnitSet], where: str, problems: list[Problem], summaries: list[str]
) -> None:
    try:
        unit_set = load()
    except UnitFileError as err:
        problems.extend(err.problems)
        return
    count = len(unit_set.units)
    summaries.append(f"ok: {count} unit{'s' if count != 1 else ''} in {printable(where)}")


def _verify_job(path: str, problems: list[Problem], summaries: list[str]) -> None:
    """``job.toml``: not a unit, but how its directory is submitted (``_job``)."""
    try:
        load_job_file(path)
    except UnitFileError as err:
        problems.extend(err.problems)
        return
    summaries.append(f"ok: job settings in {printable(path)}")


def configure_schema(parser: argparse.ArgumentParser) -> None:
    parser.description = "Print the JSON Schema (draft 2020-12) of a unit file, for editors."


def run_schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2, ensure_ascii=False))
    return 0
