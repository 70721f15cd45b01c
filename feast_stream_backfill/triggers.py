"""When does a window fire, and which records does it drop? (SEMANTICS section 3)

As ``WindowOperator`` applies a trigger to a record arriving when the watermark is ``W``
(event-time windows have allowed lateness ``L``; their state is cleaned up once
``W >= maxTs + L``, after which a record is DROPPED):

- :class:`EventTimeTrigger` (Flink's default for event time): ``W < maxTs``: buffered, the
  window fires ON TIME when the watermark reaches ``maxTs``; ``maxTs <= W < maxTs + L``: the
  window fires at once (LATE) with everything it holds.
- :class:`ProcessingTimeTrigger` (default for processing time): fires when the clock passes
  ``maxTs`` (at ``maxTs + 1``, Flink's timer delay); a record always lands in the window of its
  own processing time, never late.
- :class:`PerRecordTrigger` (``CountTrigger.of(1)``): every accepted record fires each of its
  windows at once (PER_RECORD); the window is still closed by its time criterion.

With watermark positions from :mod:`watermarks` each case is a comparison or two per record:
against the first watermark reaching ``maxTs`` and the first reaching ``maxTs + L``. Firings
accumulate: each emits the aggregate of everything the window holds so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.watermarks import POSITION, TARGET, clock_position
from feast_stream_backfill.windows import WINDOW_END, WINDOW_START, max_timestamp

STATUS, FIRE_POSITION, FIRED_BY_RECORD = "_status", "_fire_pos", "_fired_by_record"
ON_TIME, LATE, PER_RECORD, DROPPED, PENDING = "on_time", "late", "per_record", "dropped", "pending"
_ON_TIME_AT, _CLEANUP_AT = "_on_time", "_cleanup"


def _check_lateness(lateness: int) -> None:
    if lateness < 0:
        raise ValueError(f"allowed lateness must be >= 0, got {lateness}")


def _with_first_watermark(
    windowed: DataFrame, timeline: DataFrame, lateness: int, name: str
) -> DataFrame:
    """Add ``name``: the position of the first watermark ``>= maxTs + lateness`` (null: never
    before the archive ends). The timeline has one row per target: a broadcast join."""
    reached = timeline.select((F.col(TARGET) - lateness).alias("_ts"), F.col(POSITION).alias(name))
    condition = max_timestamp() == F.col("_ts")
    return windowed.join(F.broadcast(reached), condition, "left").drop("_ts")


def _values(aggregations: Sequence[Aggregation]) -> dict[str, Column]:
    return {"record_count": F.count(F.lit(1))} | {a.name: a.expr() for a in aggregations}


def _firing(
    window: list[str], position: Column, by_record: bool, label: str, values: dict[str, Column]
) -> list[Column]:
    return [
        *window,
        position.alias(FIRE_POSITION),
        F.lit(by_record).alias(FIRED_BY_RECORD),
        F.lit(label).alias("firing"),
        *[F.col(n) for n in values],
    ]


def _fired_by_each_record(
    classified: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    accepted: Sequence[str],
    firing: str,
) -> DataFrame:
    """Records with status ``firing`` fire their window at their own position, with the
    aggregate of every accepted record up to them: a running aggregate per window."""
    window = [*keys, WINDOW_START, WINDOW_END]
    values = _values(aggregations)
    so_far = (
        Window.partitionBy(*window)
        .orderBy(POSITION)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        classified.where(F.col(STATUS).isin(*accepted))
        .select(
            *window, POSITION, STATUS, *[v.over(so_far).alias(name) for name, v in values.items()]
        )
        .where(F.col(STATUS) == firing)
        .select(*_firing(window, F.col(POSITION), True, firing, values))
    )


def _fired_by_timer(
    classified: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation], at: Column
) -> DataFrame:
    """Windows fired by their timer at ``at``, with every on-time record they hold."""
    window = [*keys, WINDOW_START, WINDOW_END]
    values = _values(aggregations)
    return (
        classified.where(F.col(STATUS) == ON_TIME)
        .groupBy(*window, at.alias(FIRE_POSITION))
        .agg(*[v.alias(name) for name, v in values.items()])
        .select(*_firing(window, F.col(FIRE_POSITION), False, ON_TIME, values))
    )


@dataclass(frozen=True)
class EventTimeTrigger:
    """Flink's default trigger for event-time windows, with ``allowedLateness(L)``."""

    allowed_lateness_ms: int = 0
    domain = "event"

    def __post_init__(self) -> None:
        _check_lateness(self.allowed_lateness_ms)

    def targets(self, windowed: DataFrame) -> DataFrame:
        """The watermark values this trigger waits for: each window's maxTs and cleanup time."""
        on_time = windowed.select(max_timestamp().alias(TARGET))
        if not self.allowed_lateness_ms:
            return on_time.distinct()
        cleanup = windowed.select((max_timestamp() + self.allowed_lateness_ms).alias(TARGET))
        return on_time.unionByName(cleanup).distinct()

    def classify(self, windowed: DataFrame, timeline: DataFrame) -> DataFrame:
        """``_status`` per (record, window): on_time, late, dropped, or pending (the window
        has not fired by the end of the archive: a live job would still be waiting)."""
        joined = _with_first_watermark(windowed, timeline, 0, _ON_TIME_AT)
        cleanup = _ON_TIME_AT
        if self.allowed_lateness_ms:
            joined = _with_first_watermark(joined, timeline, self.allowed_lateness_ms, _CLEANUP_AT)
            cleanup = _CLEANUP_AT
        pos = F.col(POSITION)
        status = (
            F.when(F.col(_ON_TIME_AT).isNull(), PENDING)
            .when(pos <= F.col(_ON_TIME_AT), ON_TIME)
            .when(F.col(cleanup).isNull() | (pos <= F.col(cleanup)), LATE)
            .otherwise(DROPPED)
        )
        return joined.withColumn(STATUS, status)

    def firings(
        self, classified: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation]
    ) -> DataFrame:
        on_time = _fired_by_timer(classified, keys, aggregations, F.col(_ON_TIME_AT))
        if not self.allowed_lateness_ms:
            return on_time
        late = _fired_by_each_record(classified, keys, aggregations, (ON_TIME, LATE), LATE)
        return on_time.unionByName(late)


