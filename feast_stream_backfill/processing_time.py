"""When would the job have read each record? (SEMANTICS section 1)

Per (topic, partition), in offset order, the earliest processing times consistent with two
rules: successive records are at least ``D1`` apart, and a record is read at least ``D2`` after
its event time. Closed form, with ``i`` the record's rank among distinct offsets::

    pt_i = max(pt_{i-1} + D1, et_i + D2) = D2 + i*D1 + max_{j<=i}(et_j - j*D1)

one running max in a single window sorted by offset. Ranks, not offsets, because compacted and
transactional topics have offset gaps. The same sorted pass flags the records that raise their
partition's highest event time: the only ones that move its watermark (:mod:`watermarks`), so
that stage reads a few records instead of sorting them all again.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    RANK,
    RISES,
    TOPIC,
)


@dataclass(frozen=True)
class ProcessingTimeModel:
    """``min_gap_ms`` is D1 (between successive records of a partition), ``min_delay_ms`` D2."""

    min_gap_ms: int = 0
    min_delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.min_gap_ms < 0 or self.min_delay_ms < 0:
            raise ValueError(f"processing-time delays must be >= 0, got {self}")


def with_processing_time(records: DataFrame, model: ProcessingTimeModel) -> DataFrame:
    """Add ``_pt`` (epoch ms), ``_rank`` and ``_rises``, and flag re-archived copies.

    A record archived twice (same topic, partition, offset) counts once: later copies get
    ``_duplicate``; a copy whose content (event time or payload) differs from the first gets
    ``_conflict`` too, so the caller can refuse it rather than pick one silently. A faithful
    copy repeats its record's event time and rank, so the running maxima may take copies in:
    with ``D1 = 0`` everything is one sorted pass (one more with ``D1 > 0``, whose maximum
    reads the ranks).
    """
    payload = [c for c in records.columns if not c.startswith("_")]
    by_offset = Window.partitionBy(TOPIC, PARTITION).orderBy(OFFSET)
    so_far = by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    earlier = by_offset.rowsBetween(Window.unboundedPreceding, -1)
    flagged = records.withColumn("_hash", F.xxhash64(EVENT_TIME, *payload)).select(
        "*",
        (F.dense_rank().over(by_offset) - 1).alias(RANK),
        F.coalesce(F.lag(OFFSET).over(by_offset) == F.col(OFFSET), F.lit(False)).alias(DUPLICATE),
        F.lag("_hash").over(by_offset).alias("_previous_hash"),
        F.max(EVENT_TIME).over(earlier).alias("_highest_before"),
        F.max(EVENT_TIME).over(so_far).alias("_highest"),
    )
    highest_before = F.col("_highest_before")
    rises = highest_before.isNull() | (F.col(EVENT_TIME) > highest_before)
    if model.min_gap_ms:
        shifted = F.max(F.col(EVENT_TIME) - F.col(RANK) * model.min_gap_ms).over(so_far)
        read_at = shifted + F.col(RANK) * model.min_gap_ms
    else:
        read_at = F.col("_highest")
    return flagged.select(
        *records.columns,
        RANK,
        DUPLICATE,
        (F.col(DUPLICATE) & (F.col("_previous_hash") != F.col("_hash"))).alias(CONFLICT),
        (~F.col(DUPLICATE) & rises).alias(RISES),
        (read_at + model.min_delay_ms).alias(PROCESSING_TIME),
    )
