"""``job.toml`` and submit profiles: what ``ddsup submit`` asks Slurm for.

A unit directory may hold ``job.toml`` beside its unit files. It is not a unit (every
other ``*.toml`` there is one): it is how the directory is submitted, one ``[job]``
table. A profile (``~/.config/ddsup/profiles/NAME.toml``) is the same table for a
cluster: account, partition, container flags, where state directories go. Both are
checked the way unit files are, by the same key table machinery (``check_section``),
so each problem is one ``path:line:col: error: message`` line and ``ddsup verify DIR``
checks a directory's ``job.toml`` with its units.

Every value ends up in the batch script, as an ``#SBATCH`` line, an exported variable
or an argument: nothing that could break out of its line (a newline, a control
character) is accepted, and names Slurm reads word by word have no spaces.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from signal import Signals
from types import MappingProxyType
from typing import Any

from ddsup._errors import Problem, UnitFileError
from ddsup.units import _kinds as k
from ddsup.units._durations import format_duration
from ddsup.units._parse import check_section
from ddsup.units._schema import KeySpec, SectionSpec
from ddsup.units._toml import MAX_FILE_BYTES, ParsedFile, new_problem, read_toml

JOB_FILE = "job.toml"
"""The one ``*.toml`` of a unit directory that is not a unit."""
MAX_SIGNAL_LEAD = 65535  # seconds: the most ``sbatch --signal=…@N`` takes

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_WORD = re.compile(r"[^\s\x00-\x1f\x7f]+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_SLURM_TIME = re.compile(r"(\d+(:\d+){0,2})|(\d+-\d+(:\d+){0,2})|UNLIMITED|INFINITE")


@dataclass(frozen=True)
class JobSettings:
    """The ``[job]`` keys one file (or the command line) gives; None: not given there.

    :meth:`over` lays one source over another: a profile first, then the unit
    directory's ``job.toml``, then ``ddsup submit``'s flags.
    """

    account: str | None = None
    partition: str | None = None
    qos: str | None = None
    time: str | None = None  # as Slurm writes it ("12:00:00", "1-00:00:00")
    nodes: int | None = None
    gpus_per_node: int | None = None
    constraint: str | None = None
    signal: Signals | None = None
    signal_before_end: float | None = None
    requeue: bool | None = None
    job_name: str | None = None
    state_root: str | None = None  # absolute once read from a file
    python: str | None = None
    min_free_space: int | None = None
    profile: str | None = None  # job.toml only: the profile it is submitted with
    srun_args: tuple[str, ...] = ()
    sbatch_args: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def over(self, base: JobSettings) -> JobSettings:
        """These settings laid over ``base``: a value given here wins, lists are ``base``'s
        then these (a later ``#SBATCH`` option wins in sbatch too), variables merged."""
        given = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) is not None and f.name not in _COMBINED
        }
        merged = replace(base, **given)
        return replace(
            merged,
            srun_args=base.srun_args + self.srun_args,
            sbatch_args=base.sbatch_args + self.sbatch_args,
            setup=base.setup + self.setup,
            environment=MappingProxyType({**base.environment, **self.environment}),
        )


_COMBINED = frozenset({"srun_args", "sbatch_args", "setup", "environment"})


def _word(value: object) -> str:
    text = k.nonempty_string(value)
    if not _WORD.fullmatch(text):
        raise k.Invalid(f"{text!r} holds a space or a control character; Slurm reads one word")
    return text


def _name(value: object) -> str:
    text = k.nonempty_string(value)
    if not _NAME.fullmatch(text):
        raise k.Invalid(
            f"{text!r} is not a job name: use letters, digits, '_', '.', '-' (it also names "
            "the job's state directory)"
        )
    return text


def slurm_time(value: object) -> str:
    """A time limit as Slurm writes it: a duration (``"12h"``) or Slurm's own spelling
    (``"90"`` minutes, ``"12:00:00"``, ``"2-00:00:00"``), kept as given."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise k.Invalid(f'write "{value}m" (a duration) or Slurm\'s "{value}" in quotes')
    text = k.nonempty_string(value).strip()
    if _SLURM_TIME.fullmatch(text):
        return text
    try:
        seconds = k.duration(positive=True, typical=3600).convert(text)
    except k.Invalid:
        raise k.Invalid(
            f'invalid time limit {text!r}: a duration ("12h", "90m") or as Slurm writes it '
            '("720", "12:00:00", "1-12:00:00")'
        ) from None
    assert isinstance(seconds, float)
    return _slurm_spelling(seconds)


def parse_slurm_time(text: str) -> str:
    """``--time``: :func:`slurm_time`'s rule; ValueError saying what to write."""
    try:
        return slurm_time(text)
    except k.Invalid as err:
        raise ValueError(err.message) from None


