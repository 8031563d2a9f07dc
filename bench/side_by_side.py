"""Another revision of ddsup beside this checkout, in one run.

A change's before and after are only comparable when they meet the same machine: these
machines are shared, and their load moves figures more than most changes do. So a bench
given ``--baseline REV`` runs that revision's code and this checkout's in one run,
alternating (:func:`rotations`). :func:`baseline_code` gets the revision's ``supervisor/``
tree (``git archive``, or a directory that already holds the source, where there is no
git history), :func:`baseline_env` runs it, and :func:`export_tree` exports the whole
tree where the bench builds a wheel of it.

And the mark every process a bench starts carries, so that none outlives the bench: each
process started through :func:`marked_process` has ``DDSUP_BENCH_MARK=<random>`` in its
environment, and so does everything it starts (units, their children, setsid escapees
that keep their environment). Once a measurement is over, every live process with the
mark is SIGKILLed and counted: a bench reports a leftover, it never leaves one.
(Run from the repository root as ``python bench/NAME.py``, this folder is on ``sys.path``.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

import psutil

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def export_tree(rev: str, directory: Path, *paths: str) -> Path:
    """``paths`` (all of the tree without any) of git revision ``rev``, under ``directory``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, *paths], capture_output=True, check=False
    )
    if archive.returncode:
        raise SystemExit(f"--baseline {rev}: {archive.stderr.decode().strip()}")
    directory.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
    return directory


def baseline_code(rev: str, directory: Path) -> Path:
    """ddsup's ``supervisor/`` tree as of ``rev``, for ``PYTHONPATH``: exported under
    ``directory``, or ``rev`` itself when it names a directory that holds the source.
    Checked to be the ``ddsup`` that a process started with :func:`baseline_env` imports,
    not this checkout's editable install."""
    given = Path(rev)
    if (given / "ddsup").is_dir():
        source = given.resolve()
    elif (given / "supervisor" / "ddsup").is_dir():
        source = (given / "supervisor").resolve()
    else:
        source = export_tree(rev, directory, "supervisor") / "supervisor"
    check = [sys.executable, "-c", "import ddsup; print(ddsup.__file__)"]
    found = subprocess.run(check, env=baseline_env(source), capture_output=True, text=True)
    if not found.stdout.startswith(str(source)):
        raise SystemExit(f"--baseline {rev}: ddsup was imported from {found.stdout.strip()!r}")
    return source


def baseline_env(source: Path) -> dict[str, str]:
    """The environment whose processes import ``ddsup`` from ``source``: first on
    ``PYTHONPATH``, this checkout's tree taken off it, the rest kept (a machine whose
    ddsup dependencies are on the path beside it)."""
    ours = str(ROOT / "supervisor")
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ours]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(source), *kept])}


def rotations(variants: Sequence[T], reps: int) -> list[list[T]]:
    """``reps`` orders of ``variants``, each starting one later: none always runs first,
    on the load that the bench's own start-up left."""
    count = len(variants)
    return [[*variants[r % count :], *variants[: r % count]] for r in range(reps)]


MARK_VAR = "DDSUP_BENCH_MARK"
MARK = uuid.uuid4().hex


def marked_processes() -> list[psutil.Process]:
    """Live (non-zombie) processes of this bench: they carry ``MARK`` in their environment."""
    found = []
    for proc in psutil.process_iter():
        with suppress(psutil.Error):
            if proc.environ().get(MARK_VAR) == MARK and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
    return found


def kill_marked(spared: Collection[int] = ()) -> int:
    """SIGKILL every live process of this bench but those of ``spared`` (pids); how many
    there were."""
    procs = [proc for proc in marked_processes() if proc.pid not in spared]
    for proc in procs:
        with suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


_OPEN: set[int] = set()  # the processes of the marked_process contexts still open


def _open_trees() -> set[int]:
    """The pids of the processes of the open contexts and of their descendants."""
    pids = set(_OPEN)
    for pid in _OPEN:
        with suppress(psutil.Error):
            pids.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return pids


@contextmanager
def marked_process(
    argv: list[str],
    output: Path,
    *,
    stop_timeout: float,
    env: Mapping[str, str] | None = None,
    session: bool = False,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` started with the mark (output to ``output``); afterwards SIGTERM, SIGKILL
    after ``stop_timeout`` seconds, and every marked process left is killed and reported,
    but those of the other :func:`marked_process` contexts still open (the processes
    they started, and the descendants of those): a bench that stops its lanes one by
    one reports what each left, not the lanes it has yet to stop.

    ``session``: in a session of its own, as ``sbatch`` starts a job script. Linux's
    scheduler shares the CPU between sessions (autogroups) before it shares it between
    processes, so this keeps the bench's own busy threads out of the group of the
    process measured."""
    full_env = {**os.environ, **(env or {}), MARK_VAR: MARK}
    with output.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=session,
        )
    _OPEN.add(process.pid)
    try:
        yield process
    finally:
        _OPEN.discard(process.pid)
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        leftovers = kill_marked(_open_trees())
        if leftovers:
            print(
                f"LEFTOVER: killed {leftovers} processes still carrying the mark", file=sys.stderr
            )
