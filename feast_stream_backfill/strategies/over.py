"""OVER windows: each key's rows replayed in processing order against the watermark's
timeline, or the clock for processing-time frames
(:mod:`feast_stream_backfill.over_replay`), with the model's rules
(:mod:`feast_stream_backfill.rules`).

Rows are hash-partitioned by key and sorted by key and position, as the session windows'
are (:func:`~feast_stream_backfill.sessions.replayed_per_key`), and the combined watermark's
changes are broadcast (one row per change, small beside the records).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.job_records import window_input
from feast_stream_backfill.over_replay import OverReplay
from feast_stream_backfill.session_replay import output_schema
from feast_stream_backfill.sessions import broadcast_timeline, replayed_per_key, windowed
from feast_stream_backfill.strategies import Condition, Windowed
from feast_stream_backfill.watermarks import watermark_timeline
from feast_stream_backfill.windows import OverWindows


@dataclass(frozen=True)
class OverRows:
    name: str = "over"

    def conditions(self, job: StreamJob) -> list[Condition]:
        return [Condition("OVER windows", isinstance(job.window, OverWindows))]

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        records = window_input(spark, job)
        timeline = None
        if job.window.domain == "event":  # processing-time frames read the clock alone
            timeline = broadcast_timeline(
                records.windowed,
                watermark_timeline(records.distinct, job.watermark, job.bounds),
            )
        keys, aggregations = list(job.keys), job.aggregations
        columns = list(dict.fromkeys(a.column for a in aggregations))
        types = records.windowed.select(*keys, *columns).schema
        replay = OverReplay(len(keys), aggregations, job.window, types)
        replayed = replayed_per_key(
            records.windowed,
            keys,
            job.window.time(),
            [a.column for a in aggregations],  # one value per aggregation
            lambda batches: replay(batches, timeline.value if timeline else None),
            output_schema(types, len(keys), aggregations),
        )
        return windowed(job, records, replayed)
