"""Concurrent stops share passes over ``/proc``, and each gets a table read after it asked."""

from __future__ import annotations

import os
import subprocess

import pytest
import trio
import trio.testing

from ddsup.process import ProcessTable, process_table, read_process_table
from ddsup.process import _table as _process_table


def test_the_table_holds_this_process_and_its_children() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        table = read_process_table()
        assert child.pid in table.children[os.getpid()]
        assert child.pid in table.descendants(os.getppid())
    finally:
        child.kill()
        child.wait()


async def test_concurrent_callers_share_passes_read_after_they_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: list[int] = []  # the pass number each read returns
    asked: dict[int, int] = {}  # caller → passes started before it asked
    release = trio.Event()

    def counting_read() -> ProcessTable:
        passes.append(len(passes))
        trio.from_thread.run(release.wait)
        return ProcessTable({-1: [len(passes) - 1]})

    monkeypatch.setattr(_process_table, "read_process_table", counting_read)
    got: dict[int, int] = {}

    async def caller(i: int) -> None:
        asked[i] = len(passes)
        got[i] = (await process_table()).children[-1][0]

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller, 0)
        await trio.testing.wait_all_tasks_blocked()  # caller 0's pass is running
        for i in range(1, 50):
            nursery.start_soon(caller, i)
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert len(passes) == 2  # 50 callers, two passes: the first, and one for the rest
    for i, number in got.items():
        assert number >= asked[i]  # never a pass that started before the caller asked
