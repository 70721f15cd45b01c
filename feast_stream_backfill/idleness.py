"""Idle partitions and the combined watermark they no longer hold back.

The model: docs/concepts/model.md#idleness.

Flink's ``WatermarksWithIdleness`` checks for idleness only on the periodic timer's ticks
(``IdlenessTimer.checkIfIdle``): a tick that saw no new record starts the inactivity clock, a
later tick more than ``T`` after it marks the partition idle, and its next record makes it
active again. With ticks at multiples of ``I`` this has a closed form
(:func:`rules.goes_idle_at`): a partition whose last record is at ``a`` goes idle at the tick
``ceil_I(a) + I + (floor(T / I) + 1) * I``; one that has not produced anything since the job
started at ``S``, at ``ceil_I(S) + (floor(T / I) + 1) * I``.

An idle partition breaks the identity "first W >= x = MAX over partitions of when each reaches
x": it is left out of the MIN, and when every partition is idle Flink 2.3's
``CombinedWatermarkStatus`` flushes to the MAX of their watermarks. So the combination is
replayed as Flink's multiplexer does it (:mod:`watermark_replay`), with these idle periods.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
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
) -> DataFrame:
    """Per partition, ``_idle_from`` (the tick it goes idle), ``_idle_until`` (the position
    of the record that wakes it; null: idle until the archive's end, the first tick at or
    after its last record) and ``_wakes_at`` (that record's processing time). ``records`` are
    distinct, with ``_pt``; the job starts at the first record's processing time.

    After a record at ``a`` the partition goes idle at a tick later than ``a + waits``, so only
    a record whose successor comes more than ``waits`` later starts an idle period. Cut a
    partition's processing times into cells of ``waits`` ms: only a cell's last record can
    start one, and the first record of the next non-empty cell ends it. Processing time never
    decreases with the offset, so a cell's first record has its lowest offset and time, and
    its last the highest time: hash aggregates, then a sort of a few cells per partition (a
    day holds 2,880 cells of 30 s) instead of every record. The archive's start and end are
    the cells' extremes: one pass over the records in all.
    """
    waits = rules.idle_wait_ms(interval_ms, timeout_ms)
    read_at = F.col(PROCESSING_TIME)
    cell = (read_at - F.pmod(read_at, F.lit(waits))) / waits  # exact: a multiple of waits
    cells = records.groupBy(TOPIC, PARTITION, cell.cast("long").alias("_idle_cell")).agg(
        F.min(OFFSET).alias(OFFSET),
        F.min(PROCESSING_TIME).alias(PROCESSING_TIME),
        F.max(PROCESSING_TIME).alias("_cell_last_pt"),
    )
    by_cell = Window.partitionBy(TOPIC, PARTITION).orderBy("_idle_cell")
    every_cell = Window.partitionBy()  # few rows: the archive's start and end
    after_cell = _period(
        rules.goes_idle_at(
            next_tick(F.col("_cell_last_pt"), interval_ms) + interval_ms, interval_ms, timeout_ms
        ),
        F.lead(record_position()).over(by_cell),
        F.lead(PROCESSING_TIME).over(by_cell),
    )
    before_first = _period(
        rules.goes_idle_at(
            next_tick(F.min(PROCESSING_TIME).over(every_cell), interval_ms), interval_ms, timeout_ms
        ),
        record_position(),
        read_at,
    )
    # One chain, no union: the branches of a union would aggregate the records twice.
    candidates = cells.select(
        TOPIC,
        PARTITION,
        after_cell.alias("_after_cell"),
        F.when(F.lag("_idle_cell").over(by_cell).isNull(), before_first).alias("_before_first"),
        next_tick(F.max("_cell_last_pt").over(every_cell), interval_ms).alias("_horizon"),
    ).select(
        TOPIC,
        PARTITION,
        F.explode(F.array_compact(F.array("_after_cell", "_before_first"))).alias("_period"),
        "_horizon",
    )
    went, wakes = F.col(f"_period.{IDLE_FROM}"), F.col(f"_period.{WAKES_AT}")
    kept = F.when(wakes.isNull(), went <= F.col("_horizon")).otherwise(went < wakes)
    return candidates.where(kept).select(TOPIC, PARTITION, "_period.*")


def _period(went_idle: Column, until: Column, wakes_at: Column) -> Column:
    return F.struct(went_idle.alias(IDLE_FROM), until.alias(IDLE_UNTIL), wakes_at.alias(WAKES_AT))


def idle_events(idle: DataFrame, went_idle: Column, woke: Column) -> DataFrame:
    """:func:`idle_periods` as :func:`watermark_replay.replay` events: ``IDLE`` at
    ``went_idle``, ``ACTIVE`` at ``woke`` (where a record wakes the partition), both given as
    the caller orders positions. One chain, no union, for the same reason."""

    def event(at: Column, kind: int) -> Column:
        return F.struct(at.alias(EVENT_AT), F.lit(kind).alias(EVENT_KIND))

    woken = F.when(woke.isNotNull(), event(woke, ACTIVE))
    return idle.select(
        TOPIC,
        PARTITION,
        F.inline(F.array_compact(F.array(event(went_idle, IDLE), woken))),
        F.lit(0).cast("long").alias(EVENT_VALUE),
    )
