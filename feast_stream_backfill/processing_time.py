"""When would the job have read each record?

The model: docs/concepts/model.md#records-and-processing-time.

Per (topic, partition), in offset order, the earliest processing times consistent with two
rules: successive records are at least ``D1`` apart, and a record is read at least ``D2`` after
its event time. Closed form, with ``i`` the record's rank among distinct offsets::

    pt_i = max(pt_{i-1} + D1, et_i + D2) = D2 + i*D1 + max_{j<=i}(et_j - j*D1)

a running max (a prefix scan), which :func:`rules.read_at` turns into the time the record is
read. Ranks, not offsets, because compacted and transactional topics have offset gaps; with
``D1 = 0`` (the default) ranks drop out and are not computed. The scan runs over offset ranges
in parallel, so that a topic with few huge partitions keeps every core busy and no task holds
a whole partition: each range is sorted once (its local ranks and maxima); a small table of
per-range totals (distinct offsets, highest event time) gives each range, by a prefix over the
ranges before it, its rank base and the maxima before it; the two combine into the
partition-wide values. The same sorted pass flags the records that raise
their partition's highest event time: the only ones that move its watermark
(:mod:`watermarks`), so that stage reads a few records instead of sorting them all again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    RISES,
    TOPIC,
)

OFFSETS_PER_RANGE = 2**20
"""Offsets per range of the parallel scan: large enough that the per-range table stays small
(a thousand rows per billion offsets), small enough that one range fits a task comfortably."""


@dataclass(frozen=True)
class ProcessingTimeModel:
    """``min_gap_ms`` is D1 (between successive records of a partition), ``min_delay_ms`` D2."""

    min_gap_ms: int = 0
    min_delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.min_gap_ms < 0 or self.min_delay_ms < 0:
            raise ValueError(f"processing-time delays must be >= 0, got {self}")


def with_processing_time(
    records: DataFrame, model: ProcessingTimeModel, offsets_per_range: int = OFFSETS_PER_RANGE
) -> DataFrame:
    """Add ``_pt`` (epoch ms) and ``_rises``, and flag re-archived copies.

    A record archived twice (same topic, partition, offset) counts once: later copies get
    ``_duplicate``; a copy whose content (event time or payload) differs from the first gets
    ``_conflict`` too, so the caller can refuse it rather than pick one silently. Copies share
    their offset, hence their range. A faithful copy repeats its record's event time and rank,
    so the running maxima may take copies in. A record with a null partition or offset is
    kept, without a processing time (the caller's checks refuse it). The totals read the
    archive a second time, only its offsets and event times: with ``D1 = 0`` a hash aggregate
    of the highest event time (ranks do not matter then, and are not computed), with
    ``D1 > 0`` a narrow sorted pass (the maximum reads ranks).
    """
    if offsets_per_range < 1:
        raise ValueError(f"offsets_per_range must be >= 1, got {offsets_per_range}")
    gap = model.min_gap_ms
    payload = [c for c in records.columns if not c.startswith("_")]
    ranged = records.withColumn("_range", F.expr(f"{OFFSET} div {offsets_per_range}"))
    by_offset = Window.partitionBy(TOPIC, PARTITION, "_range").orderBy(OFFSET)
    so_far = by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    earlier = by_offset.rowsBetween(Window.unboundedPreceding, -1)
    local_rank = F.dense_rank().over(by_offset) - 1 if gap else F.lit(0)
    local = ranged.withColumn("_hash", F.xxhash64(EVENT_TIME, *payload)).select(
        "*",
        local_rank.alias("_local_rank"),
        F.coalesce(F.lag(OFFSET).over(by_offset) == F.col(OFFSET), F.lit(False)).alias(DUPLICATE),
        F.lag("_hash").over(by_offset).alias("_previous_hash"),
        F.max(EVENT_TIME).over(earlier).alias("_local_before"),
        # The closed form's maximum (with D1 = 0 the highest event time) in local ranks.
        F.max(F.col(EVENT_TIME) - local_rank * gap if gap else F.col(EVENT_TIME))
        .over(so_far)
        .alias("_local_shifted"),
    )
    totals = _highest_by_range(ranged) if gap == 0 else _totals_by_ranks(local)
    # left: a record with a null partition or offset stays, for the caller's checks to count
    prefix = F.broadcast(_range_prefix(totals, gap))
    joined = local.join(prefix, [TOPIC, PARTITION, "_range"], "left")
    highest_before = F.greatest("_prior_highest", "_local_before")
    rises = highest_before.isNull() | (F.col(EVENT_TIME) > highest_before)
    shifted = F.greatest("_prior_shifted", _shifted_max("_local_shifted", gap))
    # the highest event time so far, each pushed D1 per record since (rules.read_at)
    highest = shifted + (F.col("_base") + F.col("_local_rank")) * gap if gap else shifted
    return joined.select(
        *records.columns,
        DUPLICATE,
        (F.col(DUPLICATE) & (F.col("_previous_hash") != F.col("_hash"))).alias(CONFLICT),
        (~F.col(DUPLICATE) & rises).alias(RISES),
        rules.read_at(highest, model.min_delay_ms).alias(PROCESSING_TIME),
    )


def _shifted_max(local_shifted: str, gap: int) -> Column:
    """``max(et_j - j*D1)`` over a range's records so far in partition-wide ranks ``j``."""
    return F.col(local_shifted) - F.col("_base") * gap if gap else F.col(local_shifted)


def _totals_by_ranks(local: DataFrame) -> DataFrame:
    """Per range: ``_count`` (distinct offsets), ``_range_highest`` (event time) and
    ``_range_shifted`` (the closed form's maximum in local ranks, which needs the ranks)."""
    return local.groupBy(TOPIC, PARTITION, "_range").agg(
        (F.max("_local_rank") + 1).alias("_count"),
        F.max(EVENT_TIME).alias("_range_highest"),
        F.max("_local_shifted").alias("_range_shifted"),
    )


def _highest_by_range(ranged: DataFrame) -> DataFrame:
    """:func:`_totals_by_ranks` where D1 = 0: ranks do not matter (the closed form's maximum is
    the highest event time), so a hash aggregate of the event times, without sorting."""
    return ranged.groupBy(TOPIC, PARTITION, "_range").agg(
        F.max(EVENT_TIME).alias("_range_highest"), F.max(EVENT_TIME).alias("_range_shifted")
    )


def _range_prefix(totals: DataFrame, gap: int) -> DataFrame:
    """Per range: ``_base`` (distinct offsets before it in its partition), ``_prior_highest``
    (the highest event time before it) and, with ``gap``, ``_prior_shifted`` (the closed
    form's maximum before it); null where no range precedes. One row per range: small."""
    before = (
        Window.partitionBy(TOPIC, PARTITION)
        .orderBy("_range")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    based = totals.select(
        "*",
        (F.coalesce(F.sum("_count").over(before), F.lit(0)) if gap else F.lit(0)).alias("_base"),
        F.max("_range_highest").over(before).alias("_prior_highest"),
    )
    return based.select(
        TOPIC,
        PARTITION,
        "_range",
        "_base",
        "_prior_highest",
        F.max(_shifted_max("_range_shifted", gap)).over(before).alias("_prior_shifted"),
    )
