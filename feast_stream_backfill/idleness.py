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
    ``_wakes_at`` (that record's processing time). ``records`` are distinct, with ``_pt``.

    After a record at ``a`` the partition goes idle at a tick later than ``a + waits``, so only
    a record whose successor comes more than ``waits`` later starts an idle period. Cut a
    partition's processing times into cells of ``waits`` ms: only a cell's last record can
    start one, and the first record of the next non-empty cell ends it. Processing time never
    decreases with the offset, so a cell's first record has its lowest offset and time, and
    its last the highest time: hash aggregates, then a sort of a few cells per partition (a
    day holds 2,880 cells of 30 s) instead of every record.
    """
    waits = (timeout_ms // interval_ms + 1) * interval_ms
    read_at = F.col(PROCESSING_TIME)
    cell = (read_at - F.pmod(read_at, F.lit(waits))) / waits  # exact: a multiple of waits
    cells = records.groupBy(TOPIC, PARTITION, cell.cast("long").alias("_idle_cell")).agg(
        F.min(OFFSET).alias(OFFSET),
        F.min(PROCESSING_TIME).alias(PROCESSING_TIME),
        F.max(PROCESSING_TIME).alias("_cell_last_pt"),
    )
    by_cell = Window.partitionBy(TOPIC, PARTITION).orderBy("_idle_cell")
    with_next = cells.select(
        TOPIC,
        PARTITION,
        F.col("_cell_last_pt"),
        F.col(PROCESSING_TIME),
        record_position().alias("_here"),
        F.lead(record_position()).over(by_cell).alias("_next"),
        F.lead(PROCESSING_TIME).over(by_cell).alias("_next_pt"),
        F.lag("_idle_cell").over(by_cell).isNull().alias("_first_cell"),
    )
    after_record = with_next.select(
        TOPIC,
        PARTITION,
        (next_tick(F.col("_cell_last_pt"), interval_ms) + interval_ms + waits).alias(IDLE_FROM),
        F.col("_next").alias(IDLE_UNTIL),
        F.col("_next_pt").alias(WAKES_AT),
    )
    before_first = with_next.where(F.col("_first_cell")).select(
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
