"""The sessions' ``mapInArrow`` function: one partition's rows, sorted by key and processing
order, in; firings, dropped records and status counts out.

Whole keys are taken a chunk at a time (:func:`whole_keys`). A chunk's simple stretches
(:mod:`session_groups`: a key's runs of records whose sessions never merge, nearly all) are
computed by segmented numpy operations; the other rows stream through one
:class:`MergingWindowSet` per key. Every output row says what it is in :data:`KIND_OF_ROW`:
a firing, a count of dropped records for a key and window, or a status count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema, to_arrow_type
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import FIRE_ORDER, FIRED_BY_RECORD, WINDOW_END, WINDOW_START
from feast_stream_backfill.merging_window_set import (
    MergingWindowSet,
    ProcessingClock,
    WatermarkTimeline,
)
from feast_stream_backfill.processing_order import CLOCK, FIELDS, RECORD, STRUCT, Position
from feast_stream_backfill.session_groups import (
    Column,
    aggregate,
    classify,
    inexact,
    running,
    stretches,
    vectorisable,
)
from feast_stream_backfill.triggers import (
    DROPPED,
    ON_TIME,
    PENDING,
    PER_RECORD,
    STATUSES,
    Trigger,
)

#: The output's columns that say what a row is ("firing", "dropped", "status"), how many
#: records it counts, and where the firing happened (a prefix to the position's fields).
KIND_OF_ROW, COUNT, AT = "_kind_of_row", "_n", "_at_"
#: Rows per chunk of whole keys: numpy's vectors long enough to pay, short enough to be small.
CHUNK_ROWS = 1 << 17


def output_schema(types: StructType, width: int, aggregations: Sequence[Aggregation]):
    """The ``mapInArrow`` output's: keys (``types``' first ``width``), the kind of row, the
    window, the firing's position and label, counts and the features."""
    return StructType(
        [
            *[StructField(f.name, f.dataType, True) for f in types.fields[:width]],
            StructField(KIND_OF_ROW, StringType()),
            StructField(WINDOW_START, LongType()),
            StructField(WINDOW_END, LongType()),
            *[StructField(f"{AT}{f.name}", f.dataType) for f in STRUCT.fields],
            StructField(FIRED_BY_RECORD, BooleanType()),
            StructField("firing", StringType()),
            StructField("record_count", LongType()),
            StructField(COUNT, LongType()),
            StructField(FIRE_ORDER, LongType()),
            *[StructField(a.name, a.result_type(types[a.column].dataType)) for a in aggregations],
        ]
    )


