"""The endpoint's time series: what it records per lane and interval, and reading it back.

The endpoint (``endpoint._timeseries``) writes it; ``ddsup report`` and the efficiency
summary read it. The format lives here, in the record layer, so that writer and readers
share one definition (docs/operating.md documents it for users).

One file per endpoint process, ``series/endpoint-<pid>.jsonl`` in the state directory:
a restarted endpoint appends to a new file, and readers merge them all. JSON lines:

- the header, first: ``{"series": "endpoint", "format": 1, "pid": …, "interval": 1.0,
  "fields": [...FIELDS], "time": <Unix s>}``;
- then one line per interval in which something happened (quiet intervals write
  nothing): ``{"t": <end, Unix s>, "d": <span, s>, "lanes": ["llama@0", "llama@3"],
  "counts": [started, finished, failed, outstanding, busy, bytes, started, …],
  "refused": {"llama": {"429": 3}}, "prefix_cache": {"llama@0": [834, 512]}}``: ``lanes``
  names the lanes that had activity, and ``counts`` holds their ``FIELDS`` one lane after
  another (lane ``i`` at ``counts[6*i:6*i+6]``; flat because decoding it is three times
  faster than an object per lane, which matters for a day of a thousand lanes).
  ``refused`` appears when the endpoint answered a request itself with an error, ``cut``
  (``{"llama@0": 2}``) when attempts were cut short by their client hanging up or by the
  endpoint's own stop (a lane's ``failed`` never counts those), ``prefix_cache`` when
  the lanes' own prefix-cache counters moved (per lane: the prompt tokens it looked up in
  its cache and those it found there, over the line's span; written by the process that
  samples the lanes, worker 0 when there are several), ``first`` (Unix s) on the line
  where the first request of the process started, and ``quiet`` (Unix s) when every lane
  was idle at the line's end: the moment the last of them finished.

``busy`` is the seconds of the span during which the lane had at least one request
outstanding: the "serving" of the efficiency table. A line usually spans one interval;
when the size budget holds lines back (many lanes, long runs), one line covers several.

An endpoint with ``workers > 1`` runs several processes at once, each with its own file,
all writing on the same wall-clock boundaries. :func:`read_series` combines the lines of
one interval from several files into one (:func:`combine_processes`): counts add up, and
``busy``, which does not (two workers with a request outstanding over the same half
second make half a second busy, not one), is combined as if the workers' busy periods
were independent: span × (1 − Π (1 − busy_i / span_i)). That is exact when every
worker's lane was idle or busy all along (light load, full load), exact on average when
requests reach workers at random (the kernel spreads connections over them), and always
between the largest busy_i and their sum. A process sees only its own requests, so the
exact union is in no file. Lines of one interval are found by rounding their end to the
interval and their span to whole intervals; two lines of one file never combine, and
files that never overlap (a restarted endpoint) read exactly as written.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from ddsup._json import Json, JsonObject
from ddsup.record._samples import LaneSamples

SERIES_DIR = "series"
SERIES_FORMAT = 1
FIELDS = ("started", "finished", "failed", "outstanding", "busy", "bytes")
STARTED, FINISHED, FAILED, OUTSTANDING, BUSY, BYTES = range(len(FIELDS))
CUT = -1
"""The status a lane attempt ends with when its client hung up or the endpoint stopped
(counted in ``cut``, not ``failed``: the lane did nothing wrong)."""


def series_file_name(pid: int) -> str:
    """The file one endpoint process writes, inside ``SERIES_DIR``."""
    return f"endpoint-{pid}.jsonl"


def header_line(pid: int, interval: float, wall: float) -> str:
    header = {
        "series": "endpoint",
        "format": SERIES_FORMAT,
        "pid": pid,
        "interval": interval,
        "fields": list(FIELDS),
        "time": round(wall, 3),
    }
    return json.dumps(header, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class SeriesLine:
    """One written line: the counts of ``lanes`` over ``[end - span, end]``.

    ``counts`` holds each lane's ``FIELDS`` in turn (lane ``i`` at ``counts[6*i:6*i+6]``);
    ``refused`` maps a model to ``{status: count}`` of the answers the endpoint gave
    itself (429 overloaded, 503 no ready lane, 502 every lane failed, …).
    """

    end: float
    span: float
    lanes: Sequence[str]
    counts: Sequence[float]
    refused: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    first: float | None = None
    quiet: float | None = None
    cut: Mapping[str, int] = field(default_factory=dict)  # lane → attempts cut short
    prefix_cache: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def start(self) -> float:
        return self.end - self.span

    def total(self, index: int) -> float:
        """``FIELDS[index]`` summed over the line's lanes."""
        return sum(self.counts[index :: len(FIELDS)])


