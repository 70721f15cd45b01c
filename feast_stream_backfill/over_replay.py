"""OVER windows' ``mapInArrow`` function: one partition's rows, sorted by key and processing
order, in; emissions, dropped rows and status counts out, in the session replay's shape
(:func:`session_replay.output_schema`).

Each key replays Flink SQL's OVER function for its frame (:class:`OverWindows`) with the
model's rules (``rules.over_*``). Ordered by event time, against the combined watermark's
timeline: a row waits for a timer at its own time, which fires at the first rise of the
watermark to it after the row came; the timer retracts the rows that left a bounded frame,
adds the rows of its time and writes each of them out with the result. Ordered by processing
time, against the clock: a ``RANGE`` frame's rows of a millisecond wait for a timer set for
the next one, and a ``ROWS`` frame writes each row as it comes, its state cleared by a
retention timer. What a row sees depends on every timer its key fired before it (the time it
last emitted, the cleanup timers), so a key is replayed in order, row by row: no Spark window
function or join states a keyed timer service's order, and no library replays one.

In the emission log a row at ``t`` is the window ending at ``t + 1``; it starts at ``t - p``
for ``RANGE`` ``p``, and at the first row the value aggregates for the other frames. A dropped
row is counted in ``[t - p, t + 1)`` for ``RANGE`` ``p``, else in ``[t, t + 1)``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Aggregation, Function
from feast_stream_backfill.merging_window_set import WatermarkTimeline
from feast_stream_backfill.processing_order import CLOCK, FIELDS, Position
from feast_stream_backfill.session_replay import (
    CHUNK_ROWS,
    ReplayOutput,
    key_starts,
    output_schema,
    whole_keys,
)
from feast_stream_backfill.triggers import DROPPED, ON_TIME, PENDING, STATUSES
from feast_stream_backfill.windows import OverWindows


class _WatermarkClock:
    """Event-time timers: each fires at the first change of the combined watermark reaching
    its time after the changes its row had seen; ordered by that change's index."""

    def __init__(self, timeline: WatermarkTimeline) -> None:
        self.timeline = timeline

    def due(self, time: int, seen: int) -> int:
        return max(seen, int(np.searchsorted(self.timeline.values, time, "left")))

    def position(self, due: int) -> Position:
        return self.timeline.position(due)

    @property
    def end(self) -> int:
        """Timers due here or later never fire in the archive (pending)."""
        return len(self.timeline)


class _ProcessingClock:
    """Processing-time timers: a timer set for ``time`` fires at
    :func:`rules.clock_fires_at` of it, before that millisecond's records; ordered by that
    instant. A row at ``pt`` has seen the timers due before ``pt + 1``."""

    def due(self, time: int, seen: int) -> int:
        return rules.clock_fires_at(time)

    def position(self, due: int) -> Position:
        return Position(due, CLOCK, "", 0, 0)

    @property
    def end(self) -> float:
        """A live job's clock goes on: every timer fires."""
        return math.inf


class _Written(NamedTuple):
    """One output of a key: ``rows`` rows of ``time`` written at ``at`` (by a record, or by a
    timer), each with ``held`` rows aggregated from ``start`` on."""

    time: int
    rows: int
    held: int
    values: list
    at: Position
    by_record: bool
    start: int


