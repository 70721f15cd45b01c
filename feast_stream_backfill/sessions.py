"""Session windows in Spark: each key's records in processing order, against the watermark.

A session's extent depends on the order its records merged in, so records are
hash-partitioned by key, sorted by key and position, and handed as Arrow batches to
:class:`session_replay.SessionReplay`, with the combined watermark's timeline
(:func:`watermarks.watermark_timeline`, broadcast as numpy columns: one row per change).
The replay takes the model's arithmetic from :mod:`rules`, in Spark's Python workers as the
driver has it (:func:`rules.following`). Firings come out with their positions, so nothing
is joined back to the records. The output (firings, dropped records, status counts) is
cached: it is read three times.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.broadcast import Broadcast
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from feast_stream_backfill import rules
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    FIRE_ORDER,
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
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import WindowInput
from feast_stream_backfill.merging_window_set import ProcessingClock, WatermarkTimeline
from feast_stream_backfill.processing_order import FIELDS, fields, from_fields
from feast_stream_backfill.session_replay import (
    AT,
    COUNT,
    KIND_OF_ROW,
    SessionReplay,
    output_schema,
)
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Windowed
from feast_stream_backfill.triggers import Trigger
from feast_stream_backfill.windows import SessionWindows

_TIME = "_time"


def session_firings(
    records: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    window: SessionWindows,
    trigger: Trigger,
    watermark_timeline: DataFrame | None,
) -> DataFrame:
    """The sessions replayed per key (:func:`replayed_per_key`), for :func:`windowed`.
    ``watermark_timeline`` (``_pos``, ``_w``) is the combined watermark's changes; None for
    processing-time sessions."""
    event_time = window.domain == "event"
    timeline = broadcast_timeline(records, watermark_timeline) if event_time else None
    lateness = trigger.allowed_lateness_ms if event_time else 0
    columns = list(dict.fromkeys(a.column for a in aggregations))
    types = records.select(*keys, *columns).schema
    replay = SessionReplay(
        len(keys), columns, aggregations, window.gap_ms, trigger, lateness, types
    )
    return replayed_per_key(
        records,
        keys,
        window.time(),
        columns,
        lambda batches: replay(batches, timeline.value if timeline else ProcessingClock()),
        output_schema(types, len(keys), aggregations),
    )


def replayed_per_key(
    records: DataFrame,
    keys: Sequence[str],
    time: Column,
    values: Sequence[str],
    replay: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    schema: StructType,
) -> DataFrame:
    """``replay`` (a ``mapInArrow`` function) over each key's records in processing order, as
    the driver's rules have it: keys, ``time``, the position's fields and ``values`` (columns,
    read by position) in; ``schema`` out, cached (the output is read several times)."""
    substituted = rules.substituted()

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        with rules.following(substituted):
            yield from replay(batches)

    return (
        records.select(
            *keys,
            time.alias(_TIME),
            PROCESSING_TIME,
            TOPIC,
            PARTITION,
            OFFSET,
            # read by position; renamed, a key aggregated is not a second key
            *[F.col(c).alias(f"_value_{i}") for i, c in enumerate(values)],
        )
        .repartition(*keys)
        .sortWithinPartitions(*keys, PROCESSING_TIME, TOPIC, PARTITION, OFFSET)
        .mapInArrow(run, schema)
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def broadcast_timeline(records: DataFrame, watermark_timeline: DataFrame) -> Broadcast:
    """The combined watermark's changes, collected in position order and broadcast: one row
    per change, small beside the records."""
    with stage("watermark"):
        # sorted where it is collected: Spark's orderBy would sample it first, computing the
        # watermark's replay twice
        changes = watermark_timeline.select(*fields(POSITION), WATERMARK).toArrow()
        ordered = changes.sort_by([(name, "ascending") for name, _ in FIELDS])
        return records.sparkSession.sparkContext.broadcast(WatermarkTimeline.from_arrow(ordered))


def windowed(job: StreamJob, records: WindowInput, replayed: DataFrame) -> Windowed:
    """A per-key replay's output (:func:`replayed_per_key`) as the strategies hand it on:
    firings as the emission log reads them (with ``_fire_pos``), dropped records per key and
    window, and the status counts, taken here, where a sum of longs overflowing in the replay
    is Flink's error. A key can write several rows at one instant (sessions merge; an OVER key
    writes one per record), so no instant is shared."""
    keys, aggregations = job.keys, job.aggregations
    kind = F.col(KIND_OF_ROW)
    firings = replayed.where(kind == "firing").select(
        *keys,
        WINDOW_START,
        WINDOW_END,
        from_fields(AT).alias(FIRE_POSITION),
        FIRED_BY_RECORD,
        "firing",
        "record_count",
        FIRE_ORDER,
        *[a.name for a in aggregations],
    )
    dropped = (  # a key's stretches may be counted apart (numpy and the replay)
        replayed.where(kind == "dropped")
        .groupBy(*keys, WINDOW_START, WINDOW_END)
        .agg(F.sum(COUNT).alias("dropped_count"))
    )
    statuses = (
        replayed.where(kind == "status")
        .groupBy(F.col("firing").alias(STATUS))
        .agg(F.sum(COUNT).alias("n"))
    )
    summing_longs = long_sums(job, records.windowed)
    with refusing_overflow(summing_longs), stage("windows and triggers"):
        counted = {row[STATUS]: row["n"] for row in statuses.collect()}
    return Windowed(
        fired=firings,
        dropped=dropped,
        counts=records.counts,
        records_without_state=records.without_state(job),
        statuses=counted,
        shared=None,
        long_sums=summing_longs,
        cached=[*records.cached, replayed],
    )