@dataclass(frozen=True)
class Series:
    """Every line of every endpoint process of a run, sorted by end time."""

    lines: tuple[SeriesLine, ...] = ()
    interval: float = 1.0
    files: int = 0
    problems: tuple[str, ...] = ()

    @functools.cached_property
    def by_lane(self) -> dict[str, LaneSamples]:
        """Lane → its samples as columns (computed once: a day is millions of them).

        Consecutive lines usually name the same lanes in the same order, so each such
        block is transposed at once (``zip(*counts)``, in C) instead of sample by sample.
        """
        lanes: dict[str, LaneSamples] = {}
        for block in _blocks(self.lines):
            # nothing went through a lane before the first request
            starts = [max(line.start, line.first or line.start) for line in block]
            ends = [line.end for line in block]
            columns = list(zip(*(line.counts for line in block), strict=True))
            for i, name in enumerate(block[0].lanes):
                samples = lanes.get(name)
                if samples is None:
                    samples = lanes[name] = LaneSamples()
                samples.starts.extend(starts)
                samples.ends.extend(ends)
                samples.busy.extend(columns[i * len(FIELDS) + BUSY])
                samples.started.extend(columns[i * len(FIELDS) + STARTED])
        return {name: _in_order(samples) for name, samples in lanes.items()}

    def prefix_cache(self) -> tuple[int, int]:
        """Prompt tokens the lanes looked up in their prefix caches, and those found."""
        pairs = [pair for line in self.lines for pair in line.prefix_cache.values()]
        return sum(q for q, _ in pairs), sum(h for _, h in pairs)

    @property
    def first_request(self) -> float | None:
        """When the first request went to a lane (exact when the writer recorded it)."""
        exact = [line.first for line in self.lines if line.first is not None]
        if exact:
            return min(exact)
        for line in self.lines:
            if line.total(STARTED):
                return line.start
        return None

    @property
    def last_request_end(self) -> float | None:
        """When the last request finished; the end of the last busy line if still going."""
        for line in reversed(self.lines):
            if line.lanes:
                return line.quiet if line.quiet is not None else line.end
        return None


def _blocks(lines: Sequence[SeriesLine]) -> Iterator[Sequence[SeriesLine]]:
    """Runs of consecutive lines that name the same lanes in the same order."""
    first = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or lines[i].lanes != lines[first].lanes:
            if lines[first].lanes:
                yield lines[first:i]
            first = i


def _in_order(samples: LaneSamples) -> LaneSamples:
    """Sorted by start (lines of several endpoint files interleave; one file is in order)."""
    if samples.starts == sorted(samples.starts):
        return samples
    order = sorted(range(len(samples.starts)), key=samples.starts.__getitem__)
    columns = (samples.starts, samples.ends, samples.busy, samples.started)
    return LaneSamples(*([column[k] for k in order] for column in columns))


def read_series(state_dir: Path) -> Series:
    """Every series file of a run; a malformed line is skipped and named in ``problems``."""
    directory = state_dir / SERIES_DIR
    try:
        paths = sorted(directory.glob("endpoint-*.jsonl"))
    except OSError:
        paths = []
    files: list[list[SeriesLine]] = []
    problems: list[str] = []
    interval = 1.0
    for path in paths:
        lines: list[SeriesLine] = []
        for where, record in read_jsonl(path, state_dir, problems):
            if "series" in record:  # a header: its interval, if it has a usable one
                given = record.get("interval")
                if isinstance(given, int | float) and given > 0:
                    interval = float(given)
                continue
            try:
                lines.append(_line(record))
            except (KeyError, TypeError, ValueError, IndexError) as err:
                problems.append(f"{where}: not a series line ({err}); skipped")
        files.append(lines)
    lines = combine_processes(files, interval)
    lines.sort(key=lambda line: line.end)
    return Series(tuple(lines), interval, len(paths), tuple(problems))


