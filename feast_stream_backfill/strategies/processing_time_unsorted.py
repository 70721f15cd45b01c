"""Processing-time windows without sorting the records (:class:`ProcessingTimeWithoutSort`).

With D1 = 0 a record is read ``D2`` after the highest event time of its partition up to it
(:func:`rules.read_at`, docs/concepts/model.md#records-and-processing-time). Reads and pane
starts both rise with event time, so the pane of that read is the latest of the panes that
the partition's records up to it would be read in on their own event times alone. The one read
that counts the offsets also groups the records by block of 64 offsets and by that own-time
pane, keeping each group's lowest offset. A block whose first and last records fall in one pane
(all but about one block per partition and pane) gives that pane to every record of it; in the
others, a record takes the latest pane of the blocks before and of its block's groups that
start at or before its offset. The records are then read once more, each placed by a
broadcast lookup of its block, and aggregated per key and window, which fires by the clock at
its end and is never late (``ProcessingTimeTrigger``, :func:`window_operator.classify`). The
strategy in processing order sorts every record by offset for the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    EVENT_TIME,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    STATUS,
    TOPIC,
)
from feast_stream_backfill.job import StreamJob, long_sums, refusing_overflow
from feast_stream_backfill.job_records import job_records, refuse_problems
from feast_stream_backfill.stages import stage
from feast_stream_backfill.strategies import Condition, Windowed
from feast_stream_backfill.strategies.aligned_unsorted import offsets
from feast_stream_backfill.strategies.aligned_unsorted.offsets import (
    BLOCK,
    HIGHEST_BEFORE,
    PANE,
)
from feast_stream_backfill.triggers import ProcessingTimeTrigger
from feast_stream_backfill.window_operator import (
    by_status,
    classify,
    dropped_records,
    firings,
    shared_instants,
    status_counts,
)
from feast_stream_backfill.windows import pane_start

#: Blocks up to which their panes are broadcast to the records; beyond, both sides are shuffled
#: by block and the blocks' side hashed (a sort-merge join would sort every record).
MAX_BROADCAST_BLOCKS = 1 << 21

_IN_PANE = "_in_pane"  # the pane of every record of the block (null: a pane starts inside it)
_STARTS = "_pane_starts"  # (lowest offset, pane) of the block's groups, where a pane starts in it
_BEFORE = "_pane_before"  # the pane of the highest event time of the blocks before (null: none)
_FIRST, _LAST = "_first_pane", "_last_pane"  # own-time panes: the block's first record's, latest


@dataclass(frozen=True)
class ProcessingTimeWithoutSort:
    """Processing-time windows assigned by time, never sorting the records (the module's
    technique)."""

    name: str = "processing-time-unsorted"

    def conditions(self, job: StreamJob) -> list[Condition]:
        return [
            Condition("D1 = 0", job.processing_time.min_gap_ms == 0),
            Condition("processing-time windows", job.window.domain == "processing"),
            Condition("windows assigned by time", job.window.assigned),
            Condition(
                "the processing-time trigger", isinstance(job.trigger, ProcessingTimeTrigger)
            ),
            Condition("no lookups or derived columns", not (job.lookups or job.derived)),
            Condition("records with a null key refused", job.null_keys == "refuse"),
            Condition("no record filter", job.where is None),
        ]

    def run(self, spark: SparkSession, job: StreamJob) -> Windowed:
        """As :class:`~.aligned_unsorted.AlignedWithoutSort`, the value checks are not observed
        on every record: the signs of a problem come from the blocks' aggregate and from the
        windows' (a null key), and only then does a pass count and name them."""
        records, read = job_records(spark, job)
        with stage("processing time"):
            grouped = offsets.group_by_pane(records, own_pane(job))
            blocks = offsets.offset_blocks(grouped)
            if blocks.suspect or {t for t, _ in blocks.partitions} != {t.name for t in job.topics}:
                refuse_problems(read, [grouped])
            kept = [grouped]
            distinct = records
            if blocks.counts["duplicates_removed"]:
                distinct, kept_copies = offsets.distinct_records(records, blocks.blocks)
                kept += kept_copies
            timed, kept_panes = in_panes(distinct, grouped, job)
            kept += kept_panes
        classified = classify(job.window.assign(timed), job.trigger, None)
        per_status = by_status(classified, job.keys, job.aggregations, job.trigger)
        per_status = per_status.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        summing_longs = long_sums(job, records)
        null_key = reduce(Column.__or__, [F.col(k).isNull() for k in job.keys])
        with refusing_overflow(summing_longs), stage("windows and triggers"):
            counted = status_counts(per_status, null_key=null_key).collect()
        if any(row["null_key"] for row in counted):
            refuse_problems(read, [*kept, per_status])
        statuses = {row[STATUS]: row["n"] for row in counted}
        return Windowed(
            fired=firings(None, job.trigger, job.keys, job.aggregations, False, per_status),
            dropped=dropped_records(per_status, job.keys),
            counts=blocks.counts,
            statuses=statuses,
            shared=shared_instants(spark, None, statuses),
            long_sums=summing_longs,
            cached=[*kept, per_status],
        )


