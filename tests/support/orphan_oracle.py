"""The orphan oracle: PID 1 of a run's own PID namespace (``support.pid_namespace``).

``unshare --pid --fork --mount-proc python3 orphan_oracle.py REPORT GRACE -- ddsup start …``

It starts ``ddsup start`` as its only child, reaps whatever is reparented to it, and
once ``ddsup start`` has exited counts every live process left in the namespace: all of
them were started by that ``ddsup start`` (nothing else runs in the namespace), whatever
their environment, title, session or parent. It shares none of ddsup's mechanism (no
environment tag, no cgroup, no registry). ``GRACE`` is how long leftovers may take to go
(0 when ``ddsup start`` is expected to clean up before it returns). The verdict goes to
REPORT as JSON; then this process exits, and the kernel SIGKILLs whatever is left in the
namespace, so a run can never leak into the next. The chaos schedules and the real-vLLM
scenarios both run under it.

Standard library only.
"""

from __future__ import annotations

import json
import os
import sys
import time

POLL = 0.01  # seconds between looks at the namespace while leftovers may still go


def _live_processes() -> dict[int, str]:
    """PID → command line of every live process in this namespace but this one."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            words = [w.decode(errors="replace") for w in cmdline.split(b"\0") if w]
            found[int(name)] = " ".join(words) or "?"
    return found


def _reap() -> dict[int, int]:
    """Reap every child that has ended (orphans are ours: we are PID 1): PID → status."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = status


def main(argv: list[str]) -> int:
    report_path, grace, command = argv[1], float(argv[2]), argv[4:]
    assert argv[3] == "--" and command, "usage: orphan_oracle.py REPORT GRACE -- COMMAND…"
    start = os.fork()
    if start == 0:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.execvp(command[0], command)
    _, status = os.waitpid(start, 0)  # blocking: ddsup start is all we wait for
    ended_at = time.monotonic()
    _reap()
    left = _live_processes()
    while left and time.monotonic() - ended_at < grace:
        time.sleep(POLL)  # no event exists for "a process that is not our child died"
        _reap()
        left = _live_processes()
    report = {
        "returncode": -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status),
        "leftovers": {str(pid): cmd for pid, cmd in sorted(left.items())},
        "empty_after": None if left else round(time.monotonic() - ended_at, 3),
    }
    tmp = f"{report_path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(report, handle)
    os.replace(tmp, report_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
