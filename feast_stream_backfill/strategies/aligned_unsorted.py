"""Aligned event-time windows without sorting the records.

With D1 = 0 a record's processing time is D2 plus its partition's highest event time up to
it, so every question the watermark and the triggers ask reduces to "the first offset of a
partition at or above an event time": hash aggregates, no sort. The jobs it accepts are
aligned event-time windows fired by the watermark's periodic ticks alone, which is Flink's
default and the most common job.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill import first_offsets
from feast_stream_backfill.columns import TARGET
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import job_records, refuse_problems
from feast_stream_backfill.records import RecordChecks
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Condition, StrategyDeclined, Windowed
from feast_stream_backfill.triggers import EventTimeTrigger
from feast_stream_backfill.window_operator import (
    dropped_records,
    firings,
    shared_instants,
    watermark_targets,
)


@dataclass(frozen=True)
class AlignedWithoutSort:
    name: str = "aligned-unsorted"

    def conditions(self, job: StreamJob) -> list[Condition]:
        trigger = job.trigger
        return [
            Condition("D1 = 0", job.processing_time.min_gap_ms == 0),
            Condition("event-time windows", job.window.domain == "event"),
            Condition("tumbling or sliding windows", not job.window.merges),
            Condition("the event-time trigger", isinstance(trigger, EventTimeTrigger)),
            Condition("no allowed lateness", trigger.allowed_lateness_ms == 0),
            Condition("periodic watermarks", job.watermark.emission == "periodic"),
            Condition(
                "idleness on one topic at most",
                not (job.watermark.detects_idleness and len(job.topics) > 1),
            ),
            Condition("no lookups or derived columns", not (job.lookups or job.derived)),
            Condition("records with a null key refused", job.null_keys == "refuse"),
        ]

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        """The value checks are not observed on every record: the signs of a problem are read
        from the offsets' aggregate (null or negative partitions and offsets, null event
        times, an empty topic) and from the windows (a null key), and only then does a pass
        count and name them (:meth:`records.RecordChecks.refuse_problems`)."""
        records, read = job_records(spark, job, archive_time=True)
        bound = {t.name: job.out_of_orderness(t.name) for t in job.topics}
        buckets = first_offsets.Buckets(
            job.window, bound, job.watermark.interval_ms, job.processing_time.min_delay_ms
        )
        idleness = job.watermark.detects_idleness
        with stage("processing time"):
            grouped = first_offsets.group_records(records, buckets, highest=idleness)
            offsets = first_offsets.offset_words(grouped)
            topics_read = {topic for topic, _ in offsets.partitions}
            if offsets.suspect or topics_read != {t.name for t in job.topics}:
                refuse_problems(read, [grouped])
            idle = None
            if idleness:
                interval, timeout = job.watermark.interval_ms, job.watermark.idle_timeout_ms
                delay = job.processing_time.min_delay_ms
                idle = first_offsets.idle_periods(
                    grouped, records, offsets.partitions, interval, timeout, delay
                )
                if idle is None:
                    grouped.unpersist()
                    raise StrategyDeclined(
                        f"more than {first_offsets.MAX_IDLE_WORDS} runs of 64 offsets would "
                        "be read again to find the partitions' idle periods"
                    )
        partitions = offsets.partitions
        with stage("watermark"):
            # copies share their record's windows and first offsets: no deduplication
            panes = first_offsets.pane_windows(grouped, job.window)
            targets = [row[TARGET] for row in watermark_targets(panes, job.trigger).collect()]
            minima = first_offsets.bucket_minima(grouped)
            reaches = first_offsets.watermark_reaches(
                minima, buckets, partitions, targets, job.watermark, idle
            )
            drops = first_offsets.drop_offsets(minima, buckets, records, partitions, reaches)
        # grouped is released with the rest: released earlier, the caches read from it could
        # be recomputed from every record (Spark recompiles a cache whose source is released
        # unless it sees every block of it loaded)
        kept = [grouped, panes, reaches, drops]
        windows = _Windows(job, records, read, panes, drops, reaches, partitions, kept)
        per_status, statuses, cached = windows.counted_once(offsets)
        fired = firings(None, job.trigger, job.keys, job.aggregations, True, per_status)
        return Windowed(
            fired=fired,
            dropped=dropped_records(per_status, job.keys),
            counts=offsets.counts,
            statuses=statuses,
            shared=shared_instants(spark, reaches, statuses),
            long_sums=long_sums(job, records),
            cached=[*kept, *cached, per_status],
        )


@dataclass(frozen=True)
class _Windows:
    """The per-window aggregate by status, each record counted once however often archived."""

    job: StreamJob
    records: DataFrame
    read: Sequence[RecordChecks]
    panes: DataFrame
    drops: DataFrame
    reaches: DataFrame
    partitions: list[tuple[str, int]]
    kept: list[DataFrame]

    def of(
        self, distinct: DataFrame, kept_too: list[DataFrame]
    ) -> tuple[DataFrame, first_offsets.StatusCounts]:
        job = self.job
        per_status = first_offsets.per_status(
            distinct,
            self.panes,
            self.drops,
            self.reaches,
            self.partitions,
            job.window,
            job.trigger,
            job.keys,
            job.aggregations,
        ).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        with refusing_overflow(long_sums(job, self.records)), stage("windows and triggers"):
            counted = first_offsets.status_counts(per_status, job.keys)
        if counted.null_key:
            refuse_problems(self.read, [*self.kept, *kept_too, per_status])
        return per_status, counted

    def counted_once(
        self, offsets: first_offsets.OffsetWords
    ) -> tuple[DataFrame, dict[str, int], list[DataFrame]]:
        """Copied offsets are counted at half weight where each is archived exactly twice; a
        window whose copies do not pair up (they differ, or a record was marked by a key
        collision) sends every copy to be grouped by offset, which names differing ones."""
        if not offsets.counts["duplicates_removed"]:
            per_status, counted = self.of(self.records, [])
            return per_status, counted.statuses, []
        if offsets.paired and first_offsets.weighs_copies(self.records, self.job.aggregations):
            marked, kept_copies = first_offsets.marked_copies(self.records, offsets.words)
            per_status, counted = self.of(marked, kept_copies)
            if not counted.unpaired:
                return per_status, counted.statuses, kept_copies
            for df in (per_status, *kept_copies):  # differing copies, or a key collision
                df.unpersist()
        try:
            with stage("processing time"):
                distinct, kept_copies = first_offsets.distinct_records(self.records, offsets.words)
        except BadArchiveError:
            for df in self.kept:
                df.unpersist()
            raise
        per_status, counted = self.of(distinct, kept_copies)
        return per_status, counted.statuses, kept_copies
