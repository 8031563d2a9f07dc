"""A second, unprivileged user for the tests that pit one user against another.

Root runs a run (or owns a directory); another user attacks it, or is refused by it.
Only root can act as another user, and CI runs as root, so these tests run there: none
of them may skip for want of a user, a tool or a readable checkout.

- The user: ``nobody`` (uid 65534) where it exists, else ``ddsup-second``, created with
  ``useradd --system`` (idempotently: a concurrent session may create it first).
- What it runs: the checkout may lie where only root can enter (a clean clone in a
  ``mktemp -d`` directory is 0700, and so is the editable install's source in it), and
  so may the interpreter (pyenv's, under root's home). So the user gets a
  world-readable copy of ddsup and of every distribution it depends on, made once per
  session, on ``PYTHONPATH``; and the venv's base interpreter, or, when the user cannot
  run that one, a copy of it with its standard library. A probe checks that the user
  can import ddsup; when it cannot (a ``noexec`` /tmp), the test fails and says why
  instead of asserting on "No module named ddsup".
- How: ``subprocess`` switches uid, gid and groups itself (``user=``, ``group=``,
  ``extra_groups=``); no ``setpriv`` or ``runuser`` is needed.
"""

from __future__ import annotations

import importlib.metadata
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

import ddsup
from support.runs import start_env

CREATED_NAME = "ddsup-second"
"""The user made where there is no ``nobody``."""

as_root_only = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root (another user's files and processes, mounts)"
)


