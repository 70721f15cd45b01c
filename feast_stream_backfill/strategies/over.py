"""OVER windows: each key's rows replayed in processing order against the watermark's
timeline (:mod:`feast_stream_backfill.over_replay`), with the model's rules
(:mod:`feast_stream_backfill.rules`).

Rows are hash-partitioned by key and sorted by key and position, as the session windows'
are (:func:`~feast_stream_backfill.sessions.replayed_per_key`), and the combined watermark's
changes are broadcast (one row per change, small beside the records).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import SparkSession

from feast_stream_backfill.columns import STATUS
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import window_input
from feast_stream_backfill.over_replay import OverReplay
from feast_stream_backfill.session_replay import output_schema
from feast_stream_backfill.sessions import broadcast_timeline, read_replay, replayed_per_key
from feast_stream_backfill.stages import stage
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
        timeline = broadcast_timeline(
            records.windowed,
            watermark_timeline(records.distinct, job.watermark, job.bounds),
        )
        keys, aggregations = list(job.keys), job.aggregations
        columns = list(dict.fromkeys(a.column for a in aggregations))
        types = records.windowed.select(*keys, *columns).schema
        replay = OverReplay(len(keys), aggregations, job.window.preceding_ms, types)
        out = replayed_per_key(
            records.windowed,
            keys,
            job.window.time(),
            [a.column for a in aggregations],  # one value per aggregation
            lambda batches: replay(batches, timeline.value),
            output_schema(types, len(keys), aggregations),
        )
        fired, dropped, statuses = read_replay(out, keys, aggregations)
        summing_longs = long_sums(job, records.windowed)
        with refusing_overflow(summing_longs), stage("windows and triggers"):
            counted = {row[STATUS]: row["n"] for row in statuses.collect()}
        return Windowed(
            fired=fired,
            dropped=dropped,
            counts=records.counts,
            records_without_state=records.without_state(job),
            statuses=counted,
            shared=None,  # a key emits a row per record: several at one instant
            long_sums=summing_longs,
            cached=[*records.cached, out],
        )
