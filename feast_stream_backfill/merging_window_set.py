"""One key's session windows, as Flink's ``MergingWindowSet`` and ``WindowOperator`` keep them.

Pure Python, no Spark: :mod:`sessions` streams the records of the keys no closed form covers
through one of these, in processing order. A record opens ``[t, t + gap)``; every live session
it touches (``TimeWindow.intersects``: ``start <= other.end and end >= other.start``) merges
with it, and the trigger's rule (:func:`triggers.on_element`) is applied to the *merged*
window, so a record that alone would be late can join a live session. A session's timer
waits for the watermark (or clock) to reach its ``maxTs``; its state is gone once it reaches
``maxTs + L``.

Time is what each record brings: the watermark it sees (processing time: the clock, its
``pt - 1``, as a timer for ``maxTs`` fires at ``maxTs + 1`` before that millisecond's records)
and, at the end, the archive's last watermark. A timer fires "before this record" iff the
record's watermark has reached its target: the firing carries the target, and the caller
finds where the watermark first reached it (:mod:`watermark_lookup`). Timers due before one
record fire by timestamp, as their positions would order them (the watermark never goes down).
"""

from __future__ import annotations

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


class Firing(NamedTuple):
    start: int
    end: int
    at: Position | None  # a record's firing: its position
    target: int | None  # a timer's: the watermark it waited for (its ``maxTs``)
    by_record: bool
    label: str
    record_count: int
    values: tuple


@dataclass
class Session:
    start: int
    end: int
    accumulators: list[Any]
    records: int = 0
    waiting: int = 0  # records no firing has emitted yet
    timer: int | None = None  # the watermark its trigger's timer waits for (its maxTs)

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
    ``lateness`` is the allowed lateness (0 in processing time: Flink's ``cleanupTime``);
    ``last_watermark`` is the watermark when the archive ends."""

    gap: int
    trigger: Trigger
    lateness: int
    functions: Sequence[Function]
    last_watermark: float
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

    def add(self, time: int, values: Sequence[Any], at: Position, watermark: float) -> str:
        """A record (its window time, aggregated values, position and the watermark it
        sees): its outcome."""
        self.due(watermark)
        start, end, touching = self.merge(time, time + self.gap)
        max_ts = end - 1
        outcome = on_element(self.trigger, max_ts + self.lateness <= watermark, max_ts <= watermark)
        if outcome == DROPPED:
            self.dropped[time] = self.dropped.get(time, 0) + 1
            self.counts[DROPPED] += 1
            return outcome
        if len(touching) == 1:  # the common case: a record extends one session
            merged = self.sessions.pop(touching[0].start)
        else:
            merged = Session(start, end, [f.zero for f in self.functions])
            for s in touching:
                merged.absorb(self.sessions.pop(s.start), self.functions)
        merged.start, merged.end = start, end
        merged.records += 1
        merged.accumulators = [
            a if v is None else f.add(a, v)
            for f, a, v in zip(self.functions, merged.accumulators, values, strict=True)
        ]
        self.sessions[start] = merged
        if outcome == WAITING:
            merged.waiting += 1
            merged.timer = max_ts
        else:
            self.counts[outcome] += 1
            self._fire(merged, at, None, outcome)
        return outcome

    def due(self, watermark: float) -> None:
        """Timers the watermark has reached fire, in timestamp order; then the sessions
        whose cleanup time (``maxTs + L``) it has reached are forgotten."""
        due = [s for s in self.sessions.values() if s.timer is not None and s.timer <= watermark]
        for s in sorted(due, key=lambda s: s.timer):
            self._fire(s, None, s.timer, ON_TIME)
            s.timer = None
        gone = [s.start for s in self.sessions.values() if s.end - 1 + self.lateness <= watermark]
        for start in gone:
            del self.sessions[start]

    def finish(self) -> None:
        """The archive's end: what has not fired waits forever (PENDING)."""
        self.due(self.last_watermark)
        self.counts[PENDING] += sum(s.waiting for s in self.sessions.values())
        self.sessions.clear()

    def _fire(self, s: Session, at: Position | None, target: int | None, label: str) -> None:
        self.counts[ON_TIME] += s.waiting  # a firing emits every record waiting in it
        s.waiting = 0
        values = tuple(f.result(a) for f, a in zip(self.functions, s.accumulators, strict=True))
        self.firings.append(
            Firing(s.start, s.end, at, target, at is not None, label, s.records, values)
        )
