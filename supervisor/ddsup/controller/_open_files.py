"""The controller's open files: one connection (and, for local agents, one pidfd) per agent.

Many clusters give jobs a soft ``RLIMIT_NOFILE`` of 1,024 (with a far higher hard
limit): at ~500 nodes the controller's connections to its agents alone would reach it,
and the next ``accept`` fails (trio retries it, so the run would sit in preflight until
the agents' wait times out). As systemd's documentation recommends for a program that
needs more, ``ddsup start`` raises its own soft limit to what its run needs, up to the
hard limit, and says so when the hard limit itself is too low.
"""

from __future__ import annotations

import resource

from ddsup._errors import PreflightError

PER_AGENT = 2  # its connection, and its process's pidfd (local agents)
BASE = 64  # listening socket, events.jsonl, logs being opened, the feed, operators, trio's own


def open_files_needed(agents: int, local_instances: int) -> int:
    return BASE + PER_AGENT * agents + 2 * local_instances


def ensure_open_files(needed: int) -> int:
    """Raise the soft limit to ``needed`` (never lower it); the soft limit now.

    PreflightError when the hard limit is below ``needed``: ``ulimit -Hn`` is the
    administrator's, and the run would fail later in a less clear way.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed <= soft or soft == resource.RLIM_INFINITY:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise PreflightError(
            f"this run needs {needed} open files in ddsup start (one connection per node "
            f"agent), but the hard limit is {hard}: ask for a higher one (ulimit -Hn)"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed
