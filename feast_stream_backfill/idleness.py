"""Idle partitions and the combined watermark they no longer hold back (SEMANTICS section 2).

Flink's ``WatermarksWithIdleness`` checks for idleness only on the periodic timer's ticks
(``IdlenessTimer.checkIfIdle``): a tick that saw no new record starts the inactivity clock, a
later tick more than ``T`` after it marks the partition idle, and its next record makes it
active again. With ticks at multiples of ``I`` this has a closed form: a partition whose last
record is at ``a`` goes idle at the tick ``ceil_I(a) + I + (floor(T / I) + 1) * I``; one that has
not produced anything since the job started at ``S``, at ``ceil_I(S) + (floor(T / I) + 1) * I``.

An idle partition breaks the identity "first W >= x = MAX over partitions of when each reaches
x": it is left out of the MIN, and when every partition is idle Flink 2.3's
``CombinedWatermarkStatus`` flushes to the MAX of their watermarks. So the combination is
replayed as Flink's multiplexer does it (:mod:`watermark_replay`), with these idle periods.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import (
    EVENT_AT,
    EVENT_KIND,
    EVENT_VALUE,
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    RANK,
    TOPIC,
    WAKES_AT,
)
from feast_stream_backfill.processing_order import next_tick, record_position
from feast_stream_backfill.watermark_replay import ACTIVE, IDLE


def idle_periods(
    records: DataFrame,
    interval_ms: int,
    timeout_ms: int,
    start_ms: int,
    horizon_ms: int,
) -> DataFrame:
    """Per partition, ``_idle_from`` (the tick it goes idle), ``_idle_until`` (the position
    of the record that wakes it; null: idle until ``horizon_ms``, the archive's last tick) and
    ``_wakes_at`` (that record's processing time). ``records`` are distinct, with ``_rank``."""
    waits = (timeout_ms // interval_ms + 1) * interval_ms
    by_offset = Window.partitionBy(TOPIC, PARTITION).orderBy(OFFSET)
    with_next = records.select(
        TOPIC,
        PARTITION,
        RANK,
        F.col(PROCESSING_TIME),
        record_position().alias("_here"),
        F.lead(record_position()).over(by_offset).alias("_next"),
        F.lead(PROCESSING_TIME).over(by_offset).alias("_next_pt"),
    )
    after_record = with_next.select(
        TOPIC,
        PARTITION,
        (next_tick(F.col(PROCESSING_TIME), interval_ms) + interval_ms + waits).alias(IDLE_FROM),
        F.col("_next").alias(IDLE_UNTIL),
        F.col("_next_pt").alias(WAKES_AT),
    )
    before_first = with_next.where(F.col(RANK) == 0).select(
        TOPIC,
        PARTITION,
        F.lit(-(-start_ms // interval_ms) * interval_ms + waits).alias(IDLE_FROM),
        F.col("_here").alias(IDLE_UNTIL),
        F.col(PROCESSING_TIME).alias(WAKES_AT),
    )
    periods = after_record.unionByName(before_first)
    wakes = F.col(WAKES_AT)
    return periods.where(
        F.when(wakes.isNull(), F.col(IDLE_FROM) <= horizon_ms).otherwise(F.col(IDLE_FROM) < wakes)
    )


def idle_events(idle: DataFrame, went_idle: Column, woke: Column) -> DataFrame:
    """:func:`idle_periods` as :func:`watermark_replay.replay` events: ``IDLE`` at
    ``went_idle``, ``ACTIVE`` at ``woke`` (where a record wakes the partition), both given as
    the caller orders positions."""
    none = F.lit(0).cast("long").alias(EVENT_VALUE)
    return idle.select(
        TOPIC, PARTITION, went_idle.alias(EVENT_AT), F.lit(IDLE).alias(EVENT_KIND), none
    ).unionByName(
        idle.where(woke.isNotNull()).select(
            TOPIC, PARTITION, woke.alias(EVENT_AT), F.lit(ACTIVE).alias(EVENT_KIND), none
        )
    )
