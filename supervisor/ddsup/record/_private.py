"""Files only their owner may touch: how ddsup writes them, and when it trusts them.

**Writing.** :func:`write_private` replaces a file atomically through a temporary file
with a random name, created ``O_EXCL | O_NOFOLLOW`` with mode 0600, then renamed over
the target: nothing planted in the directory (a symlink, a file of the expected name)
can redirect the write, and a rename replaces a symlink itself, never its target.
:func:`open_append` opens a record for appending, never through a symlink.

**Holding.** A directory ddsup writes into for a whole run is held open
(:class:`HeldDir`) from the moment it is created or first checked, and every write names
its file relative to that descriptor (``openat``): once held, renaming the directory,
or a directory above it, and putting another directory or a symlink in its place
changes nothing about where the writes land. Only its creation goes through the parent
by name, and :func:`open_parent` refuses a parent that another user may write (unless
it is sticky: ``/tmp``), where that user could swap the directory between its
``mkdir`` and its ``open``.

**Trusting.** Before ddsup acts on what a file says (a port to send the run's secret to,
a pid to signal) :func:`check_private` makes sure that it is what it should be (a
directory or a regular file, never a symlink), that the caller owns it, and that nobody
else may write it; a secret must not be readable by anyone else either.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from ddsup._errors import DdsupError
from ddsup.units import printable

APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT = 0


def write_private(path: Path | str, text: str, *, dir_fd: int | None = None) -> None:
    """Atomically replace ``path`` (relative to ``dir_fd`` when given) with ``text``, mode
    0600; OSError when it cannot."""
    # os.urandom, not the secrets module: the same bytes, and every command that reads a
    # run (``ddsup status``) imports this module, where ``secrets`` (hmac, OpenSSL) would
    # add to its start-up; the name needs to be unique (O_EXCL checks), not secret
    head, name = os.path.split(os.fspath(path))
    temporary = os.path.join(head, f".{name}.{os.urandom(8).hex()}.tmp")
    fd = os.open(temporary, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def open_append(path: Path | str, *, dir_fd: int | None = None) -> int:
    """A descriptor appending to ``path`` (created 0600); OSError, ELOOP for a symlink."""
    return os.open(path, APPEND_FLAGS, 0o600, dir_fd=dir_fd)


class HeldDir:
    """A private directory held open: what is written through it lands in it, whatever
    happens to its path later (the module docstring). ``path`` is for messages."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd = fd
        self.path = path

    def write(self, name: str, text: str) -> None:
        write_private(name, text, dir_fd=self.fd)

    def append(self, name: str) -> int:
        return open_append(name, dir_fd=self.fd)

    def read(self, name: str, *, error: type[DdsupError], hint: str = "") -> str:
        """The text of ``name`` in this directory, once the file itself (not a symlink)
        passed :func:`check_private`'s checks; ``error`` otherwise, OSError when it cannot
        be read (FileNotFoundError: it is not there)."""
        said = f": {hint}" if hint else ""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            raise
        except OSError:  # a symlink, or not ours to read: say which
            problem = _problem(os.stat(name, dir_fd=self.fd, follow_symlinks=False), False, False)
            if isinstance(problem, str):
                raise error(f"{printable(str(self.path / name))} {problem}{said}") from None
            raise
        with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
            problem = _problem(os.fstat(fd), False, False)
            if isinstance(problem, str):
                raise error(f"{printable(str(self.path / name))} {problem}{said}")
            return handle.read()

    def unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)

    def subdirectory(self, name: str, *, error: type[DdsupError], hint: str = "") -> HeldDir:
        """``name`` inside this directory, made (0700) when missing, held and checked as
        :func:`check_private` checks a directory; OSError when it cannot be made."""
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=self.fd)
        return open_private_dir(name, self.path / name, dir_fd=self.fd, error=error, hint=hint)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def open_private_dir(
    name: Path | str,
    shown: Path,
    *,
    dir_fd: int | None = None,
    error: type[DdsupError],
    hint: str = "",
) -> HeldDir:
    """Hold the directory ``name`` (relative to ``dir_fd``; never through a symlink) once it
    passed :func:`check_private`'s checks, on the descriptor itself; ``error`` otherwise,
    OSError (FileNotFoundError) when it cannot be opened."""
    try:
        fd = os.open(name, DIRECTORY_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except OSError:  # a symlink, not a directory, or not ours to open: say which
        problem = _problem(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), True, False)
        if not isinstance(problem, str):
            raise
    else:
        problem = _problem(os.fstat(fd), True, False)
        if not isinstance(problem, str):
            return HeldDir(fd, shown)
        os.close(fd)
    raise error(f"{printable(str(shown))} {problem}" + (f": {hint}" if hint else ""))


def open_parent(path: Path, *, error: type[DdsupError], hint: str = "") -> int:
    """A descriptor of ``path``'s parent (symlinks above followed: the caller's own
    paths), refused when another user could replace ``path`` in it: a parent that is
    another user's, or that group or others may write, unless it is sticky (``/tmp``:
    only an entry's owner may rename it) and root's or the caller's."""
    parent = path.parent
    fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    status = os.fstat(fd)
    owners = (os.geteuid(), _ROOT)
    sticky = bool(status.st_mode & stat.S_ISVTX)
    if status.st_uid not in owners:
        problem = f"belongs to uid {status.st_uid}, who could replace {path.name} in it"
    elif status.st_mode & 0o022 and not sticky:
        mode = stat.S_IMODE(status.st_mode)
        problem = (
            f"(mode {mode:o}) may be written by other users, who could replace {path.name} in it"
        )
    else:
        return fd
    os.close(fd)
    raise error(f"{printable(str(parent))} {problem}" + (f": {hint}" if hint else ""))


def check_private(
    path: Path,
    *,
    directory: bool,
    error: type[DdsupError],
    secret: bool = False,
    hint: str = "",
) -> os.stat_result:
    """``path``'s status once it passed; else ``error`` saying why, then ``hint``.

    Passes: a directory (``directory``) or a regular file, not a symlink, owned by the
    effective user, not writable by group or others (nor readable, for a ``secret``).
    FileNotFoundError when there is nothing at ``path``.
    """
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        problem: os.stat_result | str = f"cannot be examined ({err.strerror})"
    else:
        problem = _problem(status, directory, secret)
    if isinstance(problem, os.stat_result):
        return problem
    raise error(f"{printable(str(path))} {problem}" + (f": {hint}" if hint else ""))


def _problem(status: os.stat_result, directory: bool, secret: bool) -> os.stat_result | str:
    """``status`` when it is what a private file (or directory) is, else what is wrong."""
    kind = "a directory" if directory else "a regular file"
    if stat.S_ISLNK(status.st_mode):
        return f"is a symlink, not {kind}: ddsup does not follow it"
    if stat.S_ISDIR(status.st_mode) != directory or not (directory or stat.S_ISREG(status.st_mode)):
        return f"is not {kind}"
    if status.st_uid != os.geteuid():
        return f"belongs to uid {status.st_uid}, not to you (uid {os.geteuid()})"
    if status.st_mode & (0o077 if secret else 0o022):
        others = "read or written" if secret else "written"
        return f"(mode {stat.S_IMODE(status.st_mode):o}) may be {others} by other users"
    return status
