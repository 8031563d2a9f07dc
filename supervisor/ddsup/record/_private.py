"""Files only their owner may touch: how ddsup writes them, and when it trusts them.

**Writing.** :func:`write_private` replaces a file atomically through a temporary file
with a random name, created ``O_EXCL | O_NOFOLLOW`` with mode 0600, then renamed over
the target: nothing planted in the directory (a symlink, a file of the expected name)
can redirect the write, and a rename replaces a symlink itself, never its target.
:func:`open_append` opens a record for appending, never through a symlink.

**Trusting.** Before ddsup acts on what a file says (a port to send the run's secret to,
a pid to signal) :func:`check_private` makes sure that it is what it should be (a
directory or a regular file, never a symlink), that the caller owns it, and that nobody
else may write it; a secret must not be readable by anyone else either.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ddsup._errors import DdsupError
from ddsup.units import printable

APPEND_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_private(path: Path, text: str) -> None:
    """Atomically replace ``path`` with ``text``, mode 0600; OSError when it cannot."""
    # os.urandom, not the secrets module: the same bytes, and every command that reads a
    # run (``ddsup status``) imports this module, where ``secrets`` (hmac, OpenSSL) would
    # add to its start-up; the name needs to be unique (O_EXCL checks), not secret
    temporary = path.with_name(f".{path.name}.{os.urandom(8).hex()}.tmp")
    fd = os.open(temporary, _CREATE_FLAGS, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def open_append(path: Path) -> int:
    """A descriptor appending to ``path`` (created 0600); OSError, ELOOP for a symlink."""
    return os.open(path, APPEND_FLAGS, 0o600)


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
    problem = _problem(path, directory=directory, secret=secret)
    if isinstance(problem, os.stat_result):
        return problem
    raise error(f"{printable(str(path))} {problem}" + (f": {hint}" if hint else ""))


def _problem(path: Path, *, directory: bool, secret: bool) -> os.stat_result | str:
    """``path``'s status, or what is wrong with it (FileNotFoundError: nothing there)."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as err:
        return f"cannot be examined ({err.strerror})"
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
