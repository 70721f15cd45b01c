"""OVER windows' ``mapInArrow`` function: one partition's rows, sorted by key and processing
order, in; emissions, dropped rows and status counts out, in the session replay's shape
(:func:`session_replay.output_schema`).

Each key replays Flink SQL's OVER function for its frame (:class:`OverWindows`) against the
combined watermark's timeline, with the model's rules (``rules.over_*``): a row waits for a
timer at its own time, which fires at the first rise of the watermark to it after the row
came; the timer retracts the rows that left a bounded frame, adds the rows of its time and
writes each of them out with the result. What a row sees depends on every timer its key fired
before it (the time it last emitted, the cleanup timers), so a key is replayed in order, row by
row: no Spark window function or join states a keyed timer service's order, and no library
replays one.

In the emission log a row at ``t`` is the window ending at ``t + 1``; it starts at ``t - p``
for ``RANGE`` ``p``, and at the first row the value aggregates for the other frames. A dropped
row is counted in ``[t - p, t + 1)`` for ``RANGE`` ``p``, else in ``[t, t + 1)``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Aggregation, Function
from feast_stream_backfill.merging_window_set import WatermarkTimeline
from feast_stream_backfill.processing_order import FIELDS
from feast_stream_backfill.session_replay import (
    CHUNK_ROWS,
    ReplayOutput,
    key_starts,
    output_schema,
    whole_keys,
)
from feast_stream_backfill.triggers import DROPPED, ON_TIME, PENDING, STATUSES
from feast_stream_backfill.windows import OverWindows


class KeyOverState:
    """One key's state in Flink's OVER function for its frame (:class:`OverWindows`): rows
    waiting for their timers, rows emitted and still in the frame (time order: the order
    Flink's RocksDB state retracts them in, which decides a floating sum's rounding), the
    accumulators, ``lastTriggeringTs``, a ``RANGE`` frame's cleanup time and the pending timers
    (one per time, as Flink's timer service keeps them), each with the timeline change it
    fires at."""

    def __init__(
        self,
        window: OverWindows,
        functions: Sequence[Function],
        highest: Sequence[bool | None],
        timeline: WatermarkTimeline,
    ):
        """``highest``: per function, a maximum (True), a minimum (False) or neither."""
        self.window, self.functions, self.timeline = window, functions, timeline
        self.preceding, self.unbounded = window.preceding, window.unbounded
        self.cleans = window.frame == "range" and not window.unbounded
        self.highest = highest
        self._added = 0  # rows added so far: each held row's sequence number
        #: (time, rows, record count, values, change index, first time aggregated)
        self.firings: list[tuple] = []
        self.dropped: dict[int, int] = {}
        self._clear()
        self._timers: dict[int, int] = {}
        self._due: list[tuple[int, int]] = []  # (change index, time), a heap

    def _clear(self) -> None:
        self.waiting: dict[int, list[list]] = {}
        #: (time, sequence, values); an unbounded frame never retracts: its first row only
        self.held: deque[tuple[int, int, list]] = deque()
        self.count = 0  # rows in the frame
        self.accumulators = [f.zero for f in self.functions]
        self.extremes = [None if h is None else _Extreme(h) for h in self.highest]
        self.last = 0
        self.cleanup: int | None = None

    def add(self, time: int, values: list, seen: int) -> None:
        """A row at event ``time`` arrives after ``seen`` changes of the watermark."""
        self.fire_before(seen)
        if self.unbounded:
            dropped = seen > 0 and rules.over_late(time, self.timeline.values[seen - 1])
        else:
            dropped = rules.over_dropped(time, self.last)
        if dropped:
            self.dropped[time] = self.dropped.get(time, 0) + 1
            return
        self.waiting.setdefault(time, []).append(values)
        self._timer(time, seen)
        if self.cleans and (
            self.cleanup is None or rules.over_cleanup_renewed(self.cleanup, time, self.preceding)
        ):
            self.cleanup = rules.over_cleanup_time(time, self.preceding)
            self._timer(self.cleanup, seen)

    def _timer(self, time: int, seen: int) -> None:
        """Register a timer: it fires at the first change after the ``seen`` ones that reaches
        its time (a watermark reaches the operator only when it rises)."""
        if time in self._timers:
            return
        change = max(seen, int(np.searchsorted(self.timeline.values, time, "left")))
        self._timers[time] = change
        heapq.heappush(self._due, (change, time))

    def fire_before(self, change: int) -> None:
        """Fire the timers due at changes before ``change``, in Flink's order: by change, then
        by time."""
        while self._due and self._due[0][0] < change:
            at, time = heapq.heappop(self._due)
            del self._timers[time]
            self._on_timer(time, at)

    def _on_timer(self, time: int, at: int) -> None:
        if self.cleanup is not None and rules.over_clears(time, self.cleanup):
            self._clear()
            return
        rows = self.waiting.pop(time, None)
        if rows and self.window.frame == "rows":
            for row in rows:  # each written with the rows up to it
                if not self.unbounded and rules.over_rows_full(self.count, self.preceding):
                    self._retract()
                self._add(time, row)
                self.firings.append((time, 1, self.count, self._results(), at, self.held[0][0]))
        elif rows:  # RANGE: the rows of a time written together, each with all of them
            if not self.unbounded:
                first = rules.over_start(time, self.preceding)
                while self.held and self.held[0][0] < first:
                    self._retract()
            for row in rows:
                self._add(time, row)
            start = self.held[0][0] if self.unbounded else rules.over_start(time, self.preceding)
            self.firings.append((time, len(rows), self.count, self._results(), at, start))
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
        self, batches: Iterator[pa.RecordBatch], timeline: WatermarkTimeline
    ) -> Iterator[pa.RecordBatch]:
        counts = dict.fromkeys(STATUSES, 0)
        rows: list[tuple] = []
        w = self.width
        for chunk in whole_keys(batches, w, self.chunk_rows):
            pt, topic, partition, offset = (chunk.column(w + i) for i in range(1, 5))
            seen = timeline.changes_before_each(
                pt.to_numpy(), topic.combine_chunks(), partition.to_numpy(), offset.to_numpy()
            ).tolist()
            starts = key_starts(chunk, w)
            columns = [c.to_pylist() for c in chunk.columns]
            keys, times = list(zip(*columns[:w], strict=True)), columns[w]
            values = list(zip(*columns[w + 5 :], strict=True))
            state: KeyOverState | None = None
            for i in range(len(chunk)):
                if starts[i]:
                    if state is not None:
                        self._finish(keys[i - 1], state, rows, counts)
                    state = KeyOverState(self.window, self.functions, self.highest, timeline)
                state.add(times[i], list(values[i]), seen[i])
            if state is not None:
                self._finish(keys[-1], state, rows, counts)
            if rows:
                yield self.output.rows(rows)
        yield self.output.statuses(counts)

    def _finish(self, key: tuple, state: KeyOverState, rows: list, counts: dict) -> None:
        state.fire_before(len(state.timeline))
        nowhere = (None,) * len(FIELDS)
        no_values = (None,) * len(self.aggregations)
        for order, (time, n, held, values, at, start) in enumerate(state.firings):
            firing = (
                *key,
                "firing",
                start,
                time + 1,
                *state.timeline.position(at),
                False,
                ON_TIME,
                held,
                None,
                order,
                *values,
            )
            rows.extend([firing] * n)
            counts[ON_TIME] += n
        for time, n in state.dropped.items():
            start = rules.over_start(time, state.preceding) if state.cleans else time
            dropped = (*key, "dropped", start, time + 1, *nowhere, None, None, None, n, None)
            rows.append((*dropped, *no_values))
            counts[DROPPED] += n
        counts[PENDING] += sum(len(r) for r in state.waiting.values())
