"""The combined watermark's timeline looked up in Spark: before a record, and where it reaches.

Sessions need the watermark each record sees (their extents depend on it, record by record)
and where it first reaches each session's ``maxTs``. Both are as-of lookups on the timeline
(:func:`watermarks.watermark_timeline`: one row per change), which is monotone: the watermark
before a position is the largest value changed to before it, and the first position reaching
``x`` is the smallest one whose value is ``>= x``. Neither collects the timeline to the driver
nor joins a row with every change: rows and changes are cut into time buckets; within a bucket
one sort carries the changes forward (:mod:`carry_forward`'s rule), and a small table of what
every earlier bucket saw gives the value at the bucket's start.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import POSITION, TARGET, WATERMARK

#: At most about this many buckets: the table of bucket entries stays small.
BUCKETS = 4096
_KEY, _BUCKET, _SIDE, _SEEN, _ENTRY = "_lookup_key", "_bucket", "_side", "_bucket_seen", "_entry"


def bucket_width(timeline: DataFrame) -> int:
    """Milliseconds per bucket: the timeline's span over :data:`BUCKETS`, at least 1 s."""
    first, last = timeline.agg(
        F.min(F.col(POSITION)["time"]), F.max(F.col(POSITION)["time"])
    ).first()
    span = 0 if first is None else last - first
    return max(1000, span // BUCKETS + 1)


def _lookup(
    rows: DataFrame,
    changes: DataFrame,
    value: str,
    pick: Callable[[Column], Column],
    bucket: Callable[[Column], Column],
    strict: bool,
) -> DataFrame:
    """``rows`` (with ``_lookup_key``) get ``value``: ``pick`` (max or min) of the changes'
    ``value`` whose ``_lookup_key`` is before the row's (strictly, or at or before)."""
    row_side, change_side = (0, 1) if strict else (1, 0)
    keyed = changes.select(_KEY, value, bucket(F.col(_KEY)).alias(_BUCKET))
    per_bucket = keyed.groupBy(_BUCKET).agg(pick(F.col(value)).alias(_SEEN))
    row_buckets = rows.select(bucket(F.col(_KEY)).alias(_BUCKET)).distinct()
    earlier = Window.orderBy(_BUCKET, _SIDE).rowsBetween(Window.unboundedPreceding, -1)
    entries = (  # small: one row per bucket (a window over them all is one task's work)
        row_buckets.select(_BUCKET, F.lit(0).alias(_SIDE), F.lit(None).alias(_SEEN))
        .unionByName(per_bucket.select(_BUCKET, F.lit(1).alias(_SIDE), _SEEN))
        .select(_BUCKET, _SIDE, pick(F.col(_SEEN)).over(earlier).alias(_ENTRY))
        .where(F.col(_SIDE) == 0)
        .drop(_SIDE)
    )
    so_far = (
        Window.partitionBy(_BUCKET)
        .orderBy(_KEY, _SIDE)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    both = rows.select("*", bucket(F.col(_KEY)).alias(_BUCKET), F.lit(row_side).alias(_SIDE))
    both = both.unionByName(keyed.withColumn(_SIDE, F.lit(change_side)), allowMissingColumns=True)
    found = both.withColumn(value, pick(F.col(value)).over(so_far)).where(F.col(_SIDE) == row_side)
    least_or_greatest = F.greatest if pick is F.max else F.least
    return (
        found.join(F.broadcast(entries), _BUCKET, "left")
        .withColumn(value, least_or_greatest(value, _ENTRY))
        .drop(_BUCKET, _SIDE, _ENTRY)
    )


def watermark_before(records: DataFrame, timeline: DataFrame, width: int) -> DataFrame:
    """``records`` (with ``_pos``) with ``_w``: the watermark when each is processed, the
    last change strictly before it (null: before the first). A change at a record's own
    position is the one that record causes (on-event emission), after it."""
    changes = timeline.select(F.col(POSITION).alias(_KEY), WATERMARK)
    rows = records.withColumn(_KEY, F.col(POSITION))
    found = _lookup(rows, changes, WATERMARK, F.max, lambda k: F.floor(k["time"] / width), True)
    return found.drop(_KEY)


def timeline_reaches(targets: DataFrame, timeline: DataFrame, width: int) -> DataFrame:
    """For each ``_target``, ``_pos``: the first change with ``W >= _target`` (absent: not
    before the archive ends). The timeline is looked up by value, negated so that "at or
    above the target" is "at or before" it."""
    changes = timeline.select((-F.col(WATERMARK)).alias(_KEY), POSITION)
    rows = targets.select(TARGET, (-F.col(TARGET)).alias(_KEY))
    found = _lookup(rows, changes, POSITION, F.min, lambda k: F.floor(k / width), False)
    return found.where(F.col(POSITION).isNotNull()).drop(_KEY)
