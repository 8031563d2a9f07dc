"""Run a command in a network namespace of its own: ``python netns.py ARGV…``.

Unit files as users write them use fixed ports (``port = 8000``, the endpoint's 9000),
which other runs on a shared test machine may hold. Running ``ddsup start`` in a private
network namespace gives it a loopback of its own, so a test can run such files
unchanged: nothing outside can take their ports, and nothing they open is reachable
from outside. As root this is ``unshare(CLONE_NEWNET)``; otherwise a user namespace is
made first (mapping the caller's own uid and gid), where the kernel allows it.

Exit status 3 (and a line on stderr) when no namespace can be made here; otherwise the
command's own (this process becomes it through ``exec``).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
UNAVAILABLE = 3
SCRIPT = Path(__file__).resolve()


def argv_in_netns(argv: list[str]) -> list[str]:
    """``argv`` run through this script (with the interpreter that runs the tests)."""
    return [sys.executable, str(SCRIPT), *argv]


def _unshare(flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _enter() -> None:
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _unshare(CLONE_NEWNET)
        return
    _unshare(CLONE_NEWUSER | CLONE_NEWNET)
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP))


def main(argv: list[str]) -> int:
    try:
        _enter()
        _loopback_up()
    except OSError as err:
        print(f"netns: no private network namespace here: {err}", file=sys.stderr)
        return UNAVAILABLE
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
