"""Windows that do not merge (tumbling, sliding, cumulative) judged against each record's
place in the processing order.

The general strategy for aligned windows: every record gets its processing time and
position (:mod:`feast_stream_backfill.processing_time`), the watermark's first position
reaching each window's targets is found (:func:`watermarks.watermark_reaches`), and every
(record, window) pair is judged at once (:mod:`feast_stream_backfill.window_operator`), each
step with the model's rules (:mod:`feast_stream_backfill.rules`). Any trigger, lateness, D1,
watermark emission, enrichment and either time domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.columns import STATUS
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import window_input
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Condition, Windowed
from feast_stream_backfill.watermarks import watermark_reaches
from feast_stream_backfill.window_operator import (
    by_status,
    classify,
    dropped_records,
    firings,
    shared_instants,
    status_counts,
    watermark_targets,
)


@dataclass(frozen=True)
class Judged:
    """Every (record, window) pair with its status and firing position (``classified``), and
    the watermark's reaches it was judged against (None in processing time)."""

    classified: DataFrame
    reaches: DataFrame | None


@dataclass(frozen=True)
class AlignedInProcessingOrder:
    name: str = "aligned-in-order"

    def conditions(self, job: StreamJob) -> list[Condition]:
        return [Condition("windows assigned by time", job.window.assigned)]

    def judge(self, job: StreamJob, distinct: DataFrame, windowed: DataFrame) -> Judged:
        """Judge every (record, window) pair of ``windowed`` (records with their windows
        assigned) against the watermark of every record in ``distinct``: the step the explain
        tools share (they judge the same pairs under other settings, or one key's)."""
        if job.window.domain != "event":
            return Judged(classify(windowed, job.trigger, None), None)
        targets = watermark_targets(windowed, job.trigger)
        with stage("watermark"):
            reaches = watermark_reaches(distinct, targets, job.watermark, job.bounds)
        return Judged(classify(windowed, job.trigger, reaches), reaches)

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        records = window_input(spark, job)
        judged = self.judge(job, records.distinct, job.window.assign(records.windowed))
        per_status = by_status(judged.classified, job.keys, job.aggregations, job.trigger)
        per_status = per_status.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        event_time = job.window.domain == "event"
        fired = firings(
            judged.classified, job.trigger, job.keys, job.aggregations, event_time, per_status
        )
        summing_longs = long_sums(job, records.windowed)
        with refusing_overflow(summing_longs), stage("windows and triggers"):
            statuses = {row[STATUS]: row["n"] for row in status_counts(per_status).collect()}
        reached = [] if judged.reaches is None else [judged.reaches]
        return Windowed(
            fired=fired,
            dropped=dropped_records(per_status, job.keys),
            counts=records.counts,
            records_without_state=records.without_state(job),
            statuses=statuses,
            shared=shared_instants(spark, judged.reaches, statuses),
            long_sums=summing_longs,
            cached=[*records.cached, *reached, per_status],
        )