def _line(record: JsonObject) -> SeriesLine:
    lanes, counts = record.get("lanes", []), record.get("counts", [])
    if not isinstance(lanes, list) or not isinstance(counts, list):
        raise TypeError("lanes and counts must be lists")
    if len(counts) != len(FIELDS) * len(lanes):
        raise ValueError(f"{len(counts)} counts for {len(lanes)} lanes of {len(FIELDS)} each")
    # checks in C (map, set): a day of a thousand lanes is millions of numbers
    if not set(map(type, lanes)) <= {str} or not set(map(type, counts)) <= {int, float}:
        raise TypeError("lanes must be strings and counts numbers")
    first, quiet = record.get("first"), record.get("quiet")
    return SeriesLine(
        end=_number(record["t"]),
        span=max(0.0, _number(record["d"])),
        lanes=cast("list[str]", lanes),  # checked above, at once
        counts=cast("list[float]", counts),
        refused={
            str(model): {str(status): _count(n) for status, n in _object(by_status).items()}
            for model, by_status in _object(record.get("refused", {})).items()
        },
        first=None if first is None else _number(first),
        quiet=None if quiet is None else _number(quiet),
        cut={str(lane): _count(n) for lane, n in _object(record.get("cut", {})).items()},
        prefix_cache={
            str(lane): _pair(pair)
            for lane, pair in _object(record.get("prefix_cache", {}), "prefix_cache").items()
        },
    )


def _object(value: Json, name: str = "") -> JsonObject:
    if not isinstance(value, dict):
        raise TypeError(f"{name or 'refused and cut'} must be an object")
    return value


def _number(value: Json) -> float:
    if not isinstance(value, int | float | str):
        raise TypeError(f"a number, not {type(value).__name__}")
    return float(value)  # a numeric string too, as the counts' checks let through


def _count(value: Json) -> int:
    return int(_number(value))


def _pair(value: Json) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("a prefix cache pair is [queried, hit]")
    return _count(value[0]), _count(value[1])


def combine_processes(files: Sequence[Sequence[SeriesLine]], interval: float) -> list[SeriesLine]:
    """Every line of ``files`` (one list per process), those of one interval combined."""
    if len(files) < 2:
        return [line for lines in files for line in lines]
    groups: dict[tuple[int, int, int], _Group] = {}
    for lines in files:
        seen: dict[tuple[int, int], int] = {}
        for line in lines:
            bucket = (round(line.end / interval), round(line.span / interval))
            nth = seen[bucket] = seen.get(bucket, -1) + 1  # a file's second line there stays apart
            groups.setdefault((*bucket, nth), _Group()).lines.append(line)
    return [group.combined() for group in groups.values()]


@dataclass
class _Group:
    """The lines of one interval, one per process."""

    lines: list[SeriesLine] = field(default_factory=list)

    def combined(self) -> SeriesLine:
        lines = self.lines
        if len(lines) == 1:
            return lines[0]
        # within one file a line starts where its previous one ended, so the earliest end
        # and the earliest start keep combined lines from overlapping one another
        end = min(line.end for line in lines)
        span = max(0.0, end - min(line.start for line in lines))
        if all(line.lanes == lines[0].lanes for line in lines):
            lanes = list(lines[0].lanes)  # the common case: whole lines at once, in C
            counts = [sum(column) for column in zip(*(x.counts for x in lines), strict=True)]
        else:
            lanes, counts = _aligned(lines)
        idle = [1.0] * len(lanes)  # per lane: the product of (1 - busy share) over processes
        for line, own in zip(lines, _per_lane(lines, lanes), strict=True):
            scale = 1.0 / line.span if line.span > 0 else math.inf  # no span: busy is all of it
            busy = line.counts[BUSY :: len(FIELDS)]
            for at, value in zip(own, busy, strict=True):
                if value > 0:
                    idle[at] *= 1.0 - min(1.0, value * scale)
        counts[BUSY :: len(FIELDS)] = [round(span * (1.0 - x), 3) for x in idle]
        return SeriesLine(
            end=end,
            span=span,
            lanes=lanes,
            counts=counts,
            refused=_refused(lines),
            first=min((x.first for x in lines if x.first is not None), default=None),
            quiet=_quiet(lines),
            cut=_cut(lines),
            prefix_cache=_prefix_cache(lines),
        )


