"""The stages of a backfill that no B, L or T changes, computed once and kept.

Processing times, duplicates, enrichment and window assignment depend on the archive and the
job's window alone; the advisor, the timelines and the anomaly report judge the same records
under other watermark settings, so they share these results instead of rerunning
:func:`feast_stream_backfill.backfill` (whose first stages this repeats, with the same core
functions).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.backfill import StreamJob
from feast_stream_backfill.columns import (
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    POSITION,
    TOPIC,
)
from feast_stream_backfill.enrichment import enrich
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.processing_time import with_processing_time
from feast_stream_backfill.records import read_records
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy


def check_explainable(job: StreamJob) -> None:
    """Refuse, with the reason, the jobs whose cost B and L cannot change or that have no
    closed form to share."""
    if job.window.merges:
        raise ValueError(
            "explain: session windows are not supported (their firings come from a replay per "
            "key, with nothing to share across watermark settings); tumbling and sliding are"
        )
    if job.window.domain != "event":
        raise ValueError(
            "explain: processing-time windows never drop and never wait for a watermark, so "
            "B and L change nothing; use an event-time window"
        )
    overridden = [t.name for t in job.topics if t.out_of_orderness_ms is not None]
    if overridden:
        raise ValueError(
            f"explain: topics {overridden} have their own out-of-orderness bound; the advisor "
            "varies one B for every topic (drop the per-topic bounds to use it)"
        )


def with_settings(
    job: StreamJob, bound_ms: int, lateness_ms: int, idle_timeout_ms: int | None
) -> StreamJob:
    """The job with another B, L and T, everything else as it is."""
    trigger = type(job.trigger)(lateness_ms)
    assert isinstance(trigger, EventTimeTrigger | PerRecordTrigger)
    watermark = replace(
        job.watermark, out_of_orderness_ms=bound_ms, idle_timeout_ms=idle_timeout_ms
    )
    return replace(job, trigger=trigger, watermark=watermark)


@dataclass
class Prepared:
    """``distinct``: every distinct record with ``_pt`` and ``_pos`` (the watermark's input);
    ``windowed``: the records that reach the window operator, one row per (record, window);
    ``counts``: records read and duplicates removed."""

    job: StreamJob
    distinct: DataFrame
    windowed: DataFrame
    counts: dict[str, int]

    def strategy(self, bound_ms: int, idle_timeout_ms: int | None) -> WatermarkStrategy:
        return replace(
            self.job.watermark, out_of_orderness_ms=bound_ms, idle_timeout_ms=idle_timeout_ms
        )

    def release(self) -> None:
        self.windowed.unpersist()
        self.distinct.unpersist()


def prepare(spark: SparkSession, job: StreamJob) -> Prepared:
    """Read, time, deduplicate, enrich and assign windows once (as :func:`backfill` does)."""
    check_explainable(job)
    records = reduce(
        DataFrame.unionByName,
        [
            read_records(spark, t, job.payload_columns).select(
                TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns
            )
            for t in job.topics
        ],
    )
    timed = with_processing_time(records, job.processing_time)
    distinct, windowed = _stages(job, timed)
    distinct.persist(StorageLevel.MEMORY_AND_DISK)
    windowed.persist(StorageLevel.MEMORY_AND_DISK)
    row = timed.agg(
        F.count(F.lit(1)).alias("records_read"),
        F.sum(F.col(DUPLICATE).cast("long")).alias("duplicates_removed"),
        F.sum(F.col(CONFLICT).cast("long")).alias("conflicts"),
    ).first()
    if row["conflicts"]:  # as backfill() refuses them
        raise BadArchiveError(
            f"{row['conflicts']} record(s) archived twice with different content; "
            "refusing to pick one (the backfill names the first)"
        )
    counts = {"records_read": row["records_read"], "duplicates_removed": row["duplicates_removed"]}
    return Prepared(job, distinct, windowed, counts)


def _stages(job: StreamJob, timed: DataFrame) -> tuple[DataFrame, DataFrame]:
    distinct = timed.where(~F.col(DUPLICATE)).withColumn(POSITION, record_position())
    kept = enrich(distinct, job.lookups, job.derived) if job.lookups or job.derived else distinct
    return distinct, job.window.assign(kept)


def without(prepared: Prepared, removed: Column) -> Prepared:
    """The same job over the archive less the records matching ``removed``, processing times
    inferred again (a broken record also moved its partition's later ones); not kept."""
    job = prepared.job
    records = prepared.distinct.where(~removed).select(
        TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns
    )
    distinct, windowed = _stages(job, with_processing_time(records, job.processing_time))
    return Prepared(job, distinct, windowed, prepared.counts)