@dataclass(frozen=True)
class SecondUser:
    """An unprivileged user, and how to run ddsup as it (the module docstring)."""

    name: str
    uid: int
    gid: int
    python: str  # an interpreter the user can run
    pythonpath: str  # ddsup and its dependencies, readable by the user
    library_path: str | None = None  # where a copied interpreter finds its libpython

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The tests' environment for a process of this user (its copy of ddsup first)."""
        env = {"PYTHONPATH": self.pythonpath, "HOME": "/"}
        if self.library_path is not None:
            env["LD_LIBRARY_PATH"] = self.library_path
        return start_env({**env, **(extra or {})})

    def _as_user(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def run(
        self, argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 60, **extra: str
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` as this user, to its end (``extra``: variables added to its env)."""
        return subprocess.run(
            list(argv),
            cwd=cwd or "/",
            env=self.env(extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **self._as_user(),
        )

    def popen(self, argv: Sequence[str], **extra: str) -> subprocess.Popen[bytes]:
        """``argv`` as this user, in the background, in a session of its own."""
        return subprocess.Popen(
            list(argv),
            cwd="/",
            env=self.env(extra),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            **self._as_user(),
        )

    def ddsup(
        self, *args: str, cwd: Path | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """``ddsup ARGS`` as this user, to its end."""
        return self.run([self.python, "-m", "ddsup", *args], cwd=cwd, timeout=timeout)

    def owns(self, path: Path) -> Path:
        """Give ``path`` (a directory, made 0755 when missing) to this user; ``path``."""
        path.mkdir(mode=0o755, exist_ok=True)
        os.chown(path, self.uid, self.gid)
        return path


def find_or_create_user() -> pwd.struct_passwd:
    """``nobody``, or ``ddsup-second`` (created when missing; root only)."""
    for name in ("nobody", CREATED_NAME):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    useradd = shutil.which("useradd") or "/usr/sbin/useradd"
    options = ["--system", "--user-group", "--no-create-home", "--home-dir", "/"]
    made = subprocess.run(
        [useradd, *options, "--shell", "/usr/sbin/nologin", CREATED_NAME],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        return pwd.getpwnam(CREATED_NAME)  # also when a concurrent session made it (exit 9)
    except KeyError:
        pytest.fail(
            f"no unprivileged user for the tests: there is no 'nobody', and "
            f"`useradd --system {CREATED_NAME}` failed ({made.returncode}): {made.stderr.strip()}",
            pytrace=False,
        )


def _runtime_distributions() -> list[importlib.metadata.Distribution]:
    """ddsup's runtime dependencies, and theirs (no extras), each once."""
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = ["ddsup"]
    while pending:
        for text in importlib.metadata.requires(pending.pop()) or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            name = requirement.name.lower().replace("_", "-")
            if name not in found:
                found[name] = importlib.metadata.distribution(name)
                pending.append(name)
    return list(found.values())


def _copy_distribution(distribution: importlib.metadata.Distribution, target: Path) -> None:
    """The files a distribution installed into site-packages (not its scripts); their
    times kept, so that the compiled modules copied with them stay valid."""
    base = Path(str(distribution.locate_file(""))).resolve()
    for file in distribution.files or ():
        source = Path(str(distribution.locate_file(file))).resolve()
        if not source.is_relative_to(base) or not source.is_file():
            continue  # bin/ scripts, or a file RECORD lists but nothing installed
        destination = target / source.relative_to(base)
        destination.parent.mkdir(parents=True, exist_ok=True)
        _place(source, destination)


def _place(source: str | os.PathLike[str], destination: str | os.PathLike[str]) -> None:
    """A hard link where one can be made (tens of megabytes, once a session), else a
    copy; times kept either way (the compiled modules beside the sources stay valid)."""
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def _world_readable(root: Path) -> None:
    """Directories 0755, files 0644 (0755 when executable), whatever the umask and the
    sources' modes were."""
    root.chmod(0o755)
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories:
            os.chmod(os.path.join(directory, name), 0o755)
        for name in files:
            path = os.path.join(directory, name)
            status = os.stat(path)
            if status.st_mode & 0o444 == 0o444 and status.st_mode & 0o111 in (0, 0o111):
                continue  # readable as it is (and a hard link's mode is its source's too)
            if status.st_nlink > 1:  # a link: give the copy its own mode, not the source
                shutil.copy2(path, path + ".copy")
                os.replace(path + ".copy", path)
            os.chmod(path, 0o755 if status.st_mode & 0o100 else 0o644)


def copy_packages(target: Path) -> None:
    """ddsup and its runtime dependencies under ``target``."""
    shutil.copytree(Path(ddsup.__file__).parent, target / "ddsup", copy_function=_place)
    for distribution in _runtime_distributions():
        _copy_distribution(distribution, target)


def base_interpreter() -> str:
    """The interpreter behind this venv (whose ``bin/`` may be out of the user's reach)."""
    return getattr(sys, "_base_executable", None) or sys.executable


_NOT_RUN = (  # what no test's ddsup imports from the standard library
    *("site-packages", "test", "config-*", "idlelib", "tkinter", "turtledemo", "ensurepip"),
    *("lib2to3", "distutils", "pydoc_data", "*.opt-1.pyc", "*.opt-2.pyc"),
)


def copy_interpreter(target: Path) -> str:
    """The base interpreter, its libpython and its standard library under ``target``
    (found there from the executable's place, as any installation's); its path."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    prefix = Path(sys.base_prefix)
    executable = target / "bin" / version
    for directory in ("bin", "lib"):
        (target / directory).mkdir(parents=True)
    _place(Path(base_interpreter()).resolve(), executable)
    for library in (prefix / "lib").glob("libpython*.so*"):
        _place(library.resolve(), target / "lib" / library.name)
    shutil.copytree(
        prefix / "lib" / version,
        target / "lib" / version,
        ignore=shutil.ignore_patterns(*_NOT_RUN),
        copy_function=_place,
    )
    return str(executable)


@pytest.fixture(scope="session")
def second_user() -> Iterator[SecondUser]:
    """The second user with its copy of ddsup (see the module docstring); root only."""
    if os.geteuid() != 0:
        pytest.fail("the second-user tests need root: mark them as_root_only", pytrace=False)
    entry = find_or_create_user()
    copy = Path(tempfile.mkdtemp(prefix="ddsup-second-user-"))
    try:
        copy_packages(copy / "packages")
        user = SecondUser(
            entry.pw_name, entry.pw_uid, entry.pw_gid, base_interpreter(), str(copy / "packages")
        )
        _world_readable(copy)
        if not _runs(user, [user.python, "-c", ""]):
            user = replace(user, python=copy_interpreter(copy), library_path=str(copy / "lib"))
            _world_readable(copy)
        probe = user.run([user.python, "-c", "import ddsup._cli, httptools, psutil, trio"])
        if probe.returncode != 0:
            pytest.fail(
                f"user {user.name} (uid {user.uid}) cannot run ddsup from the copy in {copy} "
                f"with {user.python}: {probe.stderr.strip()[-500:]}",
                pytrace=False,
            )
        yield user
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def _runs(user: SecondUser, argv: list[str]) -> bool:
    try:
        return user.run(argv).returncode == 0
    except PermissionError:  # the interpreter, or a directory above it, is not the user's to enter
        return False
