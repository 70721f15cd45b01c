"""Session windows: merged per key as records arrive, replayed in processing order
(:mod:`feast_stream_backfill.sessions`), against the watermark's timeline (event time) or the
clock (processing time), with the model's rules (:mod:`feast_stream_backfill.rules`)."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.job_records import window_input
from feast_stream_backfill.sessions import session_firings, windowed
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
        replayed = session_firings(
            records.windowed, job.keys, job.aggregations, job.window, job.trigger, timeline
        )
        return windowed(job, records, replayed)
