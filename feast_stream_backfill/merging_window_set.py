"""One key's session windows, as Flink's ``MergingWindowSet`` and ``WindowOperator`` keep them.

Pure Python, no Spark: :mod:`sessions` streams each key's records through one of these in
processing order. A record opens ``[t, t + gap)``; every live session it touches
(``TimeWindow.intersects``: ``start <= other.end and end >= other.start``) merges with it,
and the trigger's rule (:func:`triggers.on_element`) is applied to the *merged* window, so a
record that alone would be late can join a live session. A session's timer is where its
trigger fires it; its state is gone once the watermark (or clock) passes ``maxTs + L``.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from feast_stream_backfill.aggregations import Function
from feast_stream_backfill.processing_order import Position
from feast_stream_backfill.triggers import (
    DROPPED,
    ON_TIME,
    PENDING,
    STATUSES,
    WAITING,
    Trigger,
    on_element,
)


class WatermarkTimeline:
    """The combined watermark's changes, in processing order (the broadcast timeline)."""

    def __init__(self, positions: Sequence[Position], values: Sequence[int]) -> None:
        self.positions = list(positions)
        self.times = [p.time for p in self.positions]
        self.values = list(values)

    def before(self, at: Position) -> float:
        """The watermark a record at ``at`` sees: the last change before it."""
        i = bisect_left(self.times, at.time)
        while i < len(self.positions) and self.positions[i] < at:  # the same millisecond
            i += 1
        return self.values[i - 1] if i else -math.inf

    def first_reaching(self, target: int) -> Position | None:
        """Where the watermark first reaches ``target`` (None: not before the archive ends)."""
        i = bisect_left(self.values, target)
        return self.positions[i] if i < len(self.positions) else None


#: After every position: the archive's end.
END = Position(math.inf, 0, "", 0, 0)  # type: ignore[arg-type]


class ProcessingClock:
    """Processing time's clock: a timer for ``maxTs`` fires at ``maxTs + 1``, always."""

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
        touching = [s for s in self.sessions.values() if s.start <= end and s.end >= start]
        for s in touching:
            start, end = min(start, s.start), max(end, s.end)
        return start, end, touching

    def add(self, time: int, values: Sequence[Any], at: Position) -> str:
        """A record (its window time, aggregated values and position): its outcome."""
        self.due(at)
        start, end, touching = self.merge(time, time + self.gap)
        max_ts = end - 1
        watermark = self.watermark.before(at)
        outcome = on_element(self.trigger, max_ts + self.lateness <= watermark, max_ts <= watermark)
        if outcome == DROPPED:
            self.dropped[time] = self.dropped.get(time, 0) + 1
            self.counts[DROPPED] += 1
            return outcome
        if len(touching) == 1:  # the common case: a record extends one session
            merged = self.sessions.pop(touching[0].start)
        else:
            merged = Session(start, end, [f.zero for f in self.functions], None)
            for s in touching:
                merged.absorb(self.sessions.pop(s.start), self.functions)
        if merged.cleanup is None or merged.end != end or merged.start != start:
            merged.start, merged.end = start, end
            merged.cleanup = self.watermark.first_reaching(max_ts + self.lateness)
        merged.records += 1
        merged.accumulators = [
            a if v is None else f.add(a, v)
            for f, a, v in zip(self.functions, merged.accumulators, values, strict=True)
        ]
        self.sessions[start] = merged
        if outcome == WAITING:
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