@dataclass(frozen=True)
class ProcessingTimeTrigger:
    """Flink's default trigger for processing-time windows: fire when the clock passes
    ``maxTs``, after the records read in that millisecond, i.e. at ``maxTs + 1 = end`` (real
    Flink; SEMANTICS.md says ``maxTs``). Empty windows have no timer: no firing."""

    domain = "processing"

    def targets(self, windowed: DataFrame) -> None:
        return None

    def classify(self, windowed: DataFrame, timeline: DataFrame | None) -> DataFrame:
        return windowed.withColumn(STATUS, F.lit(ON_TIME))

    def firings(
        self, classified: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation]
    ) -> DataFrame:
        return _fired_by_timer(classified, keys, aggregations, clock_position(max_timestamp()))


@dataclass(frozen=True)
class PerRecordTrigger:
    """``CountTrigger.of(1)``: every accepted record fires each window it belongs to, at its
    processing time. Event-time windows still close at ``W >= maxTs + L``."""

    allowed_lateness_ms: int = 0
    domain = "any"

    def __post_init__(self) -> None:
        _check_lateness(self.allowed_lateness_ms)

    def targets(self, windowed: DataFrame) -> DataFrame:
        return windowed.select(
            (max_timestamp() + self.allowed_lateness_ms).alias(TARGET)
        ).distinct()

    def classify(self, windowed: DataFrame, timeline: DataFrame | None) -> DataFrame:
        if timeline is None:  # processing-time windows: a record is never late for its own
            return windowed.withColumn(STATUS, F.lit(PER_RECORD))
        joined = _with_first_watermark(windowed, timeline, self.allowed_lateness_ms, _CLEANUP_AT)
        closed = F.col(_CLEANUP_AT).isNotNull() & (F.col(POSITION) > F.col(_CLEANUP_AT))
        return joined.withColumn(STATUS, F.when(closed, DROPPED).otherwise(PER_RECORD))

    def firings(
        self, classified: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation]
    ) -> DataFrame:
        return _fired_by_each_record(classified, keys, aggregations, (PER_RECORD,), PER_RECORD)
