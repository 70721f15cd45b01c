"""One key's session windows, as Flink's ``MergingWindowSet`` and ``WindowOperator`` keep them.

Pure Python, no Spark: :mod:`sessions` streams each key's records through one of these in
processing order. A record opens ``[t, t + gap)``; every live session it touches
(:func:`rules.intersects`) merges with it, and the model's rules (:func:`rules.on_element`)
are applied to the *merged* window, so a record that alone would be late can join a live
session. A session's timer is where its trigger fires it; its state is gone once the
watermark (or clock) reaches its cleanup time (:func:`rules.cleanup_time`).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Function
from feast_stream_backfill.processing_order import LONG_MIN, RECORD, Position
from feast_stream_backfill.triggers import ON_TIME, PENDING, STATUSES, Trigger


class WatermarkTimeline:
    """The combined watermark's changes, in processing order (broadcast to every task).

    Held as numpy columns, a position's fields each (topics as codes in name order, so that
    codes compare as names do): a month of 200 ms ticks is 13M changes, too many for Python
    objects. Looked up one position at a time (the replay) or a column at a time
    (:mod:`session_groups`)."""

    def __init__(self, positions: Sequence[Position], values: Sequence[int]) -> None:
        self.topics = sorted({p.topic for p in positions})
        code = {t: i for i, t in enumerate(self.topics)}
        columns = list(zip(*positions, strict=True)) or [()] * len(Position._fields)
        time, phase, topic, partition, offset = columns
        self._set([time, phase, [code[t] for t in topic], partition, offset], values)

    @classmethod
    def from_arrow(cls, table: pa.Table) -> WatermarkTimeline:
        """From Arrow columns ``time, phase, topic, partition, offset`` and the value, sorted."""
        timeline = cls.__new__(cls)
        topic = table.column("topic").combine_chunks().dictionary_encode()
        names = topic.dictionary.to_pylist()
        timeline.topics = sorted(names)
        code = np.array([timeline.topics.index(n) for n in names], dtype=np.int64)
        codes = code[topic.indices.to_numpy(zero_copy_only=False)] if names else []
        time, phase, _, partition, offset, values = (c.to_numpy() for c in table.columns)
        timeline._set([time, phase, codes, partition, offset], values)
        return timeline

    def _set(self, fields: list, values: Sequence[int] | pa.ChunkedArray) -> None:
        self.times, self.phases, self.codes, self.partitions, self.offsets = [
            np.asarray(f, dtype=np.int64) for f in fields
        ]
        self.values = np.asarray(values, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.times)

    def position(self, i: int) -> Position:
        return Position(
            int(self.times[i]),
            int(self.phases[i]),
            self.topics[self.codes[i]] if self.topics else "",
            int(self.partitions[i]),
            int(self.offsets[i]),
        )

    def before(self, at: Position) -> float:
        """The watermark a record at ``at`` sees: the last change before it."""
        i = int(np.searchsorted(self.times, at.time, "left"))
        while i < len(self) and self.position(i) < at:  # the same millisecond
            i += 1
        return int(self.values[i - 1]) if i else -math.inf

    def first_reaching(self, target: int) -> Position | None:
        """Where the watermark first reaches ``target`` (None: not before the archive ends): the
        first change with :func:`rules.reached` (the values never decrease)."""
        i = int(np.searchsorted(self.values, target, "left"))
        return self.position(i) if i < len(self) else None

    def before_each(
        self, time: np.ndarray, topic: pa.Array, partition: np.ndarray, offset: np.ndarray
    ) -> np.ndarray:
        """:meth:`before` for a column of record positions, ``LONG_MIN`` for none yet.

        A change counts if it is earlier in processing order: at an earlier millisecond, or
        at the same one and earlier by (phase, topic, partition, offset). The few records
        sharing a millisecond with a change are ordered among those changes by a sort."""
        if not len(self):
            return np.full(len(time), LONG_MIN, dtype=np.int64)
        count = self.changes_before_each(time, topic, partition, offset)
        return np.where(count > 0, self.values[np.maximum(count, 1) - 1], LONG_MIN)

    def changes_before_each(
        self, time: np.ndarray, topic: pa.Array, partition: np.ndarray, offset: np.ndarray
    ) -> np.ndarray:
        """For a column of record positions, how many changes come before each: the index of
        the first change a record can still see (a change at the record's own position, an
        on-event watermark, comes after it)."""
        count = np.searchsorted(self.times, time, "left")
        tied = np.flatnonzero(np.searchsorted(self.times, time, "right") > count)
        if tied.size:
            count[tied] += self._earlier_same_ms(
                time[tied], count[tied], topic.take(tied), partition[tied], offset[tied]
            )
        return count

    def _earlier_same_ms(
        self,
        time: np.ndarray,
        first: np.ndarray,
        topic: pa.Array,
        partition: np.ndarray,
        offset: np.ndarray,
    ) -> np.ndarray:
        """For records at milliseconds with changes (``first``: each one's first change),
        how many of those changes are earlier than the record."""
        last = np.searchsorted(self.times, time, "right")
        lengths = last - first
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        changes = np.unique(np.repeat(first, lengths) + within)
        # Topic codes doubled, a record's topic missing from the timeline sits between two.
        names = topic.dictionary_encode()
        record_code = np.array(
            [
                2 * bisect_left(self.topics, n) - (n not in self.topics)
                for n in names.dictionary.to_pylist()
            ],
            dtype=np.int64,
        )[names.indices.to_numpy(zero_copy_only=False)]
        n = len(changes)
        order = np.lexsort(
            (
                np.r_[np.ones(n), np.zeros(len(time))],  # a record before a change at its position
                np.r_[self.offsets[changes], offset],
                np.r_[self.partitions[changes], partition],
                np.r_[2 * self.codes[changes], record_code],
                np.r_[self.phases[changes], np.full(len(time), RECORD)],
                np.r_[self.times[changes], time],
            )
        )
        is_change = order < n
        records = order[~is_change] - n
        earlier = np.empty(len(time), dtype=np.int64)
        earlier[records] = np.cumsum(is_change)[~is_change] - np.searchsorted(
            self.times[changes], time[records], "left"
        )
        return earlier

    def columns(self, changes: np.ndarray) -> tuple:
        """The positions of ``changes`` (indices), a column per field."""
        topics = np.array(self.topics or [""], dtype=object)[self.codes[changes]]
        return (
            self.times[changes],
            self.phases[changes],
            topics,
            self.partitions[changes],
            self.offsets[changes],
        )

    def first_reaching_each(self, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`first_reaching` for a column: (reached, index of the change)."""
        i = np.searchsorted(self.values, target, "left")
        return i < len(self), np.minimum(i, len(self) - 1)


#: After every position: the archive's end.
END = Position(math.inf, 0, "", 0, 0)  # type: ignore[arg-type]


class ProcessingClock:
    """Processing time's clock: a timer for ``maxTs`` always fires (at
    :func:`rules.clock_fires_at`)."""

    def before(self, at: Position) -> float:
        return -math.inf

    def first_reaching(self, target: int) -> Position:
        return Position.clock(target)


class Firing(NamedTuple):
    start: int
    end: int
    at: Position
    by_record: bool
    label: str
    record_count: int
    values: tuple


@dataclass
class Session:
    start: int
    end: int
    accumulators: list[Any]
    cleanup: Position | None  # from here on its state is gone (None: not in the archive,
    # or not computed yet)
    records: int = 0
    waiting: int = 0  # records no firing has emitted yet
    timer: Position | None = None  # where its trigger's timer fires it

    def absorb(self, other: Session, functions: Sequence[Function]) -> None:
        self.records += other.records
        self.waiting += other.waiting
        self.accumulators = [
            f.merge(a, b)
            for f, a, b in zip(functions, self.accumulators, other.accumulators, strict=True)
        ]


@dataclass
class MergingWindowSet:
    """Sessions of one key; ``functions`` aggregate the values each record brings.
    ``lateness`` is the allowed lateness (0 in processing time: Flink's ``cleanupTime``)."""

    gap: int
    trigger: Trigger
    lateness: int
    functions: Sequence[Function]
    watermark: WatermarkTimeline | ProcessingClock
    sessions: dict[int, Session] = field(default_factory=dict)  # live ones, by start
    firings: list[Firing] = field(default_factory=list)
    dropped: dict[int, int] = field(default_factory=dict)  # a dropped record's own start -> n
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))

    def merge(self, start: int, end: int) -> tuple[int, int, list[Session]]:
        """The window ``[start, end)`` merged with every live session it touches."""
        touching = [
            s for s in self.sessions.values() if rules.intersects(s.start, s.end, start, end)
        ]
        for s in touching:
            start, end = min(start, s.start), max(end, s.end)
        return start, end, touching

    def add(self, time: int, values: Sequence[Any], at: Position) -> str:
        """A record (its window time, aggregated values and position): its outcome."""
        self.due(at)
        start, end, touching = self.merge(time, rules.session_end(time, self.gap))
        max_ts = rules.max_timestamp(end)
        watermark = self.watermark.before(at)
        closed = rules.state_gone(watermark, max_ts, self.lateness)
        outcome = rules.on_element(
            self.trigger, closed, rules.past_max_timestamp(watermark, max_ts)
        )
        if outcome == rules.DROPPED:
            self.dropped[time] = self.dropped.get(time, 0) + 1
            self.counts[rules.DROPPED] += 1
            return outcome
        if len(touching) == 1:  # the common case: a record extends one session
            merged = self.sessions.pop(touching[0].start)
        else:
            merged = Session(start, end, [f.zero for f in self.functions], None)
            for s in touching:
                merged.absorb(self.sessions.pop(s.start), self.functions)
        if merged.cleanup is None or merged.end != end or merged.start != start:
            merged.start, merged.end = start, end
            merged.cleanup = self.watermark.first_reaching(
                rules.cleanup_time(max_ts, self.lateness)
            )
        merged.records += 1
        merged.accumulators = [
            a if v is None else f.add(a, v)
            for f, a, v in zip(self.functions, merged.accumulators, values, strict=True)
        ]
        self.sessions[start] = merged
        if outcome == rules.WAITING:
            merged.waiting += 1
            reached = merged.cleanup if not self.lateness else None
            merged.timer = reached or self.watermark.first_reaching(max_ts)
        else:
            self.counts[outcome] += 1
            self._fire(merged, at, True, outcome)
        return outcome

    def due(self, before: Position) -> None:
        """Timers before ``before`` fire, in timestamp order; then the sessions whose
        cleanup time has passed are forgotten."""
        due = [s for s in self.sessions.values() if s.timer is not None and s.timer < before]
        for s in sorted(due, key=lambda s: (s.timer, s.end)):
            self._fire(s, s.timer, False, ON_TIME)
            s.timer = None
        self.expire(before)

    def expire(self, before: Position) -> None:
        gone = [
            s.start for s in self.sessions.values() if s.cleanup is not None and s.cleanup < before
        ]
        for start in gone:
            del self.sessions[start]

    def finish(self) -> None:
        """The archive's end: what has not fired waits forever (PENDING)."""
        self.due(END)
        self.counts[PENDING] += sum(s.waiting for s in self.sessions.values())
        self.sessions.clear()

    def _fire(self, s: Session, at: Position, by_record: bool, label: str) -> None:
        self.counts[ON_TIME] += s.waiting  # a firing emits every record waiting in it
        s.waiting = 0
        values = tuple(f.result(a) for f, a in zip(self.functions, s.accumulators, strict=True))
        self.firings.append(Firing(s.start, s.end, at, by_record, label, s.records, values))
