"""The child-subreaper flag of this process (``prctl``), apart from the reaper.

``ddsup start`` sets it before it imports trio (``_opening``, ``controller._head_start``), and the
reaper (``_subreaper``) needs trio: so this module imports the standard library only.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys

log = logging.getLogger(__name__)

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def become_subreaper() -> None:
    """Make orphaned descendants reparent to us rather than to init (Linux only).

    Without it, a unit's setsid grandchild whose parent died belongs to PID 1 and we
    could only find it by its environment; with it, it is our child, we reap it, and it
    cannot outlive us unnoticed.
    """
    if not sys.platform.startswith("linux"):
        log.debug("not Linux: no child subreaper; orphans are found by sweeping only")
        return
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (False where the notion does not exist)."""
    if not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.pointer(flag))
    return flag.value != 0
