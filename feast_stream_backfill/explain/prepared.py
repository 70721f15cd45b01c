"""The stages of a backfill that no B, L or T changes, computed once and kept.

Processing times, duplicates, enrichment and window assignment depend on the archive and the
job's window alone; the advisor, the timelines and the anomaly report judge the same records
under other watermark settings, so they share these results instead of rerunning
:func:`feast_stream_backfill.backfill` (whose first stages,
:func:`~feast_stream_backfill.job_records.window_input`, this calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession

from feast_stream_backfill.columns import EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.enrichment import enrich
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.job_records import distinct_records, keyed_records, window_input
from feast_stream_backfill.planner import Plan, plan
from feast_stream_backfill.processing_time import with_processing_time
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy


def check_explainable(job: StreamJob) -> None:
    """Refuse, with the reason, the jobs whose cost B and L cannot change or that have no
    closed form to share."""
    if not job.window.assigned:
        kind = "session" if job.window.merges else "OVER"
        raise ValueError(
            f"explain: {kind} windows are not supported (their firings come from a replay per "
            "key, with nothing to share across watermark settings); tumbling and sliding are"
        )
    if job.window.domain != "event":
        raise ValueError(
            "explain: processing-time windows never drop and never wait for a watermark, so "
            "B and L change nothing; use an event-time window"
        )
    if job.trigger.skip_unchanged:
        raise ValueError(
            "explain: a trigger that skips unchanged updates (Flink SQL's unbounded GROUP BY "
            "without a state TTL) is not supported: the figures count every firing"
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
    ``counts``: records read and duplicates removed; ``plan``: how the backfill computes the
    view's own job (:func:`~feast_stream_backfill.planner.plan`; ``job`` here drops null keys
    rather than refusing them); ``kept``: what :meth:`release` frees."""

    job: StreamJob
    distinct: DataFrame
    windowed: DataFrame
    counts: dict[str, int]
    plan: Plan
    kept: list[DataFrame] = field(default_factory=list, repr=False)

    def watermark_with(self, bound_ms: int, idle_timeout_ms: int | None) -> WatermarkStrategy:
        return replace(
            self.job.watermark, out_of_orderness_ms=bound_ms, idle_timeout_ms=idle_timeout_ms
        )

    def release(self) -> None:
        for df in self.kept:
            df.unpersist()


def prepare(spark: SparkSession, job: StreamJob) -> Prepared:
    """Read, time, deduplicate, enrich and assign windows once, with :func:`backfill`'s own
    first stages. Records with a null key are left out of the windows as ``null_keys="drop"``
    leaves them, not refused: the anomaly report counts them."""
    check_explainable(job)
    planned = plan(job)
    job = replace(job, null_keys="drop")
    records = window_input(spark, job)
    windowed = job.window.assign(records.windowed).persist(StorageLevel.MEMORY_AND_DISK)
    kept = [windowed, *records.cached]
    return Prepared(job, records.distinct, windowed, records.counts, planned, kept)


def _stages(job: StreamJob, distinct: DataFrame) -> tuple[DataFrame, DataFrame]:
    keyed = keyed_records(job, distinct)
    kept = enrich(keyed, job.lookups, job.derived) if job.lookups or job.derived else keyed
    return distinct, job.window.assign(kept)


def without(prepared: Prepared, removed: Column) -> Prepared:
    """The same job over the archive less the records matching ``removed``, processing times
    inferred again (a broken record also moved its partition's later ones); not kept."""
    job = prepared.job
    records = prepared.distinct.where(~removed).select(
        TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns
    )
    timed = with_processing_time(records, job.processing_time)
    distinct, windowed = _stages(job, distinct_records(timed))
    return Prepared(job, distinct, windowed, prepared.counts, prepared.plan)
