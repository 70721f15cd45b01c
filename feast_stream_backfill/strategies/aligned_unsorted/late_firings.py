"""The firings late records cause, where the job allows lateness: found without sorting every
record by offset.

A record read after the watermark passed its window's ``maxTs`` (and before its cleanup time)
fires the window at once with every record the window holds so far
(``EventTimeTrigger.onElement``): its on-time records, all read before the tick that fired the
window, and the late records read up to it. So each late firing is the window's on-time
partial aggregates (kept by :func:`window_aggregates.per_status`) combined with the late
records' own, in processing order: only the late records are read again, and only their own
processing times are computed. A late record's processing time is ``D2`` plus the highest
event time of its partition up to it (:func:`rules.read_at`): the highest of the blocks of 64
offsets before its own (a running max over the blocks, a row each) and of its own block's
records up to it (those few blocks read again).
"""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    EVENT_TIME,
    FIRE_POSITION,
    FIRED_BY_RECORD,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    TOPIC,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.strategies.aligned_unsorted import window_aggregates
from feast_stream_backfill.strategies.aligned_unsorted.offsets import (
    BLOCK,
    HIGHEST_BEFORE,
    highest_by_block,
)
from feast_stream_backfill.triggers import LATE, ON_TIME

#: Late (record, window) pairs up to which they and their blocks are broadcast to the reads
#: of the records (beyond, Spark joins them as it sees fit).
MAX_BROADCAST = 1 << 20

_LATE = "_is_late"  # a part that is a late record, not the window's on-time records


def late_firings(
    job: StreamJob,
    records: DataFrame,
    per_status: DataFrame,
    watermarked: window_aggregates.Watermarked,
    grouped: DataFrame,
    late_pairs: int,
) -> tuple[DataFrame, DataFrame]:
    """Every late firing, as :func:`window_operator.firings` gives them: the window, the late
    record's place in the processing order (``_fire_pos``), ``record_count`` and the features
    of the window's on-time records and its late ones up to this one. ``per_status``: the
    windows' aggregate by status, with their partials; ``grouped``: the records by block
    (:func:`offsets.group_records` with ``highest``); ``late_pairs``: how many (record,
    window) pairs are late. Kept, with the late pairs it was computed from (released with it:
    released before, Spark would compute it again from every record): a row per late
    firing."""
    small = late_pairs <= MAX_BROADCAST
    window = [*job.keys, WINDOW_START, WINDOW_END]
    types = {a.column: records.schema[a.column].dataType for a in job.aggregations}
    partials = [n for a in job.aggregations for n in a.partial_names(types[a.column])]
    late = (
        window_aggregates.late_pairs(records, watermarked, job)
        .dropDuplicates([TOPIC, PARTITION, OFFSET, WINDOW_START])  # a copy fires once
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )
    timed = late.select(TOPIC, PARTITION, OFFSET).distinct()
    read_at = _read_at(records, timed, grouped, job.processing_time.min_delay_ms, small)
    own = (
        late.join(_hinted(read_at, small), [TOPIC, PARTITION, OFFSET])
        .groupBy(*window, TOPIC, PARTITION, OFFSET, PROCESSING_TIME)
        .agg(
            F.count(F.lit(1)).alias("_records"),
            *[
                p
                for a in job.aggregations
                for p in a.partials(F.col(a.column), F.lit(False), types[a.column])
            ],
        )
        .select(
            *window,
            record_position().alias(POSITION),
            (F.col("_records") * 2).alias(window_aggregates.WEIGHT),
            *partials,
            F.lit(True).alias(_LATE),
        )
    )
    fired = own.select(*window).distinct()
    on_time = (
        per_status.where(F.col(STATUS) == ON_TIME)
        .join(_hinted(fired, small), window, "left_semi")
        .select(
            *window,
            F.lit(None).cast(own.schema[POSITION].dataType).alias(POSITION),
            window_aggregates.WEIGHT,
            *partials,
            F.lit(False).alias(_LATE),
        )
    )
    so_far = (
        Window.partitionBy(*window)
        .orderBy(F.col(POSITION).asc_nulls_first())
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    running = own.unionByName(on_time).select(
        *window,
        F.col(POSITION).alias(FIRE_POSITION),
        F.lit(True).alias(FIRED_BY_RECORD),
        F.lit(LATE).alias("firing"),
        F.shiftright(F.sum(window_aggregates.WEIGHT).over(so_far), 1).alias("record_count"),
        *[a.merged(F.lit(True), types[a.column], so_far) for a in job.aggregations],
        _LATE,
    )
    kept = running.where(F.col(_LATE)).drop(_LATE).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    kept.count()
    return kept, late


def _hinted(df: DataFrame, small: bool) -> DataFrame:
    return F.broadcast(df) if small else df


def _read_at(
    records: DataFrame, timed: DataFrame, grouped: DataFrame, delay_ms: int, small: bool
) -> DataFrame:
    """``_pt`` of the records ``timed`` (topic, partition, offset): :func:`rules.read_at` the
    highest event time of their partition up to them, from the blocks before theirs and the
    records of their own block up to them; ``small``: their blocks are broadcast."""
    before = highest_by_block(grouped).select(TOPIC, PARTITION, BLOCK, HIGHEST_BEFORE)
    asked = timed.withColumn(BLOCK, F.shiftright(OFFSET, 6))
    neighbours = (
        records.select(TOPIC, PARTITION, F.col(OFFSET).alias("_n_offset"), EVENT_TIME)
        .withColumn(BLOCK, F.shiftright("_n_offset", 6))
        .join(
            _hinted(asked.select(TOPIC, PARTITION, BLOCK).distinct(), small),
            [TOPIC, PARTITION, BLOCK],
            "left_semi",
        )
    )
    within = (
        asked.join(neighbours, [TOPIC, PARTITION, BLOCK])
        .where(F.col("_n_offset") <= F.col(OFFSET))
        .groupBy(TOPIC, PARTITION, BLOCK, OFFSET)
        .agg(F.max(EVENT_TIME).alias("_in_block"))
    )
    highest = F.greatest(F.col(HIGHEST_BEFORE), F.col("_in_block"))
    return within.join(before, [TOPIC, PARTITION, BLOCK], "left").select(
        TOPIC, PARTITION, OFFSET, rules.read_at(highest, delay_ms).alias(PROCESSING_TIME)
    )