def _per_lane(lines: Sequence[SeriesLine], lanes: list[str]) -> list[Sequence[int]]:
    """For each line, the index in ``lanes`` of each of its lanes."""
    if all(line.lanes == lanes for line in lines):
        same = range(len(lanes))
        return [same] * len(lines)
    where = {lane: i for i, lane in enumerate(lanes)}
    return [[where[lane] for lane in line.lanes] for line in lines]


def _aligned(lines: Sequence[SeriesLine]) -> tuple[list[str], list[float]]:
    """The union of the lines' lanes and their counts added up, lane by lane."""
    width = len(FIELDS)
    lanes = list(dict.fromkeys(lane for line in lines for lane in line.lanes))
    where = {lane: i for i, lane in enumerate(lanes)}
    counts: list[float] = [0] * (width * len(lanes))
    for line in lines:
        for i, lane in enumerate(line.lanes):
            at = where[lane] * width
            for k in range(width):
                counts[at + k] += line.counts[i * width + k]
    return lanes, counts


def _refused(lines: Sequence[SeriesLine]) -> dict[str, dict[str, int]]:
    total: dict[str, dict[str, int]] = {}
    for line in lines:
        for model, by_status in line.refused.items():
            mine = total.setdefault(model, {})
            for status, n in by_status.items():
                mine[status] = mine.get(status, 0) + n
    return total


def _cut(lines: Sequence[SeriesLine]) -> dict[str, int]:
    total: dict[str, int] = {}
    for line in lines:
        for lane, n in line.cut.items():
            total[lane] = total.get(lane, 0) + n
    return total


def _prefix_cache(lines: Sequence[SeriesLine]) -> dict[str, tuple[int, int]]:
    total: dict[str, tuple[int, int]] = {}
    for lane, (queries, hits) in (x for line in lines for x in line.prefix_cache.items()):
        had = total.get(lane, (0, 0))
        total[lane] = (had[0] + queries, had[1] + hits)
    return total


def _quiet(lines: Sequence[SeriesLine]) -> float | None:
    """Every lane idle at the end only if so in every process that had lanes busy."""
    active = [line for line in lines if line.lanes]
    if not active or any(line.quiet is None for line in active):
        return None
    return max(line.quiet for line in active if line.quiet is not None)


def read_jsonl(
    path: Path, relative_to: Path, problems: list[str]
) -> Iterator[tuple[str, JsonObject]]:
    """``(file:line, object)`` for each JSON object line of ``path``.

    Tolerant by design, for files of live runs: a missing file yields nothing, a last line
    without its newline (being written right now) is ignored unless it parses, and a
    malformed line elsewhere is skipped with a note in ``problems`` naming file and line.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return
    except OSError as err:
        problems.append(f"{_name(path, relative_to)}: cannot read ({err.strerror or err})")
        return
    text = data.decode("utf-8", errors="replace")
    complete, _, partial = text.rpartition("\n")
    rows = complete.split("\n") if complete else []
    if partial.strip():
        rows.append(partial)  # a last line without newline: kept only if it parses
    name = _name(path, relative_to)
    being_written = len(rows) if partial.strip() else 0
    for number, row in enumerate(rows, 1):
        if not row.strip():
            continue
        try:
            record: Json = json.loads(row)
        except ValueError:
            if number != being_written:
                problems.append(f"{name}:{number}: not JSON; skipped")
            continue
        if isinstance(record, dict):
            yield f"{name}:{number}", record
        else:
            problems.append(f"{name}:{number}: not a JSON object; skipped")


def _name(path: Path, relative_to: Path) -> str:
    try:
        return str(path.relative_to(relative_to))
    except ValueError:
        return str(path)