def own_pane(job: StreamJob) -> Column:
    """The pane a record would be read in if its own event time were its partition's highest
    so far: its pane is the latest of these up to it (and of the blocks' before)."""
    delay = job.processing_time.min_delay_ms
    return pane_start(job.window, rules.read_at(F.col(EVENT_TIME), delay))


def in_panes(
    records: DataFrame, grouped: DataFrame, job: StreamJob
) -> tuple[DataFrame, list[DataFrame]]:
    """``records`` (each once) with ``_pt``: the start of the pane of the record's processing
    time. ``grouped``: the records by block and the pane of their own event time's read
    (:func:`offsets.group_by_pane`). The read of the highest event time so far lies in the
    latest pane of the block before's highest and the own-time panes up to the record's offset
    (``read_at`` is monotone): a block whose first and last records share one pane gives it to
    all of its records; in the others (a pane starts inside them), a record takes the latest
    pane among its block's groups that start at or before its offset. Kept, and returned to be
    released with the rest: the blocks' panes, a row per block."""
    delay = job.processing_time.min_delay_ms
    keys = [TOPIC, PARTITION, BLOCK]
    blocks = offsets.highest_by_block(
        grouped, F.min_by(PANE, OFFSET).alias(_FIRST), F.max(PANE).alias(_LAST)
    )
    before = pane_start(job.window, rules.read_at(F.col(HIGHEST_BEFORE), delay))  # null: none
    first, last = F.greatest(before, _FIRST), F.greatest(before, _LAST)
    panes = blocks.select(*keys, before.alias(_BEFORE), F.when(first == last, last).alias(_IN_PANE))
    straddling = panes.where(F.col(_IN_PANE).isNull()).select(*keys)
    starts = (
        grouped.join(straddling, keys, "left_semi")
        .groupBy(*keys)
        .agg(F.collect_list(F.struct(OFFSET, PANE)).alias(_STARTS))
    )
    per_block = panes.join(starts, keys, "left").persist(StorageLevel.MEMORY_AND_DISK_DESER)
    hinted = (
        F.broadcast(per_block)
        if per_block.count() <= MAX_BROADCAST_BLOCKS
        else per_block.hint("shuffle_hash")
    )
    started = F.aggregate(  # the latest pane of the groups started by the record's offset
        _STARTS,
        F.col(_BEFORE),
        lambda pane, group: F.when(
            group[OFFSET] <= F.col(OFFSET), F.greatest(pane, group[PANE])
        ).otherwise(pane),
    )
    timed = (
        records.withColumn(BLOCK, F.shiftright(OFFSET, 6))
        .join(hinted, keys)
        .select(*records.columns, F.coalesce(_IN_PANE, started).alias(PROCESSING_TIME))
    )
    return timed, [per_block]
