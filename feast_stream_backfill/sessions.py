"""Session windows in Spark: each key's records streamed through a :class:`MergingWindowSet`.

A session's extent depends on the order its records merged in, so there is no closed form:
records are hash-partitioned by key, sorted by key and position, and streamed as Arrow batches
through one merging window set per key (:mod:`merging_window_set`, where the rules live),
against the combined watermark's timeline (:func:`watermarks.watermark_timeline`, broadcast:
one row per change). Firings come out with their positions, so nothing is joined back to the
records. The output (firings, dropped records, status counts) is cached: it is read three
times.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    FIRE_POSITION,
    FIRED_BY_RECORD,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    TOPIC,
    WATERMARK,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.merging_window_set import (
    MergingWindowSet,
    ProcessingClock,
    WatermarkTimeline,
)
from feast_stream_backfill.processing_order import FIELDS, STRUCT, Position, fields, from_fields
from feast_stream_backfill.stages import stage
from feast_stream_backfill.triggers import STATUSES, Trigger
from feast_stream_backfill.windows import SessionWindows

_ROW, _COUNT, _AT = "_kind_of_row", "_n", "_at_"  # output rows: a firing, dropped records, a status
_TIME = "_time"


def session_firings(
    records: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    window: SessionWindows,
    trigger: Trigger,
    timeline: DataFrame | None,
) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """Returns (firings, dropped, statuses, cached): firings as the emission log reads them
    (with ``_fire_pos``), dropped records per key and (own) window, ``_status`` counts, and
    the cached replay output (release it after use). ``timeline`` (``_pos``, ``_w``) is the
    combined watermark's changes; None for processing-time sessions."""
    event_time = window.domain == "event"
    changes = None
    if timeline is not None:
        with stage("watermark"):
            ordered = timeline.select(*fields(POSITION), WATERMARK).orderBy(*dict(FIELDS))
            table = ordered.toArrow()
        positions = [
            Position(*p) for p in zip(*[c.to_pylist() for c in table.columns[:-1]], strict=True)
        ]
        changes = records.sparkSession.sparkContext.broadcast(
            (positions, table.column(WATERMARK).to_pylist())
        )
    lateness = trigger.allowed_lateness_ms if event_time else 0
    columns = list(dict.fromkeys(a.column for a in aggregations))
    functions = [a.rules for a in aggregations]
    width = len(keys)
    value_at = [width + 5 + columns.index(a.column) for a in aggregations]
    types = records.select(*keys, *columns).schema
    schema = StructType(
        [
            *[StructField(f.name, f.dataType, True) for f in types.fields[:width]],
            StructField(_ROW, StringType()),
            StructField(WINDOW_START, LongType()),
            StructField(WINDOW_END, LongType()),
            *[StructField(f"{_AT}{f.name}", f.dataType) for f in STRUCT.fields],
            StructField(FIRED_BY_RECORD, BooleanType()),
            StructField("firing", StringType()),
            StructField("record_count", LongType()),
            StructField(_COUNT, LongType()),
            *[StructField(a.name, a.result_type(types[a.column].dataType)) for a in aggregations],
        ]
    )
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    nowhere = (None,) * len(FIELDS)
    no_key, no_values = (None,) * width, (None,) * len(aggregations)

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        clock = WatermarkTimeline(*changes.value) if changes else ProcessingClock()
        rows: list[tuple] = []
        counts = dict.fromkeys(STATUSES, 0)

        def finish(key: tuple, sessions: MergingWindowSet) -> None:
            sessions.finish()
            for f in sessions.firings:
                at = (f.start, f.end, *f.at, f.by_record, f.label, f.record_count, None)
                rows.append((*key, "firing", *at, *f.values))
            for time, n in sessions.dropped.items():
                where = (time, time + window.gap_ms, *nowhere, None, None, None, n)
                rows.append((*key, "dropped", *where, *no_values))
            for status, n in sessions.counts.items():
                counts[status] += n

        def batch() -> pa.RecordBatch:
            out = pa.RecordBatch.from_arrays(
                [
                    pa.array(c, type=t)
                    for c, t in zip(zip(*rows, strict=True), arrow_schema.types, strict=True)
                ],
                schema=arrow_schema,
            )
            rows.clear()
            return out

        key: tuple | None = None
        sessions: MergingWindowSet | None = None
        for records_batch in batches:
            for row in zip(*[c.to_pylist() for c in records_batch.columns], strict=True):
                if row[:width] != key:
                    if sessions is not None:
                        finish(key, sessions)
                    key = row[:width]
                    sessions = MergingWindowSet(window.gap_ms, trigger, lateness, functions, clock)
                time, pt, topic, partition, offset = row[width : width + 5]
                sessions.add(
                    time,
                    [row[i] for i in value_at],
                    Position.record(pt, topic, partition, offset),
                )
            if rows:
                yield batch()
        if sessions is not None:
            finish(key, sessions)
        for status, n in counts.items():
            count = (None, None, *nowhere, None, status, None, n)
            rows.append((*no_key, "status", *count, *no_values))
        yield batch()

    out = (
        records.select(
            *keys,
            window.time().alias(_TIME),
            PROCESSING_TIME,
            TOPIC,
            PARTITION,
            OFFSET,
            *columns,
        )
        .repartition(*keys)
        .sortWithinPartitions(*keys, PROCESSING_TIME, TOPIC, PARTITION, OFFSET)
        .mapInArrow(replay, schema)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    firings = out.where(F.col(_ROW) == "firing").select(
        *keys,
        WINDOW_START,
        WINDOW_END,
        from_fields(_AT).alias(FIRE_POSITION),
        FIRED_BY_RECORD,
        "firing",
        "record_count",
        *[a.name for a in aggregations],
    )
    dropped = out.where(F.col(_ROW) == "dropped").select(
        *keys, WINDOW_START, WINDOW_END, F.col(_COUNT).alias("dropped_count")
    )
    statuses = (
        out.where(F.col(_ROW) == "status")
        .groupBy(F.col("firing").alias(STATUS))
        .agg(F.sum(_COUNT).alias("n"))
    )
    return firings, dropped, statuses, out
