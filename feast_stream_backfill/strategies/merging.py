"""Session windows: merged per key as records arrive, replayed in processing order
(:mod:`feast_stream_backfill.sessions`), against the watermark's timeline (event time) or the
clock (processing time), with the model's rules (:mod:`feast_stream_backfill.rules`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from feast_stream_backfill.columns import STATUS
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import window_input
from feast_stream_backfill.sessions import session_firings
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Condition, Windowed
from feast_stream_backfill.watermarks import watermark_timeline


@dataclass(frozen=True)
class MergingWindows:
    name: str = "merging"

    def conditions(self, job: StreamJob) -> list[Condition]:
        return [Condition("session windows", job.window.merges)]

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        records = window_input(spark, job)
        timeline = None
        if job.window.domain == "event":
            timeline = watermark_timeline(records.distinct, job.watermark, job.bounds)
        fired, dropped, statuses, replayed = session_firings(
            records.windowed, job.keys, job.aggregations, job.window, job.trigger, timeline
        )
        summing_longs = long_sums(job, records.windowed)
        # the session replay sums as it classifies
        with refusing_overflow(summing_longs), stage("windows and triggers"):
            counted = {row[STATUS]: row["n"] for row in statuses.collect()}
        return Windowed(
            fired=fired,
            dropped=dropped,
            counts=records.counts,
            records_without_state=records.without_state(job),
            statuses=counted,
            shared=None,  # sessions merge: two of a key's sessions can fire at any instant
            long_sums=summing_longs,
            cached=[*records.cached, replayed],
        )
