"""Where the watermark reaches each window's ``maxTs``, and from which offset on each
partition's records come too late for it: both from first offsets at or above thresholds
(:mod:`.thresholds`)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    EVENT_TIME,
    FIRE_POSITION,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    TARGET,
    TOPIC,
)
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.strategies.aligned_unsorted.thresholds import (
    FIRST,
    THRESHOLD,
    BucketStarts,
    first_at_or_above,
    range_minima,
)
from feast_stream_backfill.watermarks import REACHED, combined, reaches_with_idleness

DROP_FROM = "_drop_from"  # a partition's first offset read after a window's tick


def watermark_reaches(
    minima: DataFrame,
    starts: BucketStarts,
    partitions: Sequence[tuple[str, int]],
    targets: Sequence[int],
    idle: DataFrame | None = None,
) -> DataFrame:
    """:func:`watermarks.watermark_reaches` with D1 = 0 and periodic emission: ``_target``
    and ``_pos``, the tick of the first watermark ``>= _target``; absent where none before
    the archive ends. A partition reaches ``x`` at its first record with ``et >=``
    :func:`rules.reach_threshold`, read at :func:`rules.read_at`; ``minima``:
    :func:`thresholds.bucket_minima` of the buckets ``starts`` places (their B per topic,
    their D2); ``idle``: the partitions' idle periods (:func:`idle.idle_periods`), where the
    job detects idleness. Kept (one row per target)."""
    bounds, strategy = starts.bounds, starts.watermark
    thresholds = {
        topic: [rules.reach_threshold(x, bounds[topic]) for x in targets] for topic, _ in partitions
    }
    first = first_at_or_above(minima, partitions, thresholds).select(
        TOPIC,
        PARTITION,
        rules.target_of_threshold(F.col(THRESHOLD), starts.bound()).alias(TARGET),
        rules.read_at(F.col(FIRST)[EVENT_TIME], starts.delay_ms).alias(PROCESSING_TIME),
        F.col(FIRST)[OFFSET].alias(OFFSET),
    )
    reached = F.when(F.col(OFFSET).isNotNull(), record_position())
    per_partition = first.select(TOPIC, PARTITION, TARGET, reached.alias(REACHED))
    if idle is not None:
        return reaches_with_idleness(idle, per_partition, list(partitions), strategy)
    reaches = combined(per_partition, strategy, len(partitions))
    reaches = reaches.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    reaches.count()
    return reaches


def drop_offsets(
    minima: DataFrame,
    starts: BucketStarts,
    records: DataFrame,
    partitions: Sequence[tuple[str, int]],
    reaches: DataFrame,
) -> DataFrame:
    """Per (topic, partition, ``_target``) reached: ``_drop_from``, the partition's first
    offset read after the target's tick ``T`` (first with ``et >=``
    :func:`rules.highest_read_after` ``T``; null: none), and the tick as ``_fire_pos``. One
    row per partition and target: broadcast, kept.

    From ``minima`` (:func:`thresholds.bucket_minima`), and where a tick's threshold starts no
    bucket (a tick far from its window's reach threshold), from the ``records`` between it and
    the next bucket start, the next reach threshold (a read that skips the others)."""
    delay_ms = starts.delay_ms
    times = reaches.select(F.col(POSITION)["time"]).distinct().collect()
    after = {
        topic: [rules.highest_read_after(time, delay_ms) for (time,) in times]
        for topic, _ in partitions
    }
    ranges = {
        topic: [(v, starts.next_reach(topic, v)) for v in values if not starts.starts_at(topic, v)]
        for topic, values in after.items()
    }
    if any(ranges.values()):  # a record in two ranges goes to both: a minimum does not mind
        minima = minima.unionByName(range_minima(records, ranges))
    first = first_at_or_above(minima, partitions, after)
    ticks = reaches.select(
        TARGET,
        rules.highest_read_after(F.col(POSITION)["time"], delay_ms).alias(THRESHOLD),
        F.col(POSITION).alias(FIRE_POSITION),
    )
    table = first.join(F.broadcast(ticks), THRESHOLD).select(
        TOPIC, PARTITION, TARGET, F.col(FIRST)[OFFSET].alias(DROP_FROM), FIRE_POSITION
    )
    table = table.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    table.count()
    return table
