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
replayed as Flink's multiplexer does it, over a compressed stream: per partition, the moments
its watermark reaches each target (its *level* rises), goes idle and comes back. That stream
has about (targets x partitions + idle gaps) rows, not one per record; it is replayed in order
in one task, and yields one row per target.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

import pandas as pd
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.processing_time import PROCESSING_TIME
from feast_stream_backfill.records import OFFSET, PARTITION, TOPIC

REACH, IDLE, ACTIVE = 0, 1, 2
_FIELDS = ["time", "phase", "topic", "partition", "offset"]


def _ceil(time: Column, interval: int) -> Column:
    return F.ceil(time / F.lit(interval)).cast("long") * interval


def idle_periods(
    records: DataFrame,
    position: Column,
    interval_ms: int,
    timeout_ms: int,
    start_ms: int,
    horizon_ms: int,
) -> DataFrame:
    """Per partition, ``_idle_from`` (the tick it goes idle) and ``_idle_until`` (the
    ``position`` of the record that wakes it; null: idle until ``horizon_ms``, the archive's
    last tick)."""
    waits = (timeout_ms // interval_ms + 1) * interval_ms
    by_offset = Window.partitionBy(TOPIC, PARTITION).orderBy(OFFSET)
    with_next = records.select(
        TOPIC,
        PARTITION,
        F.col(PROCESSING_TIME),
        position.alias("_here"),
        F.lead(position).over(by_offset).alias("_next"),
        F.row_number().over(by_offset).alias("_rank"),
    )
    after_record = with_next.select(
        TOPIC,
        PARTITION,
        (_ceil(F.col(PROCESSING_TIME), interval_ms) + interval_ms + waits).alias("_idle_from"),
        F.col("_next").alias("_idle_until"),
    )
    before_first = with_next.where(F.col("_rank") == 1).select(
        TOPIC,
        PARTITION,
        F.lit(-(-start_ms // interval_ms) * interval_ms + waits).alias("_idle_from"),
        F.col("_here").alias("_idle_until"),
    )
    periods = after_record.unionByName(before_first)
    until = F.col("_idle_until")
    return periods.where(
        F.when(until.isNull(), F.col("_idle_from") <= horizon_ms).otherwise(
            F.col("_idle_from") < until["time"]
        )
    )


def _tick(time: Column) -> Column:
    return F.struct(
        time.alias("time"),
        F.lit(1).alias("phase"),
        F.lit("").alias("topic"),
        F.lit(0).alias("partition"),
        F.lit(0).cast("long").alias("offset"),
    )


def _group_position(position: Column, emission: str, interval_ms: int) -> Column:
    """Where an event takes effect: periodic watermarks only combine on ticks."""
    if emission == "on_event":
        return position
    return _tick(_ceil(position["time"], interval_ms))


def combine_with_idleness(
    reached: DataFrame,
    idle: DataFrame,
    partitions: list[tuple[str, int]],
    emission: str,
    interval_ms: int,
) -> DataFrame:
    """``reached``: per (topic, partition, ``_level``) the position ``_reached`` at which the
    partition's watermark first reaches the ``_level``-th smallest target (1-based). Returns
    ``_level`` and ``_pos``: the first combined watermark at or above that level."""
    events = reached.select(
        TOPIC, PARTITION, F.col("_reached").alias("_at"), F.lit(REACH).alias("_kind"), "_level"
    )
    events = events.unionByName(
        idle.select(
            TOPIC,
            PARTITION,
            _tick(F.col("_idle_from")).alias("_at"),
            F.lit(IDLE).alias("_kind"),
            F.lit(0).alias("_level"),
        )
    ).unionByName(
        idle.where(F.col("_idle_until").isNotNull()).select(
            TOPIC,
            PARTITION,
            F.col("_idle_until").alias("_at"),
            F.lit(ACTIVE).alias("_kind"),
            F.lit(0).alias("_level"),
        )
    )
    group = _group_position(F.col("_at"), emission, interval_ms)
    flat = events.select(
        *[group[f].alias(f"_g_{f}") for f in _FIELDS], TOPIC, PARTITION, "_kind", "_level"
    )
    order = [f"_g_{f}" for f in _FIELDS]
    index = {p: i for i, p in enumerate(partitions)}

    def replay(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        level = [0] * len(index)
        idle_now = [False] * len(index)
        active_levels = [(0, i) for i in range(len(index))]  # a heap, stale entries skipped
        combined = highest = 0
        group: tuple | None = None
        out: list[tuple] = []

        def combine() -> None:
            nonlocal combined
            while active_levels and (
                idle_now[active_levels[0][1]] or level[active_levels[0][1]] != active_levels[0][0]
            ):
                heapq.heappop(active_levels)
            value = active_levels[0][0] if active_levels else highest
            out.extend((k, *group) for k in range(combined + 1, value + 1))
            combined = max(combined, value)

        for batch in batches:
            for row in batch.itertuples(index=False):
                here = tuple(row[:5])
                if group is not None and here != group:
                    combine()
                group = here
                p = index[(row[5], row[6])]
                if row[7] == IDLE:
                    idle_now[p] = True
                    continue
                if row[7] == REACH:
                    level[p] = max(level[p], row[8])
                    highest = max(highest, level[p])
                else:
                    idle_now[p] = False
                if not idle_now[p]:
                    heapq.heappush(active_levels, (level[p], p))
            if out:
                yield pd.DataFrame(out, columns=["_level", *_FIELDS])
                out = []
        if group is not None:
            combine()
        if out:
            yield pd.DataFrame(out, columns=["_level", *_FIELDS])

    schema = "_level int, time long, phase int, topic string, partition int, offset long"
    crossed = flat.repartition(1).sortWithinPartitions(*order).mapInPandas(replay, schema)
    return crossed.select("_level", F.struct(*_FIELDS).alias("_pos"))
