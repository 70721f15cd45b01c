"""A job's records, read from every topic, timed and checked: the first stage of every
strategy that needs each record's processing time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    ARCHIVE_TIME,
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    POSITION,
    TOPIC,
)
from feast_stream_backfill.enrichment import enrich
from feast_stream_backfill.errors import BadArchiveError, conflicting_copies
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.processing_time import with_processing_time
from feast_stream_backfill.records import RecordChecks, observed_records
from feast_stream_backfill.stages import stage


def job_records(
    spark: SparkSession, job: StreamJob, *, archive_time: bool = False
) -> tuple[DataFrame, list[RecordChecks]]:
    """Every topic's records, normalized, with the columns the job reads, and each topic's value
    checks: the caller observes them on its first pass over every record, then verifies.
    ``archive_time``: each topic's own event-time column too (``ARCHIVE_TIME``), so that a
    filter on event times reaches the archive's reader (Parquet row groups, Delta files)."""
    refused = job.archive_keys if job.null_keys == "refuse" else []
    numeric = [
        a.column
        for a in job.aggregations
        if a.function in ("sum", "mean") and a.column in job.payload_columns
    ]
    read = [
        observed_records(spark, t, job.payload_columns, keys=refused, numeric=numeric)
        for t in job.topics
    ]
    own_time = [
        [F.col(t.timestamp_col).alias(ARCHIVE_TIME)] if archive_time else [] for t in job.topics
    ]
    records = reduce(
        DataFrame.unionByName,
        [
            df.select(TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns, *own)
            for (df, _), own in zip(read, own_time, strict=True)
        ],
    )
    return records, [checks for _, checks in read]


def timed_records(spark: SparkSession, job: StreamJob) -> tuple[DataFrame, dict[str, int]]:
    """Every topic's records with their processing times and duplicate flags (kept: the counts
    and everything after read them), and the counts ``records_read`` and ``duplicates_removed``.

    A record archived twice with different content is refused, naming the first: picking one
    would be a guess.
    """
    records, read = job_records(spark, job)
    timed = with_processing_time(records, job.processing_time)
    for checks in read:  # on the pass that sorts the records, which keeps every one
        timed = checks.observe(timed)
    timed = timed.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    with stage("processing time"):
        counts = timed.agg(
            F.count(F.lit(1)).alias("records_read"),
            F.sum(F.col(DUPLICATE).cast("long")).alias("duplicates_removed"),
            F.sum(F.col(CONFLICT).cast("long")).alias("conflicts"),
            F.count_if(~F.col(DUPLICATE) & job.filtered_out()).alias("records_filtered"),
            F.count_if(~F.col(DUPLICATE) & ~job.filtered_out() & job.null_key()).alias(
                "records_null_key"
            ),
        ).first()
    try:
        for checks in read:
            checks.verify()
    except BadArchiveError:
        timed.unpersist()
        raise
    if counts["conflicts"]:
        example = timed.where(F.col(CONFLICT)).select(TOPIC, PARTITION, OFFSET).first()
        timed.unpersist()
        n = counts["conflicts"]
        raise conflicting_copies(example[TOPIC], n, example[PARTITION], example[OFFSET])
    names = ["records_read", "duplicates_removed"]
    names += ["records_null_key"] if job.null_keys == "drop" else []
    names += ["records_filtered"] if job.where is not None else []
    return timed, {name: counts[name] for name in names}


def distinct_records(timed: DataFrame) -> DataFrame:
    """Each record once, with its place in the processing order (the watermark's input)."""
    return timed.where(~F.col(DUPLICATE)).withColumn(POSITION, record_position())


def keyed_records(job: StreamJob, distinct: DataFrame) -> DataFrame:
    """The records that reach ``keyBy``: those ``where`` holds for (all without one), less,
    with ``null_keys="drop"``, those whose key has a null (the others were refused when the
    job does not drop them)."""
    kept = distinct if job.where is None else distinct.where(~job.filtered_out())
    return kept if job.null_keys == "refuse" else kept.where(~job.null_key())


def refuse_problems(read: Sequence[RecordChecks], kept: Sequence[DataFrame]) -> None:
    """Each topic's value problems counted and named (:meth:`RecordChecks.refuse_problems`),
    releasing ``kept`` before the error."""
    try:
        for checks in read:
            checks.refuse_problems()
    except BadArchiveError:
        for df in kept:
            df.unpersist()
        raise


@dataclass
class WindowInput:
    """The records a window operator sees, and what it was computed from.

    ``distinct``: every record once, with its processing time and position (the watermark's
    input: in Flink every record passes the source's watermark generator); ``windowed``: those
    that reach the window operator (keyed, then enriched): an inner lookup or a null key
    filtered out the others; ``counts``: :func:`timed_records`' counts; ``cached``: kept."""

    distinct: DataFrame
    windowed: DataFrame
    counts: dict[str, int]
    cached: list[DataFrame]

    def without_state(self, job: StreamJob) -> int | None:
        """The keyed records an inner lookup removed (None: the job has no lookups)."""
        if not job.lookups:
            return None
        if not any(lookup.how == "inner" for lookup in job.lookups):
            return 0
        keyed = self.counts["records_read"] - self.counts["duplicates_removed"]
        keyed -= self.counts.get("records_null_key", 0) + self.counts.get("records_filtered", 0)
        return keyed - self.windowed.count()


def window_input(spark: SparkSession, job: StreamJob) -> WindowInput:
    """Records read, timed, deduplicated, keyed and enriched (kept where enriched)."""
    timed, counts = timed_records(spark, job)
    distinct = distinct_records(timed)
    keyed = keyed_records(job, distinct)
    if not (job.lookups or job.derived):
        return WindowInput(distinct, keyed, counts, [timed])
    enriched = enrich(keyed, job.lookups, job.derived).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    return WindowInput(distinct, enriched, counts, [timed, enriched])