class ReplayOutput:
    """The batches a per-key replay writes, in :func:`output_schema`'s shape: firings and
    dropped records as columns or as row tuples, and the status counts."""

    def __init__(self, schema: StructType, width: int) -> None:
        self.schema = to_arrow_schema(schema, timezone="UTC")
        self.width = width

    def batch(self, n: int, columns: dict, keys: pa.Table | None = None) -> pa.RecordBatch:
        """A batch of ``n`` rows: ``columns`` by name (a scalar repeats), ``keys``' columns,
        nulls elsewhere."""
        arrays = []
        for i, field in enumerate(self.schema):
            if keys is not None and i < self.width:
                arrays.append(keys.column(i).combine_chunks().cast(field.type))
                continue
            value = columns.get(field.name)
            if value is None:
                arrays.append(pa.nulls(n, field.type))
            elif isinstance(value, tuple):  # (numpy values, null mask)
                arrays.append(pa.array(value[0], type=field.type, mask=value[1]))
            elif isinstance(value, pa.Array):
                arrays.append(value.cast(field.type))
            elif isinstance(value, np.ndarray):
                arrays.append(pa.array(value, type=field.type))
            else:
                arrays.append(pa.array(np.full(n, value) if n else [], type=field.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def rows(self, rows: list[tuple]) -> pa.RecordBatch:
        """``rows``, each a tuple of the schema's columns, as a batch; the list is emptied."""
        out = pa.RecordBatch.from_arrays(
            [
                pa.array(c, type=t)
                for c, t in zip(zip(*rows, strict=True), self.schema.types, strict=True)
            ],
            schema=self.schema,
        )
        rows.clear()
        return out

    def statuses(self, counts: dict[str, int]) -> pa.RecordBatch:
        """The status counts, a row each."""
        status = pa.array(list(counts), pa.string())
        n = pa.array(list(counts.values()), pa.int64())
        return self.batch(len(counts), {KIND_OF_ROW: "status", "firing": status, COUNT: n})


class SessionReplay:
    """The ``mapInArrow`` function: rows sorted by key and processing order in, firings,
    dropped records and status counts out. Whole keys are taken a chunk at a time: their
    simple stretches (:mod:`session_groups`) in numpy, the rest through a
    :class:`MergingWindowSet` per key."""

    def __init__(
        self,
        width: int,
        columns: list[str],
        aggregations: Sequence[Aggregation],
        gap: int,
        trigger: Trigger,
        lateness: int,
        types: StructType,
        vectorised: bool = True,
        chunk_rows: int = CHUNK_ROWS,
    ) -> None:
        """``types``: the keys' and the aggregated columns'; ``vectorised=False`` replays
        every record (the reference the numpy path is tested against); ``chunk_rows``: about
        how many rows of whole keys are taken at a time."""
        self.chunk_rows = chunk_rows
        self.width, self.columns, self.aggregations = width, columns, aggregations
        self.gap, self.trigger, self.lateness = gap, trigger, lateness
        self.vectorised = vectorised and all(
            vectorisable(a.function, to_arrow_type(types[a.column].dataType)) for a in aggregations
        )
        self.output = ReplayOutput(output_schema(types, width, aggregations), width)
        self.value_at = [width + 5 + columns.index(a.column) for a in aggregations]

    def __call__(
        self, batches: Iterator[pa.RecordBatch], clock: WatermarkTimeline | ProcessingClock
    ) -> Iterator[pa.RecordBatch]:
        counts = dict.fromkeys(STATUSES, 0)
        for chunk in whole_keys(batches, self.width, self.chunk_rows):
            starts = key_starts(chunk, self.width)
            rest = np.arange(len(chunk))
            if self.vectorised:
                simple, output = self._simple(chunk, starts, clock, counts)
                yield from output
                rest = np.flatnonzero(~simple)
            if rest.size:
                yield from self._replayed(chunk.take(rest), clock, counts)
        yield self.output.statuses(counts)

    def _simple(
        self,
        chunk: pa.Table,
        starts: np.ndarray,
        clock: WatermarkTimeline | ProcessingClock,
        counts: dict[str, int],
    ) -> tuple[np.ndarray, list[pa.RecordBatch]]:
        """The chunk's simple stretches in numpy: (which rows they hold, their output)."""
        w = self.width
        time, pt, topic, partition, offset = (chunk.column(w + i) for i in range(5))
        t, pt = time.to_numpy(), pt.to_numpy()
        topic = topic.combine_chunks()
        partition, offset = partition.to_numpy(), offset.to_numpy()
        if isinstance(clock, WatermarkTimeline):
            watermark = clock.before_each(pt, topic, partition, offset)
        else:  # the clock: a timer for maxTs fires before the records read after maxTs
            watermark = rules.clock_watermark(pt)
        timer = self.trigger.timer is not None
        stretch = stretches(starts, t, watermark, self.gap, self.lateness)
        found = classify(stretch, t, watermark, self.gap, self.lateness, timer)
        values = [
            (a.function, Column.from_arrow(chunk.column(w + 5 + self.columns.index(a.column))))
            for a in self.aggregations
        ]
        simple = found.simple
        accepted = np.flatnonzero(simple & ~found.dropped)
        risky = inexact(values, accepted, found.session)
        if risky.any():
            which = np.cumsum(stretch) - 1
            simple &= ~np.isin(which, which[accepted[risky]])
            accepted = np.flatnonzero(simple & ~found.dropped)
        out = []
        dropped = np.flatnonzero(simple & found.dropped)
        if dropped.size:
            out.append(self._dropped(chunk, dropped, t, starts, counts))
        if accepted.size:
            if timer:
                out.append(self._by_timer(chunk, accepted, t, found.session, values, clock, counts))
            else:
                at = (
                    pt[accepted],
                    RECORD,
                    topic.take(accepted),
                    partition[accepted],
                    offset[accepted],
                )
                out.append(self._per_record(chunk, accepted, t, found.session, values, at, counts))
        return simple, [b for b in out if b.num_rows]

    def _dropped(
        self, chunk: pa.Table, rows: np.ndarray, t: np.ndarray, starts: np.ndarray, counts: dict
    ) -> pa.RecordBatch:
        """Dropped records per key and own window."""
        counts[DROPPED] += len(rows)
        key = (np.cumsum(starts) - 1)[rows]
        order = np.lexsort((t[rows], key))
        rows, key, time = rows[order], key[order], t[rows][order]
        first = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]) | (time[1:] != time[:-1])])
        n = np.diff(np.r_[first, len(rows)])
        return self.output.batch(
            len(first),
            {
                KIND_OF_ROW: "dropped",
                WINDOW_START: time[first],
                WINDOW_END: rules.session_end(time[first], self.gap),
                COUNT: n,
            },
            chunk.select(range(self.width)).take(rows[first]),
        )

    def _by_timer(self, chunk, rows, t, session, values, clock, counts) -> pa.RecordBatch:
        """Each session fires once, all its records on time, when its timer reaches maxTs;
        if that is after the archive's end, they are pending."""
        first = np.flatnonzero(np.r_[True, session[rows][1:] != session[rows][:-1]])
        records = np.diff(np.r_[first, len(rows)])
        start = np.minimum.reduceat(t[rows], first)
        end = rules.session_end(np.maximum.reduceat(t[rows], first), self.gap)
        max_ts = rules.max_timestamp(end)
        if isinstance(clock, WatermarkTimeline):
            reached, change = clock.first_reaching_each(max_ts)
        else:
            reached = np.ones(len(first), dtype=bool)
        counts[ON_TIME] += int(records[reached].sum())
        counts[PENDING] += int(records[~reached].sum())
        fired = np.flatnonzero(reached)
        if isinstance(clock, WatermarkTimeline):
            at = clock.columns(change[fired])
        else:
            at = (rules.clock_fires_at(max_ts[fired]), CLOCK, "", 0, 0)
        columns = {
            KIND_OF_ROW: "firing",
            WINDOW_START: start[fired],
            WINDOW_END: end[fired],
            FIRED_BY_RECORD: False,
            "firing": ON_TIME,
            "record_count": records[fired],
            **_at(at),
        }
        for a, (function, column) in zip(self.aggregations, values, strict=True):
            result, null = aggregate(function, column, rows, session, cumulative=False)
            columns[a.name] = (result[fired], null[fired])
        keys = chunk.select(range(self.width)).take(rows[first][fired])
        return self.output.batch(len(fired), columns, keys)

    def _per_record(self, chunk, rows, t, session, values, at, counts) -> pa.RecordBatch:
        """Each record fires its session at once, with the records so far."""
        counts[PER_RECORD] += len(rows)
        groups = session[rows]
        columns = {
            KIND_OF_ROW: "firing",
            WINDOW_START: running("cummin", t[rows], groups),
            WINDOW_END: rules.session_end(running("cummax", t[rows], groups), self.gap),
            FIRED_BY_RECORD: True,
            "firing": PER_RECORD,
            "record_count": running("cumsum", np.ones(len(rows), dtype=np.int64), groups),
        }
        columns |= _at(at)
        for a, (function, column) in zip(self.aggregations, values, strict=True):
            columns[a.name] = aggregate(function, column, rows, session, cumulative=True)
        return self.output.batch(len(rows), columns, chunk.select(range(self.width)).take(rows))

    def _replayed(
        self, chunk: pa.Table, clock: WatermarkTimeline | ProcessingClock, counts: dict
    ) -> Iterator[pa.RecordBatch]:
        """The other keys, one :class:`MergingWindowSet` each, in processing order."""
        width, gap = self.width, self.gap
        functions = [a.rules for a in self.aggregations]
        nowhere = (None,) * len(FIELDS)
        no_values = (None,) * len(self.aggregations)
        rows: list[tuple] = []

        def finish(key: tuple, sessions: MergingWindowSet) -> None:
            sessions.finish()
            for f in sessions.firings:
                at = (f.start, f.end, *f.at, f.by_record, f.label, f.record_count, None, None)
                rows.append((*key, "firing", *at, *f.values))
            for time, n in sessions.dropped.items():
                end = rules.session_end(time, gap)
                dropped = (*key, "dropped", time, end, *nowhere, None, None, None, n, None)
                rows.append((*dropped, *no_values))
            for status, n in sessions.counts.items():
                counts[status] += n

        key: tuple | None = None
        sessions: MergingWindowSet | None = None
        for batch in chunk.to_batches():
            for row in zip(*[c.to_pylist() for c in batch.columns], strict=True):
                if row[:width] != key:
                    if sessions is not None:
                        finish(key, sessions)
                    key = row[:width]
                    sessions = MergingWindowSet(gap, self.trigger, self.lateness, functions, clock)
                time, pt, topic, partition, offset = row[width : width + 5]
                sessions.add(
                    time,
                    [row[i] for i in self.value_at],
                    Position.record(pt, topic, partition, offset),
                )
            if len(rows) >= self.chunk_rows:
                yield self.output.rows(rows)
        if sessions is not None:
            finish(key, sessions)
        if rows:
            yield self.output.rows(rows)