class KeyOverState:
    """One key's state in Flink's OVER function for its frame (:class:`OverWindows`): rows
    waiting for their timers, rows emitted and still in the frame (time order: the order
    Flink's RocksDB state retracts them in, which decides a floating sum's rounding), the
    accumulators, ``lastTriggeringTs``, the cleanup time and the pending timers (one per time,
    as Flink's timer service keeps them), each with when it fires (:class:`_WatermarkClock`,
    :class:`_ProcessingClock`)."""

    def __init__(
        self,
        window: OverWindows,
        functions: Sequence[Function],
        highest: Sequence[bool | None],
        clock: _WatermarkClock | _ProcessingClock,
    ):
        """``highest``: per function, a maximum (True), a minimum (False) or neither."""
        self.window, self.functions, self.clock = window, functions, clock
        self.preceding, self.unbounded = window.preceding, window.unbounded
        self.processing = window.domain == "processing"
        self.cleans = window.frame == "range" and not window.unbounded
        self.retention = window.state_ttl_ms
        self.highest = highest
        self._added = 0  # rows added so far: each held row's sequence number
        self.firings: list[_Written] = []
        self.dropped: dict[int, int] = {}
        self._clear()
        self._timers: dict[int, int] = {}  # time -> when it is due
        self._due: list[tuple[int, int]] = []  # (due, time), a heap; deleted timers stay

    def _clear(self) -> None:
        #: timer time -> (the rows' time, the rows)
        self.waiting: dict[int, tuple[int, list[list]]] = {}
        #: (time, sequence, values); an unbounded frame never retracts: its first row only
        self.held: deque[tuple[int, int, list]] = deque()
        self.count = 0  # rows in the frame
        self.accumulators = [f.zero for f in self.functions]
        self.extremes = [None if h is None else _Extreme(h) for h in self.highest]
        self.last = 0
        self.cleanup: int | None = None
        self.lost = False  # a processing-time ROWS frame's oldest row lost track of

    def add(self, time: int, values: list, seen: int, at: Position) -> None:
        """A row at ``time`` (its event or processing time) read at ``at`` after ``seen``
        (watermark changes, or with processing time ``pt + 1``)."""
        self.fire_before(seen)
        if self.processing and self.window.frame == "rows":
            self._read(time, values, at)
            return
        if self.processing:
            timer = rules.over_clock_timer(time)
        elif self.unbounded:
            timer = time
            if seen > 0 and rules.over_late(time, self.clock.timeline.values[seen - 1]):
                self.dropped[time] = self.dropped.get(time, 0) + 1
                return
        else:
            timer = time
            if rules.over_dropped(time, self.last):
                self.dropped[time] = self.dropped.get(time, 0) + 1
                return
        self.waiting.setdefault(timer, (time, []))[1].append(values)
        self._timer(timer, seen)
        if self.cleans and (
            self.cleanup is None or rules.over_cleanup_renewed(self.cleanup, time, self.preceding)
        ):
            self.cleanup = rules.over_cleanup_time(time, self.preceding)
            self._timer(self.cleanup, seen)

    def _read(self, time: int, row: list, at: Position) -> None:
        """A processing-time ``ROWS`` frame's ``processElement``: the retention timer moved,
        then the row written at once with the rows before it (the oldest retracted from a
        full frame, unless the frame lost track of it)."""
        if self.retention and (
            self.cleanup is None or rules.retention_renewed(self.cleanup, time, self.retention)
        ):
            if self.cleanup is not None:
                del self._timers[self.cleanup]  # deleted, as Flink deletes the old one
            self.cleanup = rules.retention_cleanup_time(time, self.retention)
            self._timer(self.cleanup, 0)
        if rules.over_rows_full(self.count, self.preceding) and self.lost:
            self.lost = False  # nothing found to retract
        elif rules.over_rows_full(self.count, self.preceding):
            self._retract()
            self.lost = rules.over_rows_lost(self.count)
        self._add(time, row)
        self.firings.append(
            _Written(time, 1, self.count, self._results(), at, True, self.held[0][0])
        )

    def _timer(self, time: int, seen: int) -> None:
        """Register a timer (one per time)."""
        if time in self._timers:
            return
        due = self.clock.due(time, seen)
        self._timers[time] = due
        heapq.heappush(self._due, (due, time))

    def fire_before(self, due: float) -> None:
        """Fire the timers due before ``due``, in Flink's order: by when due, then by time."""
        while self._due and self._due[0][0] < due:
            at, time = heapq.heappop(self._due)
            if self._timers.get(time) != at:
                continue  # deleted
            del self._timers[time]
            self._on_timer(time, self.clock.position(at))

    def _on_timer(self, time: int, at: Position) -> None:
        if self.cleanup is not None and rules.over_clears(time, self.cleanup):
            self._clear()
            return
        row_time, rows = self.waiting.pop(time, (time, None))
        if rows and self.window.frame == "rows":
            for row in rows:  # each written with the rows up to it
                if not self.unbounded and rules.over_rows_full(self.count, self.preceding):
                    self._retract()
                self._add(row_time, row)
                self.firings.append(
                    _Written(row_time, 1, self.count, self._results(), at, False, self.held[0][0])
                )
        elif rows:  # RANGE: the rows of a time written together, each with all of them
            if not self.unbounded:
                first = rules.over_start(row_time, self.preceding)
                while self.held and self.held[0][0] < first:
                    self._retract()
            for row in rows:
                self._add(row_time, row)
            if self.unbounded:
                start = self.held[0][0]
            else:
                start = rules.over_start(row_time, self.preceding)
            self.firings.append(
                _Written(row_time, len(rows), self.count, self._results(), at, False, start)
            )
        self.last = time

    def _add(self, time: int, row: list) -> None:
        self._added += 1
        self._fold(self._added, row, retract=False)
        self.count += 1
        if not (self.unbounded and self.held):  # an unbounded frame keeps its first row only
            self.held.append((time, self._added, row))

    def _retract(self) -> None:
        _, sequence, gone = self.held.popleft()
        self._fold(sequence, gone, retract=True)
        self.count -= 1

    def _fold(self, sequence: int, row: list, retract: bool) -> None:
        for i, (f, value) in enumerate(zip(self.functions, row, strict=True)):
            if value is None:
                continue
            extreme = self.extremes[i]
            if extreme is not None and retract:
                extreme.remove(sequence, value)
            elif extreme is not None:
                extreme.add(sequence, value)
            else:
                acc = self.accumulators[i]
                self.accumulators[i] = f.retract(acc, value) if retract else f.add(acc, value)

    def _results(self) -> list:
        return [
            e.result() if e is not None else f.result(acc)
            for f, acc, e in zip(self.functions, self.accumulators, self.extremes, strict=True)
        ]


