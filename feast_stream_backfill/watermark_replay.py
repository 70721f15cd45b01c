"""The combined watermark, replayed as Flink's source combines its partitions.

``CombinedWatermarkStatus`` (Flink 2.3) keeps one partial watermark per partition (split):
the combined watermark is the MIN over the active ones, the MAX over all of them when every
one is idle, and never goes down. Where idleness or session windows make the closed forms of
:mod:`watermarks` insufficient, this replays that rule over a compressed stream of events,
in order: a partition's watermark rising (``REACH``, to ``_value``), going idle (``IDLE``)
and coming back (``ACTIVE``). With idleness in one task; without, cut into time ranges
replayed at once (:func:`replay_in_ranges`). Events sharing a group (a tick, in periodic mode)
are applied together before combining, as ``onPeriodicEmit`` does. The stream has one row
per rise of a partition's watermark, not per record, and the result one row per change.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    EVENT_AT,
    EVENT_KIND,
    EVENT_VALUE,
    PARTITION,
    RISE_FROM,
    RISE_TO,
    TOPIC,
)
from feast_stream_backfill.processing_order import FIELDS, fields

REACH, IDLE, ACTIVE = 0, 1, 2
_RANGE = "_time_range"
_INDEX = "_index"  # the partition's place in the list of partitions
_NAMES = [name for name, _ in FIELDS]
_SCHEMA = ", ".join(f"{n} {t}" for n, t in FIELDS) + f", {RISE_FROM} long, {RISE_TO} long"


def replay(
    events: DataFrame,
    partitions: Sequence[tuple[str, int]],
    initial: int,
    combine: str = "min",
) -> DataFrame:
    """``events``: ``_at`` (a position: events at one position are applied together),
    ``_topic``, ``_partition``, ``_kind`` and ``_value``. Returns one row per rise of the
    combined watermark: the position's fields (``time``, ``phase``, ...), ``_from`` and
    ``_to``. Every partition starts at ``initial``, active. ``combine="max"``: the aligned
    readers' MAX over partitions (no idleness)."""

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        return combined_rises(batches, len(partitions), initial, combine)

    return (
        _indexed(events, partitions)
        .repartition(1)
        .sortWithinPartitions(*_NAMES)
        .mapInPandas(run, _SCHEMA)
    )