def _at(position: tuple) -> dict:
    """A position's fields (columns or scalars) as the output's ``_at_`` columns."""
    return {f"{AT}{name}": value for (name, _), value in zip(FIELDS, position, strict=True)}


def key_starts(table: pa.Table, width: int) -> np.ndarray:
    """Per row: is it its key's first (rows sorted by key)?"""
    starts = np.zeros(len(table), dtype=bool)
    if len(table):
        starts[0] = True
    for i in range(width):
        column = table.column(i).combine_chunks()
        later, earlier = column.slice(1), column.slice(0, len(column) - 1)
        changed = pc.or_(
            pc.fill_null(pc.not_equal(later, earlier), False),
            pc.xor(later.is_null(), earlier.is_null()),
        )
        starts[1:] |= changed.to_numpy(zero_copy_only=False)
    return starts


def whole_keys(batches: Iterator[pa.RecordBatch], width: int, rows: int) -> Iterator[pa.Table]:
    """The batches regrouped into tables of about ``rows`` rows, each holding whole keys
    (a key larger than that is one table)."""
    pending: list[pa.RecordBatch] = []
    held = last_key = 0  # rows held, where the last key among them starts
    for batch in batches:
        if not batch.num_rows:
            continue
        if pending:  # the batch's key starts, its first row compared with the row before
            joined = pa.Table.from_batches([pending[-1].slice(pending[-1].num_rows - 1), batch])
            starts = np.flatnonzero(key_starts(joined, width)[1:])
        else:
            starts = np.array([0])
        if starts.size:
            last_key = held + int(starts[-1])
        pending.append(batch)
        held += batch.num_rows
        if held >= rows and last_key:
            table = pa.Table.from_batches(pending)
            yield table.slice(0, last_key)
            pending, held, last_key = table.slice(last_key).to_batches(), held - last_key, 0
    if held:
        yield pa.Table.from_batches(pending)
