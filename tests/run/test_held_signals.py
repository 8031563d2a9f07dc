"""``ddsup start`` holds its signals from before it launches its agents until trio's
receiver takes them (``agent._held_signals``), and a node agent its stop signals until its
watcher runs: none is lost, none kills the process, and the agents spawned meanwhile
start with the default dispositions and nothing blocked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio

from ddsup.agent._held_signals import STOP_SIGNALS, HeldSignals, held_signals
from ddsup.agent._signals import receive_held

# prints the child's SIGTERM disposition and its blocked signals (hex, /proc)
CHILD_PY = """\
import signal
blocked = [l.split()[1] for l in open("/proc/self/status") if l.startswith("SigBlk:")][0]
print(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, int(blocked, 16))
"""


@pytest.fixture
def held() -> Iterator[HeldSignals]:
    signals = held_signals({signal.SIGUSR1})
    signals.hold()
    try:
        yield signals
    finally:
        signals.restore()


def test_a_stop_signal_while_held_neither_kills_nor_is_lost(held: HeldSignals) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # would end this process unhandled
    os.kill(os.getpid(), signal.SIGUSR1)
    seen: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: seen.append(n)) for s in held.signals}
    try:  # the receiver is installed first (as trio's is), then the held ones delivered
        held.release()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == [signal.SIGTERM, signal.SIGUSR1]


def test_after_the_release_signals_are_dropped(held: HeldSignals) -> None:
    held.release()
    os.kill(os.getpid(), signal.SIGTERM)  # the held handler is back once a receiver closes
    os.kill(os.getpid(), signal.SIGHUP)
    seen: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: seen.append(n)) for s in held.signals}
    try:
        held.release()  # nothing was noted: nothing is delivered
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen == []


async def test_the_receiver_gets_what_was_held_first() -> None:
    """An agent's SIGHUP before its watcher runs stops it once it does (chaos 292103-42)."""
    held = HeldSignals(STOP_SIGNALS)
    held.hold()
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        with trio.fail_after(5), receive_held(held) as signals:
            assert await signals.__anext__() == signal.SIGHUP
    finally:
        held.restore()


def test_children_spawned_while_held_start_with_default_dispositions(held: HeldSignals) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD_PY], capture_output=True, text=True)
    assert done.stdout.split() == ["True", "0"], done.stderr


def test_restore_puts_back_what_was_there() -> None:
    before = signal.getsignal(signal.SIGTERM)
    signals = held_signals(set())
    signals.hold()
    assert signal.getsignal(signal.SIGTERM) != before
    signals.restore()
    assert signal.getsignal(signal.SIGTERM) == before
