"""A process's command line, rewritten in place, its environment left as it was.

``ps``, ``pgrep -f`` and ``/proc/PID/cmdline`` show the bytes the kernel keeps between a
process's ``arg_start`` and ``arg_end``: its argv strings as ``execve`` laid them out. A
process forked without an exec (an agent forked by ``agent._agent_forker``) shows its
parent's. ``setproctitle`` would rename it, but it takes the environment's bytes, just
after the argv's, for a longer title: ``/proc/PID/environ`` then no longer holds the
``DDSUP_*`` mark that the sweeps read (``_sweep``), which is what real vLLM does to its
engines and what the other no-orphan layers are for. Here the new words are written
only where the old ones were, so they must fit, and the environment is never touched.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Sequence

log = logging.getLogger(__name__)

# /proc/PID/stat: fields 48 and 49 (1-based), counted after the ")" that ends the name
_ARG_START_AFTER_NAME = 48 - 3


def argv_area() -> tuple[int, int] | None:
    """(``arg_start``, ``arg_end``) of this process; None where the kernel does not say."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        with open("/proc/self/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    try:
        start = int(fields[_ARG_START_AFTER_NAME])
        end = int(fields[_ARG_START_AFTER_NAME + 1])
    except (IndexError, ValueError):
        return None
    return (start, end) if 0 < start < end else None


def retitle(words: Sequence[str]) -> bool:
    """Show ``words`` as this process's command line; False (and unchanged) when they do
    not fit in the original argv's bytes.

    The words are NUL-separated as execve lays them out, and the rest of the area is NUL:
    so ``/proc/PID/cmdline`` ends with empty words (``ps`` shows them as spaces).
    """
    area = argv_area()
    encoded = b"\0".join(os.fsencode(word) for word in words) + b"\0"
    if area is None or len(encoded) > area[1] - area[0]:
        log.debug("command line not retitled: %d bytes, area %s", len(encoded), area)
        return False
    start, end = area
    padded = encoded.ljust(end - start, b"\0")
    ctypes.memmove(start, padded, len(padded))
    return True
