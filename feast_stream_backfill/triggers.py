"""When does a window fire, and which records does it drop? (SEMANTICS section 3)

Flink's ``EventTimeTrigger`` with allowed lateness ``L``, as ``WindowOperator`` applies it to
a record arriving when the watermark is ``W``:

- ``W < maxTs``: buffered; the window fires ON TIME when the watermark reaches ``maxTs``;
- ``maxTs <= W < maxTs + L``: the window fires at once (LATE), with everything it holds;
- ``W >= maxTs + L``: the window is gone (its cleanup timer has fired): the record is DROPPED.

With watermark positions from :mod:`watermarks` this is two comparisons per record: against
the first watermark reaching ``maxTs`` and the first reaching ``maxTs + L``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.watermarks import POSITION, TARGET
from feast_stream_backfill.windows import WINDOW_END, WINDOW_START, max_timestamp

STATUS, FIRE_POSITION, FIRED_BY_RECORD = "_status", "_fire_pos", "_fired_by_record"
ON_TIME, LATE, DROPPED, PENDING = "on_time", "late", "dropped", "pending"


@dataclass(frozen=True)
class EventTimeTrigger:
    """Flink's default trigger for event-time windows, with ``allowedLateness(L)``."""

    allowed_lateness_ms: int = 0

    def __post_init__(self) -> None:
        if self.allowed_lateness_ms < 0:
            raise ValueError(f"allowed lateness must be >= 0, got {self.allowed_lateness_ms}")

    def targets(self, windowed: DataFrame) -> DataFrame:
        """The watermark values this trigger waits for: each window's maxTs and cleanup time."""
        on_time = windowed.select(max_timestamp().alias(TARGET))
        if not self.allowed_lateness_ms:
            return on_time.distinct()
        cleanup = windowed.select((max_timestamp() + self.allowed_lateness_ms).alias(TARGET))
        return on_time.unionByName(cleanup).distinct()

    def classify(self, windowed: DataFrame, timeline: DataFrame) -> DataFrame:
        """Give each record its ``_status``: on_time, late, dropped, or pending (its window has
        not fired by the end of the archive: a live job would still be waiting)."""

        def first_watermark(joined: DataFrame, lateness: int, name: str) -> DataFrame:
            reached = timeline.select(
                (F.col(TARGET) - lateness).alias("_ts"), F.col(POSITION).alias(name)
            )
            condition = max_timestamp() == F.col("_ts")
            return joined.join(F.broadcast(reached), condition, "left").drop("_ts")

        joined = first_watermark(windowed, 0, "_on_time")
        cleanup = "_on_time"
        if self.allowed_lateness_ms:
            joined, cleanup = (
                first_watermark(joined, self.allowed_lateness_ms, "_cleanup"),
                "_cleanup",
            )
        pos = F.col(POSITION)
        status = (
            F.when(F.col("_on_time").isNull(), PENDING)
            .when(pos <= F.col("_on_time"), ON_TIME)
            .when(F.col(cleanup).isNull() | (pos <= F.col(cleanup)), LATE)
            .otherwise(DROPPED)
        )
        return joined.withColumn(STATUS, status).drop("_cleanup")

    def firings(
        self, classified: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation]
    ) -> DataFrame:
        """One row per firing per key: ``_fire_pos``, ``_fired_by_record``, ``firing``,
        ``record_count`` and the features, accumulated over everything the window holds."""
        window = [*keys, WINDOW_START, WINDOW_END]
        values = {"record_count": F.count(F.lit(1))} | {a.name: a.expr() for a in aggregations}
        on_time = (
            classified.where(F.col(STATUS) == ON_TIME)
            .groupBy(*window, "_on_time")
            .agg(*[v.alias(name) for name, v in values.items()])
            .select(
                *window,
                F.col("_on_time").alias(FIRE_POSITION),
                F.lit(False).alias(FIRED_BY_RECORD),
                F.lit(ON_TIME).alias("firing"),
                "record_count",
                *[a.name for a in aggregations],
            )
        )
        if not self.allowed_lateness_ms:
            return on_time
        so_far = (
            Window.partitionBy(*window)
            .orderBy(POSITION)
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        late = (
            classified.where(F.col(STATUS).isin(ON_TIME, LATE))
            .select(
                *window,
                POSITION,
                STATUS,
                *[v.over(so_far).alias(name) for name, v in values.items()],
            )
            .where(F.col(STATUS) == LATE)
            .select(
                *window,
                F.col(POSITION).alias(FIRE_POSITION),
                F.lit(True).alias(FIRED_BY_RECORD),
                F.lit(LATE).alias("firing"),
                "record_count",
                *[a.name for a in aggregations],
            )
        )
        return on_time.unionByName(late)