class _Extreme:
    """The minimum or maximum of the rows held, as :func:`aggregations._extreme` folds them
    (NaN if any is NaN; of equal values, the earliest), kept as rows come and go oldest first:
    a monotonic deque, each row in and out once, where folding the rows held at every firing
    would cost the range's length per row."""

    def __init__(self, highest: bool) -> None:
        self.highest = highest
        self.rows: deque[tuple[int, object]] = deque()  # (sequence, value), each beating the next
        self.nans = 0

    def add(self, sequence: int, value: object) -> None:
        if isinstance(value, float) and math.isnan(value):
            self.nans += 1
            return
        rows = self.rows
        while rows and (value > rows[-1][1] if self.highest else value < rows[-1][1]):
            rows.pop()
        rows.append((sequence, value))

    def remove(self, sequence: int, value: object) -> None:
        if isinstance(value, float) and math.isnan(value):
            self.nans -= 1
        elif self.rows and self.rows[0][0] == sequence:
            self.rows.popleft()

    def result(self) -> object:
        if self.nans:
            return math.nan
        return self.rows[0][1] if self.rows else None


class OverReplay:
    """The ``mapInArrow`` function: rows sorted by key and processing order in (keys, event
    time, the position's fields, the aggregated values), whole keys a chunk at a time, each
    replayed by a :class:`KeyOverState`."""

    def __init__(
        self,
        width: int,
        aggregations: Sequence[Aggregation],
        window: OverWindows,
        types: StructType,
        chunk_rows: int = CHUNK_ROWS,
    ) -> None:
        """``types``: the keys' and the aggregated columns' (the input holds one value per
        aggregation, in order)."""
        self.width, self.aggregations, self.window = width, aggregations, window
        self.functions = [a.rules for a in aggregations]
        self.highest = [
            {"max": True, "min": False}.get(a.function) if a.rules.retract is None else None
            for a in aggregations
        ]
        self.chunk_rows = chunk_rows
        self.output = ReplayOutput(output_schema(types, width, aggregations), width)

    def __call__(
        self, batches: Iterator[pa.RecordBatch], timeline: WatermarkTimeline | None
    ) -> Iterator[pa.RecordBatch]:
        """``timeline``: the combined watermark's changes; None for processing-time frames."""
        counts = dict.fromkeys(STATUSES, 0)
        rows: list[tuple] = []
        w = self.width
        clock = _ProcessingClock() if timeline is None else _WatermarkClock(timeline)
        for chunk in whole_keys(batches, w, self.chunk_rows):
            pt, topic, partition, offset = (chunk.column(w + i) for i in range(1, 5))
            starts = key_starts(chunk, w)
            columns = [c.to_pylist() for c in chunk.columns]
            keys, times = list(zip(*columns[:w], strict=True)), columns[w]
            values = list(zip(*columns[w + 5 :], strict=True))
            if timeline is None:  # a row has seen the timers due up to its millisecond
                seen = [t + 1 for t in columns[w + 1]]
                positions = [Position.record(*p) for p in zip(*columns[w + 1 : w + 5], strict=True)]
            else:
                seen = timeline.changes_before_each(
                    pt.to_numpy(), topic.combine_chunks(), partition.to_numpy(), offset.to_numpy()
                ).tolist()
                positions = [None] * len(chunk)  # written by timers only
            state: KeyOverState | None = None
            for i in range(len(chunk)):
                if starts[i]:
                    if state is not None:
                        self._finish(keys[i - 1], state, rows, counts)
                    state = KeyOverState(self.window, self.functions, self.highest, clock)
                state.add(times[i], list(values[i]), seen[i], positions[i])
            if state is not None:
                self._finish(keys[-1], state, rows, counts)
            if rows:
                yield self.output.rows(rows)
        yield self.output.statuses(counts)

    def _finish(self, key: tuple, state: KeyOverState, rows: list, counts: dict) -> None:
        state.fire_before(state.clock.end)
        nowhere = (None,) * len(FIELDS)
        no_values = (None,) * len(self.aggregations)
        for order, written in enumerate(state.firings):
            firing = (
                *key,
                "firing",
                written.start,
                written.time + 1,
                *written.at,
                written.by_record,
                ON_TIME,
                written.held,
                None,
                order,
                *written.values,
            )
            rows.extend([firing] * written.rows)
            counts[ON_TIME] += written.rows
        for time, n in state.dropped.items():
            start = rules.over_start(time, state.preceding) if state.cleans else time
            dropped = (*key, "dropped", start, time + 1, *nowhere, None, None, None, n, None)
            rows.append((*dropped, *no_values))
            counts[DROPPED] += n
        counts[PENDING] += sum(len(r) for _, r in state.waiting.values())
