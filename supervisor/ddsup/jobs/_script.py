"""The batch script ``ddsup submit`` renders: the one a user would write around
``exec ddsup start``, from a :class:`~ddsup.jobs._job_request.JobRequest`.

The same request always renders the same text (a golden file holds it). Every value is
checked before it gets here (``units._job``: one word, one line, an option) and quoted
for the shell where the shell reads it; ``#SBATCH`` lines come first, since sbatch
stops reading them at the first command.
"""

from __future__ import annotations

import shlex

from ddsup.agent import SUBMIT_ENVIRONMENT
from ddsup.jobs._job_request import JobRequest

CPUS_ARG = '--srun-arg=--cpus-per-task="$SLURM_CPUS_ON_NODE"'
"""The agents' step gets every CPU of its node: Slurm gives a step one CPU per task
otherwise, and every lane of the node would share it (packaging/README.md)."""


def batch_output(request: JobRequest) -> str:
    """``#SBATCH --output``: in the state directory, one file per job (``%j``)."""
    return f"{request.state_dir}/slurm-%j.out"


def render_script(request: JobRequest) -> str:
    """The whole batch script."""
    lines = ["#!/bin/bash", *_header(request), *_directives(request), ""]
    lines += ["set -euo pipefail", "", *_environment(request)]
    if request.settings.setup:
        lines += ["", "# setup (job.toml or profile)", *request.settings.setup]
    lines += ["", *_start(request)]
    return "\n".join(lines) + "\n"


def _header(request: JobRequest) -> list[str]:
    versions = request.versions
    sources = ", ".join(request.sources) or "the command line alone"
    return [
        f"# A ddsup job, made by `ddsup submit` from {request.unit_dir}",
        f"# with ddsup {versions.ddsup} and Python {versions.python} on {versions.host};",
        f"# settings: {sources}.",
        "# Submit it again (sbatch) to go on in the same state directory:",
        f"# {request.state_dir}",
    ]


def _directives(request: JobRequest) -> list[str]:
    settings = request.settings
    options = [
        f"--job-name={request.job_name}",
        f"--nodes={request.nodes}",
        "--ntasks-per-node=1",
        f"--gpus-per-node={request.gpus_per_node}",
    ]
    named = (
        ("time", settings.time),
        ("account", settings.account),
        ("partition", settings.partition),
        ("qos", settings.qos),
        ("constraint", settings.constraint),
    )
    options += [f"--{name}={value}" for name, value in named if value is not None]
    if settings.signal is not None and settings.signal_before_end is not None:
        lead = round(settings.signal_before_end)
        options.append(f"--signal=B:{settings.signal.name.removeprefix('SIG')}@{lead}")
    if settings.requeue is not None:
        options.append("--requeue" if settings.requeue else "--no-requeue")
    options += [f"--output={batch_output(request)}", "--open-mode=append"]
    options += settings.sbatch_args
    return [f"#SBATCH {option}" for option in options]


def _environment(request: JobRequest) -> list[str]:
    bin_dir = request.python.rsplit("/", 1)[0] or "/"
    facts = {
        SUBMIT_ENVIRONMENT.version: request.versions.ddsup,
        SUBMIT_ENVIRONMENT.python: request.versions.python,
        SUBMIT_ENVIRONMENT.host: request.versions.host,
        SUBMIT_ENVIRONMENT.min_free: str(request.min_free_space),
    }
    lines = [
        "# Every node runs this ddsup and Python (each node's preflight compares them with",
        "# these) and needs this much space for logs; units find its programs on PATH.",
        f'export PATH={shlex.quote(bin_dir)}:"$PATH"',
        *(f"export {name}={shlex.quote(value)}" for name, value in facts.items()),
    ]
    variables = request.settings.environment
    lines += [f"export {name}={shlex.quote(value)}" for name, value in variables.items()]
    return lines


def _start(request: JobRequest) -> list[str]:
    argv = [request.python, "-m", "ddsup", "start", str(request.unit_dir)]
    first = " ".join(shlex.quote(arg) for arg in argv)
    rest = [f"--state-dir {shlex.quote(str(request.state_dir))}", CPUS_ARG]
    rest += [shlex.quote(f"--srun-arg={arg}") for arg in request.settings.srun_args]
    return [
        "# exec: ddsup replaces this shell, so Slurm's signals (--signal=B:…, scancel --batch,",
        "# ddsup stop --job) reach it, and the job's exit code is ddsup's own.",
        "exec " + " \\\n    ".join([first, *rest]),
    ]
