"""Aligned event-time windows without sorting the records (:class:`AlignedWithoutSort`).

With D1 = 0 a record is read at ``D2`` plus the highest event time of its partition up to it
(:func:`rules.read_at`, docs/concepts/model.md#records-and-processing-time). So every question
the watermark and the triggers ask is about a partition's *first offset at or above a
threshold* of event time, which needs no order of the records:

- a partition's watermark first reaches a window's ``maxTs`` at its first record with
  ``et >= maxTs + B + 1`` (the window's *reach threshold*, :func:`rules.reach_threshold`),
  read at ``D2 + et``; the combined watermark reaches it where the last partition does (MIN)
  or the first (MAX), emitted at the next periodic tick ``T``;
- a record is read after that tick, so that its window is gone (DROPPED), iff it is at or
  after its partition's first offset with ``et >= T - D2 + 1`` (the tick's *drop threshold*,
  :func:`rules.highest_read_after`).

The jobs it accepts (:meth:`AlignedWithoutSort.conditions`) are aligned event-time windows
fired by the watermark's periodic ticks and, with allowed lateness, by late records, which is
Flink's default and the most common job; the others need each record's own processing time
(:mod:`..aligned_in_order`). With lateness, the watermark is asked about each window's cleanup
time too (from which offsets records are dropped) and its ``maxTs`` (from which they are
late); only the late records' own processing times are computed (:mod:`.late_firings`).

The words the modules use:

- **Buckets of event time.** First offsets come from hash aggregates: the lowest offset per
  (partition, bucket), then a running minimum over a partition's buckets from the highest
  down. A bucket starts at every window's reach threshold, and at the drop thresholds of the
  ticks just after it (where most windows fire), so one read of the records answers nearly
  every threshold; a tick further on is answered by a second read of the records near it
  (:mod:`.thresholds`).
- **Blocks of 64 offsets.** The one read groups the records by block (``offset // 64``) too,
  keeping which of the block's offsets it holds as the bits of a long: the records read and
  the offsets archived more than once are counted from these bits (:mod:`.offsets`).
- **Copies counted at half weight.** A record archived twice shares its copy's offset and
  event time, so it changes no first offset; only the windows' counts must see each record
  once. Where every copied offset is archived exactly twice, a copy counts half and the
  window checks that its copies pair up; otherwise the copies are grouped by offset.
- **Panes and chunks.** Windows hold whole panes (``gcd(size, slide)``): the records are
  aggregated a pane at a time, and a sliding window merges its panes' aggregates. They are
  merged per key and chunk (a stretch of event time :data:`.window_aggregates.CHUNK_WINDOWS`
  windows long), so that each record is shuffled once (:mod:`.window_aggregates`).
- **Idle periods.** With idleness, a partition goes idle only where its running max of event
  time jumps by more than the idle timeout allows: only the blocks over which it rises that
  much are read again, in offset order (:mod:`.idle`); beyond
  :data:`.idle.MAX_BLOCKS_READ_AGAIN` blocks the strategy declines.

Where the watermark reaches the windows and from which offsets on records are dropped:
:mod:`.reaches_and_drops`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.columns import TARGET
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import job_records, refuse_problems
from feast_stream_backfill.records import RecordChecks
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Condition, StrategyDeclined, Windowed
from feast_stream_backfill.strategies.aligned_unsorted import (
    idle,
    late_firings,
    offsets,
    reaches_and_drops,
    thresholds,
    window_aggregates,
)
from feast_stream_backfill.strategies.aligned_unsorted.offsets import OffsetBlocks
from feast_stream_backfill.strategies.aligned_unsorted.window_aggregates import (
    StatusCounts,
    Watermarked,
)
from feast_stream_backfill.triggers import LATE, EventTimeTrigger
from feast_stream_backfill.window_operator import (
    dropped_records,
    firings,
    shared_instants,
    watermark_targets,
)


@dataclass(frozen=True)
class AlignedWithoutSort:
    """Aligned event-time windows, never sorting the records (the module's technique)."""

    name: str = "aligned-unsorted"

    def conditions(self, job: StreamJob) -> list[Condition]:
        trigger = job.trigger
        return [
            Condition("D1 = 0", job.processing_time.min_gap_ms == 0),
            Condition("event-time windows", job.window.domain == "event"),
            Condition("windows assigned by time", job.window.assigned),
            Condition("the event-time trigger", isinstance(trigger, EventTimeTrigger)),
            Condition("periodic watermarks", job.watermark.emission == "periodic"),
            Condition(
                "idleness on one topic at most",
                not (job.watermark.detects_idleness and len(job.topics) > 1),
            ),
            Condition("no lookups or derived columns", not (job.lookups or job.derived)),
            Condition("records with a null key refused", job.null_keys == "refuse"),
            Condition("no record filter", job.where is None),
        ]

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        """The value checks are not observed on every record: the signs of a problem are read
        from the offsets' aggregate (null or negative partitions and offsets, null event
        times, an empty topic) and from the windows (a null key), and only then does a pass
        count and name them (:meth:`records.RecordChecks.refuse_problems`)."""
        records, read = job_records(spark, job, archive_time=True)
        starts = thresholds.BucketStarts.of(job)
        with stage("processing time"):
            once = _read_once(job, records, read, starts)
            idle_periods = _idle_periods(job, records, once)
        with stage("watermark"):
            watermarked = _watermarked(job, records, once, starts, idle_periods)
        # grouped is released with the rest: released earlier, the caches read from it could
        # be recomputed from every record (Spark recompiles a cache whose source is released
        # unless it sees every block of it loaded)
        kept = [once.grouped, *watermarked.cached]
        windows = _Windows(job, records, read, watermarked, kept)
        per_status, statuses, cached = windows.counted_once(once.offsets)
        fired = firings(None, job.trigger, job.keys, job.aggregations, True, per_status)
        by_records = None
        if statuses.get(LATE):
            with stage("windows and triggers"):
                by_records, late = late_firings.late_firings(
                    job, records, per_status, watermarked, once.grouped, statuses[LATE]
                )
            cached += [by_records, late]
            fired = fired.unionByName(by_records)
        return Windowed(
            fired=fired,
            dropped=dropped_records(per_status, job.keys),
            counts=once.offsets.counts,
            statuses=statuses,
            shared=shared_instants(spark, watermarked.reaches, statuses, by_records),
            long_sums=long_sums(job, records),
            cached=[*kept, *cached, per_status],
        )


@dataclass(frozen=True)
class _ReadOnce:
    """The records read once: ``grouped`` by block, bucket and pane
    (:func:`offsets.group_records`, kept), and their offsets counted from it."""

    grouped: DataFrame
    offsets: OffsetBlocks


def _read_once(
    job: StreamJob,
    records: DataFrame,
    read: Sequence[RecordChecks],
    starts: thresholds.BucketStarts,
) -> _ReadOnce:
    """The one read of every record; where it shows signs of a problem in the values (or a
    topic with no record), the pass that counts and names them."""
    highest = job.watermark.detects_idleness or job.trigger.allowed_lateness_ms > 0
    grouped = offsets.group_records(records, starts, highest=highest)
    blocks = offsets.offset_blocks(grouped)
    topics_read = {topic for topic, _ in blocks.partitions}
    if blocks.suspect or topics_read != {t.name for t in job.topics}:
        refuse_problems(read, [grouped])
    return _ReadOnce(grouped, blocks)


def _idle_periods(job: StreamJob, records: DataFrame, once: _ReadOnce) -> DataFrame | None:
    """The partitions' idle periods, where the job detects idleness (None: it does not); the
    read is released where the strategy declines."""
    if not job.watermark.detects_idleness:
        return None
    interval, timeout = job.watermark.interval_ms, job.watermark.idle_timeout_ms
    delay = job.processing_time.min_delay_ms
    try:
        return idle.idle_periods(
            once.grouped, records, once.offsets.partitions, interval, timeout, delay
        )
    except StrategyDeclined:
        once.grouped.unpersist()
        raise


def _watermarked(
    job: StreamJob,
    records: DataFrame,
    once: _ReadOnce,
    starts: thresholds.BucketStarts,
    idle_periods: DataFrame | None,
) -> Watermarked:
    """Where the watermark reaches the windows' ``maxTs`` and which records it drops, from the
    first offsets at or above their thresholds; copies share their record's windows and first
    offsets: no deduplication."""
    partitions = once.offsets.partitions
    panes = window_aggregates.pane_windows(once.grouped, job.window)
    targets = [row[TARGET] for row in watermark_targets(panes, job.trigger).collect()]
    minima = thresholds.bucket_minima(once.grouped)
    reaches = reaches_and_drops.watermark_reaches(minima, starts, partitions, targets, idle_periods)
    drops = reaches_and_drops.drop_offsets(minima, starts, records, partitions, reaches)
    return Watermarked(panes, reaches, drops, partitions)


@dataclass(frozen=True)
class _Windows:
    """The per-window aggregate by status, each record counted once however often archived."""

    job: StreamJob
    records: DataFrame
    read: Sequence[RecordChecks]
    watermarked: Watermarked
    kept: list[DataFrame]

    def of(self, distinct: DataFrame, kept_too: list[DataFrame]) -> tuple[DataFrame, StatusCounts]:
        job = self.job
        per_status = window_aggregates.per_status(distinct, self.watermarked, job)
        per_status = per_status.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        with refusing_overflow(long_sums(job, self.records)), stage("windows and triggers"):
            counted = window_aggregates.status_counts(per_status, job.keys)
        if counted.null_key:
            refuse_problems(self.read, [*self.kept, *kept_too, per_status])
        return per_status, counted

    def counted_once(
        self, blocks: OffsetBlocks
    ) -> tuple[DataFrame, dict[str, int], list[DataFrame]]:
        """Copied offsets are counted at half weight where each is archived exactly twice; a
        window whose copies do not pair up (they differ, or a record was marked by a key
        collision) sends every copy to be grouped by offset, which names differing ones."""
        if not blocks.counts["duplicates_removed"]:
            per_status, counted = self.of(self.records, [])
            return per_status, counted.statuses, []
        if blocks.paired and offsets.weighs_copies(self.records, self.job.aggregations):
            marked, kept_copies = offsets.marked_copies(self.records, blocks.blocks)
            per_status, counted = self.of(marked, kept_copies)
            if not counted.unpaired:
                return per_status, counted.statuses, kept_copies
            for df in (per_status, *kept_copies):  # differing copies, or a key collision
                df.unpersist()
        try:
            with stage("processing time"):
                distinct, kept_copies = offsets.distinct_records(self.records, blocks.blocks)
        except BadArchiveError:
            for df in self.kept:
                df.unpersist()
            raise
        per_status, counted = self.of(distinct, kept_copies)
        return per_status, counted.statuses, kept_copies