def parse_job_name(text: str) -> str:
    """``--job-name``: ``job_name``'s rule; ValueError saying what to write."""
    try:
        return _name(text)
    except k.Invalid as err:
        raise ValueError(err.message) from None


def _slurm_spelling(seconds: float) -> str:
    whole = int(-(-seconds // 1))  # up to the second
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def _line(value: object) -> str:
    text = k.string(value)
    if _CONTROL.search(text):
        raise k.Invalid(f"{text!r} holds a control character (a newline?); give one line")
    return text


def _lines(value: object) -> tuple[str, ...]:
    items = k.STRINGS.convert(value)
    assert isinstance(items, tuple)
    k.each(items, _line)
    return items


def _options(value: object) -> tuple[str, ...]:
    items = _lines(value)

    def option(item: object) -> None:
        if not str(item).startswith("-"):
            raise k.Invalid(f"{item!r} is not an option: write it as --name=value")

    k.each(items, option)
    return items


def _path(value: object) -> str:
    return _line(k.nonempty_string(value))


def _absolute(value: object) -> str:
    text = _path(value)
    if not os.path.isabs(text):
        raise k.Invalid(f"{text!r} is not an absolute path: every node must find it")
    return text


def _boolean(value: object) -> bool:
    k.expect(value, bool, "true or false")
    return bool(value)


def _lead(value: object) -> float:
    seconds = k.duration(positive=True, typical=300).convert(value)
    assert isinstance(seconds, float)
    if seconds > MAX_SIGNAL_LEAD:
        limit = format_duration(MAX_SIGNAL_LEAD)
        raise k.Invalid(f"Slurm sends a signal at most {MAX_SIGNAL_LEAD} s ({limit}) early")
    return seconds


_WORD_KIND = k.Kind("string (one word)", _word, lambda: {"type": "string"})
_PATH_KIND = k.Kind("path", _path, lambda: {"type": "string"})
_LINES = k.Kind("array of strings (one line each)", _lines, lambda: {"type": "array"})
JOB = SectionSpec(
    "job",
    "How `ddsup submit` asks Slurm for the job (job.toml, or a profile).",
    (
        KeySpec("account", _WORD_KIND, "`#SBATCH --account`.", None, "llm-inference"),
        KeySpec("partition", _WORD_KIND, "`#SBATCH --partition` (a list: a,b).", None, "gpu"),
        KeySpec("qos", _WORD_KIND, "`#SBATCH --qos`.", None, "normal"),
        KeySpec(
            "time",
            k.Kind("time limit", slurm_time, lambda: {"type": "string"}),
            "The time limit: a duration or as Slurm writes it (`#SBATCH --time`).",
            None,
            "12h",
        ),
        KeySpec("nodes", k.integer(1), "Nodes of the job (`ddsup plan` tells).", None, 4),
        KeySpec("gpus_per_node", k.integer(1, 4096), "GPUs asked for on each node.", None, 8),
        KeySpec("constraint", _WORD_KIND, "`#SBATCH --constraint` (features).", None, "a100"),
        KeySpec(
            "signal",
            k.SIGNAL,
            "Sent to ddsup `signal_before_end` before the time limit (`--signal=B:…`).",
            None,
            "SIGUSR1",
        ),
        KeySpec(
            "signal_before_end",
            k.Kind("duration (> 0)", _lead, lambda: {"type": "string"}),
            "How long before the time limit `signal` comes.",
            None,
            "5m",
        ),
        KeySpec(
            "requeue",
            k.Kind("boolean", _boolean, lambda: {"type": "boolean"}),
            "`--requeue` (true) or `--no-requeue` (false); a worker's exit 85 needs true.",
            None,
            True,
        ),
        KeySpec(
            "job_name",
            k.Kind("job name", _name, lambda: {"type": "string"}),
            "The job's name; it also names the state directory (default: the unit "
            "directory's name).",
            None,
            "llama-batch",
        ),
        KeySpec(
            "state_root",
            _PATH_KIND,
            "Where state directories go, on the shared file system (relative: to this "
            "file's directory; default: where `ddsup submit` runs).",
            None,
            "/shared/jobs/runs",
        ),
        KeySpec(
            "python",
            k.Kind("absolute path", _absolute, lambda: {"type": "string"}),
            "The interpreter that runs ddsup on the nodes (default: the one running "
            "`ddsup submit`).",
            None,
            "/shared/venvs/ddsup/bin/python",
        ),
        KeySpec(
            "min_free_space",
            k.size(1 << 20),
            "Free space every node must see in the state directory (default 1G).",
            None,
            "10G",
        ),
        KeySpec(
            "profile",
            k.Kind("profile name", _name, lambda: {"type": "string"}),
            "job.toml only: the profile to submit with when `--profile` is not given.",
            None,
            "cluster-a",
        ),
        KeySpec(
            "srun_args",
            k.Kind("array of options", _options, lambda: {"type": "array"}),
            "Options of the agents' `srun` step (containers): `ddsup start --srun-arg`.",
            [],
            ["--container-image=/images/vllm.sqsh"],
        ),
        KeySpec(
            "sbatch_args",
            k.Kind("array of options", _options, lambda: {"type": "array"}),
            "More `#SBATCH` lines, one option each.",
            [],
            ["--exclusive", "--mem=0"],
        ),
        KeySpec(
            "setup",
            _LINES,
            "Shell lines run before ddsup starts (`module load …`).",
            [],
            ["module load cuda/12.4"],
        ),
        KeySpec(
            "environment",
            k.ENVIRONMENT,
            "Variables exported to the job (values as written: no `$` expansion).",
            {},
            {"HF_HOME": "/shared/hf-cache"},
        ),
    ),
)


def load_job_file(path: str, *, profile: bool = False) -> JobSettings:
    """The settings of ``path`` (``job.toml``, or a profile); UnitFileError with every
    problem when it is not valid. Relative ``state_root``: to the file's directory."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as err:
        why = (err.strerror or str(err)).lower()
        raise UnitFileError([new_problem(path, 1, 1, f"cannot read: {why}")]) from None
    settings, problems = parse_job_bytes(path, data, profile=profile)
    if problems or settings is None:
        raise UnitFileError(problems)
    return settings


def parse_job_bytes(
    path: str, data: bytes, *, profile: bool = False
) -> tuple[JobSettings | None, list[Problem]]:
    """Check ``data`` as a ``[job]`` file named ``path``: the settings, or the problems."""
    parsed = read_toml(path, data)
    if parsed.problems:
        return None, parsed.problems
    values: dict[str, Any] = {}
    for name, table in parsed.doc.items():
        if name != "job":
            parsed.problem((name,), _not_job(name, profile))
        elif not isinstance(table, dict):
            parsed.problem((name,), "[job] must be a table, written as a [job] header")
        else:
            values = check_section(parsed, JOB, table)
    if "job" not in parsed.doc:
        parsed.problems.append(new_problem(path, 1, 1, "no [job] table: start it with [job]"))
    _cross_checks(parsed, values, profile)
    if parsed.problems:
        return None, parsed.problems
    root = values.get("state_root")
    if root is not None:
        base = os.path.dirname(os.path.abspath(path))
        values["state_root"] = os.path.normpath(os.path.join(base, os.path.expanduser(root)))
    return JobSettings(**values), []


def _not_job(name: str, profile: bool) -> str:
    what = "a profile" if profile else f"{JOB_FILE} (how the directory is submitted)"
    hint = (
        f"; a unit cannot be named {JOB_FILE[:-5]!r}: rename it"
        if not profile and name in ("unit", "service")
        else ""
    )
    return f"[{name}] does not belong in {what}: it holds [job] alone{hint}"


def _cross_checks(parsed: ParsedFile, values: Mapping[str, Any], profile: bool) -> None:
    table = parsed.doc.get("job")
    if not isinstance(table, dict):
        return
    if profile and "profile" in table:
        parsed.problem(("job", "profile"), "[job] profile: a profile cannot name another")
    for key, other in (("signal", "signal_before_end"), ("signal_before_end", "signal")):
        if key in values and other not in table:
            parsed.problem(("job", key), f"[job] {key} needs {other} too")
