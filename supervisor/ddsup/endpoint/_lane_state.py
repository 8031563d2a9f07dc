"""One lane as the endpoint knows it: its identity (:class:`LaneInfo`) and its load
(:class:`LaneState`: requests in flight through every worker, its last queue sample, its
connections).

A lane's requests in flight live in a :class:`SharedCounts` table, one slot per lane, so
that every worker of the endpoint sees the total over all workers. Slots are tied to the
lane's identity (instance and URL): a lane that leaves and comes back keeps its slot,
and requests still in flight on its old state count towards it, as they should. The
slot's shared cells hold its passive-ejection state (:mod:`._ejection`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddsup.endpoint._shared_counts import SharedCounts
from ddsup.endpoint._upstream import ConnectionPool

Names = tuple[str, ...]
SAMPLED_MAX = 1 << 14  # fresh samples a table notes for the choice's index, at most
# A lane's shared cells (SharedCounts.cell), its passive-ejection state (see ._ejection):
STREAK = 0  # failures in a row
EJECTED_UNTIL = 1  # microseconds of time.monotonic() until which it is out of the rotation
EJECTIONS = 2  # ejections since its last success (each doubles the next one's length)
BEGUN = 3  # 1 once a request began since the sampler last looked (see ._metrics_sampler)


@dataclass(frozen=True)
class LaneInfo:
    """One lane as the endpoint sees it: ``url`` is its base URL, ``http://host:port``.

    ``served_names``: the other names its unit says it answers to. ``api_key``: the key
    the endpoint sends it (the lane's own, never a client's; not in ``repr``).
    """

    instance: str
    model: str
    url: str
    served_names: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)


class LaneState:
    """A lane's load: requests in flight through the endpoint and its last queue sample."""

    __slots__ = (
        "_cell",
        "_mark",
        "_sampled",
        "counts",
        "info",
        "level",
        "names",
        "order",
        "pool",
        "sampled_at",
        "slot",
        "waiting",
    )

    def __init__(
        self,
        info: LaneInfo,
        max_idle: int,
        counts: SharedCounts,
        slot: int,
        learned: Names,
        sampled: list[LaneState] | None = None,
    ) -> None:
        self.info = info
        self.counts = counts
        self.slot = slot
        self.names = frozenset({info.model, *info.served_names, *learned})
        self.waiting: int | None = None  # vllm:num_requests_waiting, None = no good sample
        self.sampled_at = float("-inf")
        self.pool = ConnectionPool(info.url, max_idle, info.api_key)
        self.order = 0  # its place in the table's order, and ...
        self.level = -3  # ... in the choice's index (both kept by ._admission.Admission)
        self._sampled = sampled  # LaneTable.sampled
        self._cell = counts.cell
        self._mark = counts.mark

    @property
    def ejected_until(self) -> int:
        """Microseconds of :func:`time.monotonic` until which the lane is ejected."""
        return self._cell(self.slot, EJECTED_UNTIL)

    @property
    def outstanding(self) -> int:
        """Requests in flight to this lane through every worker of the endpoint."""
        return self.counts.total(self.slot)

    def begin(self) -> None:
        """One more request of this process in flight to the lane.

        It also marks the lane as begun (a plain store into a shared cell, in that order:
        see :meth:`take_begun`), so that the sampler, which samples a lane with nothing
        in flight rarely, samples it on its next tick even when the request is over by then.
        """
        self.counts.add(self.slot, 1)
        self._mark(self.slot, BEGUN, 1)

    def take_begun(self) -> bool:
        """Whether a request began since the last call (any worker's); clears the mark.

        A worker's mark that lands between the read and the clear is lost, but its
        request was counted before it was marked: a caller that reads
        :attr:`outstanding` after this call sees it unless it ended in between.
        """
        if not self._cell(self.slot, BEGUN):
            return False
        self._mark(self.slot, BEGUN, 0)
        return True

    def end(self) -> None:
        self.counts.add(self.slot, -1)

    def queue(self, now: float, stale_after: float) -> int:
        """Outstanding requests, or the lane's own waiting count when a fresh sample says more.

        ``now`` and the sample times are :func:`time.monotonic` (shared by processes).
        """
        waiting = self.waiting
        if waiting is not None and now - self.sampled_at <= stale_after:
            return max(self.outstanding, waiting)
        return self.outstanding

    def record_sample(self, waiting: int | None, now: float) -> None:
        """A good sample (``waiting``), or ``None`` when the lane's /metrics failed."""
        self.waiting = waiting
        self.sampled_at = now
        sampled = self._sampled
        if sampled is not None and len(sampled) < SAMPLED_MAX:
            sampled.append(self)