def replay_in_ranges(
    events: DataFrame,
    partitions: Sequence[tuple[str, int]],
    initial: int,
    combine: str,
    span: tuple[int, int],
) -> DataFrame:
    """:func:`replay` of ``REACH`` events only (no idleness), cut into time ranges replayed in
    parallel. Without idleness the combined watermark after a position depends only on each
    partition's highest value so far, so a range can start from the partitions' maxima over
    the ranges before it: a small table (ranges x partitions) computed first. ``span``: the
    events' first and last time (where they lie outside, the end ranges take them). Several
    events of one partition at one position need no grouping: the highest is kept."""
    ranges = 4 * events.sparkSession.sparkContext.defaultParallelism
    lo, hi = span
    width = max(1, -(-(hi - lo + 1) // ranges))
    which = F.least(  # monotone in time
        F.greatest(F.floor((F.col("time") - F.lit(lo)) / F.lit(width)), F.lit(0)),
        F.lit(ranges - 1),
    ).cast("int")
    indexed = _indexed(events, partitions).withColumn(_RANGE, which)
    maxima = indexed.groupBy(_RANGE, _INDEX).agg(F.max(EVENT_VALUE)).collect()
    highest = np.full((ranges, len(partitions)), initial, dtype=np.int64)
    for at, index, value in maxima:
        highest[at, index] = value
    # a range starts from each partition's highest value in the ranges before it
    starts = np.maximum.accumulate(np.vstack([np.full(len(partitions), initial), highest[:-1]]))

    def run(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        cut = ((at, part) for batch in batches for at, part in _by_range(batch))
        for at, parts in itertools.groupby(cut, key=lambda item: item[0]):
            frames = (part for _, part in parts)
            start = starts[at].tolist()
            yield from combined_rises(frames, len(partitions), initial, combine, start=start)

    return (
        indexed.repartition(ranges, _RANGE)
        .sortWithinPartitions(*_NAMES)  # ranges follow time: each one's rows are contiguous
        .mapInPandas(run, _SCHEMA)
    )


def _indexed(events: DataFrame, partitions: Sequence[tuple[str, int]]) -> DataFrame:
    """The events as the replay reads them: the position's fields, the partition's index,
    kind and value (an integer is cheaper to send to Python than the topic's name)."""
    spark = events.sparkSession
    index = spark.createDataFrame(
        [(topic, partition, i) for i, (topic, partition) in enumerate(partitions)],
        f"{TOPIC} string, {PARTITION} int, {_INDEX} int",
    )
    return events.join(F.broadcast(index), [TOPIC, PARTITION]).select(
        *fields(EVENT_AT), _INDEX, EVENT_KIND, EVENT_VALUE
    )


def _by_range(batch: pd.DataFrame) -> Iterator[tuple[int, pd.DataFrame]]:
    """A batch's runs of one range, without the range column."""
    at = batch[_RANGE].to_numpy()
    cuts = [0, *(np.flatnonzero(at[1:] != at[:-1]) + 1), len(batch)]
    rows = batch.drop(columns=_RANGE)
    for a, b in itertools.pairwise(cuts):
        yield int(at[a]), rows.iloc[a:b]


def combined_rises(
    batches: Iterable[pd.DataFrame],
    n_partitions: int,
    initial: int,
    combine: str,
    vectorised: bool = True,
    start: Sequence[int] | None = None,
) -> Iterator[pd.DataFrame]:
    """:func:`replay`'s work on the events in order (pandas batches: the position's fields,
    partition's index, kind, value). A batch of rises alone, while no partition is idle, is
    applied with numpy (:meth:`_Combined.rises`); any other, an event at a time. ``start``:
    each partition's value before the first event (every one ``initial`` if None), all
    active."""
    state = _Combined(list(start) if start is not None else [initial] * n_partitions, combine)
    state.reset_heap()
    state.highest = max(state.value, default=initial)
    values = state.value or [initial]
    state.combined = min(values) if combine == "min" else state.highest
    for batch in batches:
        if batch.empty:
            continue
        if vectorised and not any(state.idle) and (batch[EVENT_KIND] == REACH).all():
            state.rises(batch, initial)
        else:
            state.events(batch)
        if state.out:
            yield pd.DataFrame(state.out, columns=[*_NAMES, RISE_FROM, RISE_TO])
            state.out = []
    if state.here is not None:
        state.update()
    if state.out:
        yield pd.DataFrame(state.out, columns=[*_NAMES, RISE_FROM, RISE_TO])


@dataclass
class _Combined:
    """The combined watermark as the events are applied: each partition's value and
    idleness, a heap of the active values (stale entries skipped), the position of the group
    of events being applied (``here``) and the rises found (``out``)."""

    value: list[int]
    combine: str
    idle: list[bool] = field(default_factory=list)
    active: list[tuple[int, int]] = field(default_factory=list)
    highest: int = 0
    combined: int = 0
    here: tuple | None = None
    out: list[tuple] = field(default_factory=list)

    def reset_heap(self) -> None:
        if not self.idle:
            self.idle = [False] * len(self.value)
        self.active = [(v, i) for i, v in enumerate(self.value)]
        heapq.heapify(self.active)

    def update(self) -> None:
        """The group at ``here`` is complete: a rise of the combined watermark if any."""
        active, idle, value = self.active, self.idle, self.value
        while active and (idle[active[0][1]] or value[active[0][1]] != active[0][0]):
            heapq.heappop(active)
        candidate = active[0][0] if active and self.combine == "min" else self.highest
        if candidate > self.combined:
            self.out.append((*self.here, self.combined, candidate))
            self.combined = candidate

    def rises(self, batch: pd.DataFrame, initial: int) -> None:
        """A batch of rises alone, no partition idle: numpy, a group at a time."""
        at = [batch[name].to_numpy() for name in _NAMES]
        new = np.zeros(len(batch), dtype=bool)
        for column in at:
            new[1:] |= column[1:] != column[:-1]
        new[0] = self.here is None or tuple(column[0] for column in at) != self.here
        if self.here is not None and new[0]:
            self.update()  # the group the previous batch ended with is complete
        group = np.cumsum(new) - int(new[0])  # numbered from 0
        after, ends = _after_each_group(
            np.asarray(self.value, dtype=np.int64),
            batch[_INDEX].to_numpy(np.int64),
            batch[EVENT_VALUE].to_numpy(np.int64),
            group,
            self.combine,
        )
        self.highest = max(self.highest, int(ends.max(initial=initial)))
        firsts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        for g in range(len(firsts) - 1):  # the last group may go on in the next batch
            if after[g] > self.combined:
                self.out.append((*(c[firsts[g]] for c in at), self.combined, int(after[g])))
                self.combined = int(after[g])
        self.value = ends.tolist()
        self.reset_heap()
        self.here = tuple(c[-1] for c in at)

    def events(self, batch: pd.DataFrame) -> None:
        """Any batch, an event at a time."""
        width = len(_NAMES)
        for row in batch.itertuples(index=False):
            position = tuple(row[:width])
            if self.here is not None and position != self.here:
                self.update()
            self.here = position
            p = row[width]
            kind = row[width + 1]
            if kind == IDLE:
                self.idle[p] = True
                continue
            if kind == REACH:
                self.value[p] = max(self.value[p], row[width + 2])
                self.highest = max(self.highest, self.value[p])
            else:
                self.idle[p] = False
            if not self.idle[p]:
                heapq.heappush(self.active, (self.value[p], p))


def _after_each_group(
    start: np.ndarray, partition: np.ndarray, value: np.ndarray, group: np.ndarray, combine: str
) -> tuple[np.ndarray, np.ndarray]:
    """Rises of active partitions, in order, numbered by group (0, 1, ...): the combined
    watermark after each group (each partition at the highest value it has seen, from
    ``start``; MIN or MAX over partitions) and every partition's value at the end.

    A partition's values form a step function of the group; MIN of step functions is taken
    pairwise, as a tree (each merge linear in the steps), so the cost is the number of events
    times log(partitions), whatever the number of partitions."""
    n_groups = int(group[-1]) + 1
    by_partition = np.argsort(partition, kind="stable")
    steps = []
    ends = start.copy()
    split = np.flatnonzero(np.diff(partition[by_partition])) + 1
    for rows in np.split(by_partition, split):
        p = partition[rows[0]]
        running = np.maximum.accumulate(np.maximum(value[rows], start[p]))
        ends[p] = running[-1]
        steps.append((np.r_[-1, group[rows]], np.r_[start[p], running]))
    if combine == "max":
        highest = np.full(n_groups, start.max())
        for at, level in steps:
            highest[at[1:]] = np.maximum(highest[at[1:]], level[1:])
        return np.maximum.accumulate(highest), ends
    untouched = np.ones(len(start), dtype=bool)
    untouched[partition] = False
    if untouched.any():
        steps.append((np.array([-1]), np.array([start[untouched].min()])))
    while len(steps) > 1:
        merged = [_lower(*steps[i], *steps[i + 1]) for i in range(0, len(steps) - 1, 2)]
        steps = merged + steps[len(steps) - len(steps) % 2 :]
    at, level = steps[0]
    return level[np.searchsorted(at, np.arange(n_groups), side="right") - 1], ends


def _lower(
    at_a: np.ndarray, level_a: np.ndarray, at_b: np.ndarray, level_b: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lower of two step functions (``level[i]`` from group ``at[i]`` on; both start at
    group -1)."""
    at = np.union1d(at_a, at_b)
    a = level_a[np.searchsorted(at_a, at, side="right") - 1]
    b = level_b[np.searchsorted(at_b, at, side="right") - 1]
    return at, np.minimum(a, b)
