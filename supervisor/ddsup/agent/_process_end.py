"""How ``ddsup start`` and the node agents end: without the interpreter's teardown.

Once ``trio.run`` has returned, such a process owns nothing any more: every child is
reaped, every connection closed, ``result.json`` and ``events.jsonl`` written and closed.
What is left is CPython's teardown, which frees every module and object one at a time,
and many simulated agents ending together would spend seconds of a stop on it. So the output streams are flushed, and the process ends with ``os._exit``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn


def end_process(status: int) -> NoReturn:
    """Flush what is buffered and end the process with ``status`` at once."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)
