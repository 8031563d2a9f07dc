"""A second subscriber to a live run's lane feed, running the endpoint's own feed code.

``scale_allocation.py`` starts it next to ``ddsup start``'s endpoint: it subscribes to
the controller exactly as the endpoint does (``open_controller_feed``, then
``ControllerFeed.follow`` into a ``LaneTable``) and stamps the moment each lane enters or
leaves its table, so "a lane's ready event → the endpoint's table" can be measured
without touching the endpoint under test. When the feed ends (the run stops) it writes
``{"added": {instance: [times]}, "removed": {…}, "updates": N, "subscribed": time,
"cpu_s": …}`` to OUT.

    python bench/feed_watch.py STATE_DIR OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import trio

from ddsup.endpoint import LaneInfo, LaneTable  # as exported by a baseline's tree too
from ddsup.endpoint._lane_feed import open_controller_feed


class StampingTable(LaneTable):
    """A lane table that notes when each lane came and went (wall clock, like events).

    It stamps after the endpoint's own code applied a change, looking only at the lanes
    the change names (a full set: at all), so the stamping costs O(change) as the table
    itself does."""

    def __init__(self) -> None:
        self.added: dict[str, list[float]] = {}
        self.removed: dict[str, list[float]] = {}
        self.updates = 0
        self._had: set[str] = set()
        super().__init__([])

    def set_ready(self, lanes: Iterable[LaneInfo]) -> None:
        super().set_ready(lanes)
        self._stamp(self._had | {state.info.instance for state in self.states()})

    def change(self, added: Iterable[LaneInfo], removed: Iterable[str]) -> None:
        added = list(added)
        removed = list(removed)
        super().change(added, removed)
        self._stamp({lane.instance for lane in added}.union(removed))

    def _stamp(self, touched: set[str]) -> None:
        now = time.time()
        self.updates += 1
        for name in touched:
            if self.serves(name) and name not in self._had:
                self.added.setdefault(name, []).append(now)
                self._had.add(name)
            elif not self.serves(name) and name in self._had:
                self.removed.setdefault(name, []).append(now)
                self._had.discard(name)


async def watch(state: Path) -> dict[str, object]:
    run = json.loads((state / "run.json").read_text())
    address = f"{run['control']['host']}:{run['control']['port']}"
    secret = (state / "control.secret").read_text().strip()
    feed = await open_controller_feed(address, secret)
    subscribed = time.time()  # lanes ready before this came in the first set, not live
    table = StampingTable()
    began = time.process_time()
    await feed.follow(table)
    report = {
        "added": table.added,
        "removed": table.removed,
        "updates": table.updates,
        "subscribed": subscribed,
        "cpu_s": time.process_time() - began,
    }
    return report


if __name__ == "__main__":
    Path(sys.argv[2]).write_text(json.dumps(trio.run(watch, Path(sys.argv[1]))))
