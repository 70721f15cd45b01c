"""When does the job's watermark pass a given event time?

The model: docs/concepts/model.md#watermarks.

Flink's bounded-out-of-orderness generator gives each partition ``p`` the watermark
``maxEt_p - B - 1 ms``; the source combines partitions by MIN, so the combined watermark
reaches ``x`` at the first moment *every* partition has seen an event time ``>= x + B + 1``:

    first(W >= x) = MAX over partitions of (first record of p with et >= x + B + 1)

That needs no per-record watermark: for each target ``x`` (a window's ``maxTs``) one
descending sweep per partition finds that record, and the result, one row per target, is
small enough to broadcast. Only a record that raises its partition's highest event time
(``_rises``) can be that record, and of the rises between two consecutive targets only the
first: the sweep sorts those, a few rows per target, not every record.

Moments are positions in the global processing order (:mod:`processing_order`): a record is
processed before a watermark iff its position is ``<=`` the watermark's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import (
    EVENT_AT,
    EVENT_KIND,
    EVENT_TIME,
    EVENT_VALUE,
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    RISE_FROM,
    RISE_TO,
    RISES,
    TARGET,
    TOPIC,
    WAKES_AT,
    WATERMARK,
)
from feast_stream_backfill.idleness import idle_events, idle_periods
from feast_stream_backfill.processing_order import (
    LONG_MIN,
    from_fields,
    next_tick,
    record_position,
    tick_position,
)
from feast_stream_backfill.watermark_replay import REACH, replay, replay_in_ranges

REACHED = "_reached"


@dataclass(frozen=True)
class WatermarkStrategy:
    """Flink's ``forBoundedOutOfOrderness(B)`` with ``pipeline.auto-watermark-interval`` I.

    ``emission="periodic"`` emits on the timer's ticks (Flink's default generator);
    ``"on_event"`` after every record. Ticks are at multiples of ``interval_ms`` since the epoch.
    ``combine="min"`` is Flink's source (MIN over partitions); ``"max"`` takes
    readers as perfectly aligned, also what one reader does when the watermark
    is assigned after the source. ``idle_timeout_ms`` is ``withIdleness(T)``: checked on the
    ticks only, so with ``interval_ms=0`` nothing ever goes idle, as in Flink
    (:mod:`feast_stream_backfill.idleness`).
    """

    out_of_orderness_ms: int = 0
    interval_ms: int = 200
    emission: Literal["periodic", "on_event"] = "periodic"
    combine: Literal["min", "max"] = "min"
    idle_timeout_ms: int | None = None

    def __post_init__(self) -> None:
        if self.out_of_orderness_ms < 0 or self.interval_ms < 0:
            raise ValueError(f"watermark bounds must be >= 0, got {self}")
        if self.emission not in ("periodic", "on_event"):
            raise ValueError(f"emission must be 'periodic' or 'on_event', got {self.emission!r}")
        if self.combine not in ("min", "max"):
            raise ValueError(f"combine must be 'min' or 'max', got {self.combine!r}")
        if self.emission == "periodic" and self.interval_ms == 0:
            raise ValueError("periodic watermarks need interval_ms > 0 (0 turns the timer off)")
        if self.idle_timeout_ms is not None and self.idle_timeout_ms <= 0:
            raise ValueError(f"idle_timeout_ms must be > 0 (Flink's), got {self.idle_timeout_ms}")
        if self.idle_timeout_ms and self.combine == "max":
            raise ValueError("idleness applies to Flink's MIN combination, not the MAX mode")

    @property
    def detects_idleness(self) -> bool:
        return bool(self.idle_timeout_ms and self.interval_ms)

    def emitted_at(self, reached: Column) -> Column:
        """The position of the first watermark reflecting the record at ``reached``."""
        if self.emission == "on_event":
            return reached
        return tick_position(next_tick(reached["time"], self.interval_ms))


def _rises(records: DataFrame) -> DataFrame:
    """The records that raise their partition's highest event time (``_rises``), with their
    positions: a partition's watermark moves at those only."""
    return records.where(F.col(RISES)).select(
        TOPIC, PARTITION, EVENT_TIME, PROCESSING_TIME, record_position().alias(POSITION)
    )


def bound_of_topic(strategy: WatermarkStrategy, bounds: Mapping[str, int] | None) -> Column:
    """The bound B of the record's topic: its own (``bounds``) or the strategy's."""
    bound: Column = F.lit(strategy.out_of_orderness_ms)
    for topic, topic_bound in (bounds or {}).items():  # each source has its own generator
        bound = F.when(F.col(TOPIC) == topic, F.lit(topic_bound)).otherwise(bound)
    return bound


def _one_topic(partitions: list[tuple[str, int]], strategy: WatermarkStrategy) -> None:
    """Idleness is modelled within one source: the valve across sources is not."""
    if strategy.detects_idleness and len({topic for topic, _ in partitions}) > 1:
        raise ValueError(
            "idleness with several topics (Flink's StatusWatermarkValve across "
            "sources) is not modelled yet: use one topic, or no idleness"
        )


def watermark_reaches(
    records: DataFrame,
    targets: DataFrame,
    strategy: WatermarkStrategy,
    bounds: Mapping[str, int] | None = None,
) -> DataFrame:
    """For each ``_target`` (epoch ms), ``_pos``: the first watermark with ``W >= _target``.

    ``records`` are the distinct records of every source partition, with ``_pt`` and
    ``_rises``. Targets the watermark never reaches before the archive ends are absent (a live
    job has not fired them yet). A partition without any record holds the watermark back
    forever, as in Flink. ``bounds`` gives a topic its own out-of-orderness B (Flink: one
    watermark strategy per source); other topics use the strategy's. Computed now and kept
    (one row per target), so that its input, kept while it is computed, can go.
    """
    wanted = targets.select(TARGET).distinct().persist(StorageLevel.MEMORY_AND_DISK_DESER)
    rising = _first_rises(records, wanted, strategy, bounds).persist(
        StorageLevel.MEMORY_AND_DISK_DESER
    )
    partitions = rising.select(TOPIC, PARTITION).distinct()
    n_partitions = partitions.count() if strategy.combine == "min" else 0
    threshold = rules.reach_threshold(F.col(TARGET), bound_of_topic(strategy, bounds))
    sweep = rising.select(
        TOPIC,
        PARTITION,
        F.col(EVENT_TIME).alias("_sweep_value"),
        F.lit(0).alias("_sweep_kind"),
        F.lit(None).cast("long").alias(TARGET),
        POSITION,
    ).unionByName(
        wanted.crossJoin(F.broadcast(partitions)).select(
            TOPIC,
            PARTITION,
            threshold.alias("_sweep_value"),
            F.lit(1).alias("_sweep_kind"),
            TARGET,
            F.when(F.lit(False), tick_position(F.lit(0))).alias(POSITION),
        ),
        allowMissingColumns=False,
    )
    # Descending event time, records before a target of equal value: the running MIN of
    # positions is the first record (in processing order) whose event time reaches it.
    descending = Window.partitionBy(TOPIC, PARTITION).orderBy(F.desc("_sweep_value"), "_sweep_kind")
    per_partition = sweep.withColumn(
        REACHED, F.min(POSITION).over(descending.rowsBetween(Window.unboundedPreceding, 0))
    ).where(F.col("_sweep_kind") == 1)
    if strategy.detects_idleness:
        keys = [(r[TOPIC], r[PARTITION]) for r in partitions.collect()]
        idle = idle_periods(records, strategy.interval_ms, strategy.idle_timeout_ms)
        reached = reaches_with_idleness(idle, per_partition, keys, strategy)
    else:
        reached = combined(per_partition, strategy, n_partitions)
    reached = reached.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    reached.count()
    rising.unpersist()
    wanted.unpersist()
    return reached


def _first_rises(
    records: DataFrame,
    targets: DataFrame,
    strategy: WatermarkStrategy,
    bounds: Mapping[str, int] | None,
) -> DataFrame:
    """Of a partition's rises whose watermarks fall between the same two consecutive targets,
    only the first can be the first to reach a target: the others, later and higher, reach
    nothing earlier. One row per (partition, stretch between targets) with a rise: that
    rise's ``_et`` and position, so the sweep sorts a few rows per target, not every rise.

    The targets (few: one per window end) lie on a grid, their first plus multiples of the
    greatest common divisor of their differences (a window's slide, for aligned windows), so
    a rise's stretch is an integer division: rises of one grid cell reach the same targets.
    In a partition, rises come in offset order with rising event times, and processing time
    never decreases with the offset: a cell's first rise has its lowest offset, event time and
    processing time, three hash aggregates.
    """
    levels = sorted(row[TARGET] for row in targets.collect())
    if not levels:
        levels = [0]
    first, last = levels[0], levels[-1]
    step = math.gcd(*(level - first for level in levels)) or 1
    watermark = rules.partition_watermark(F.col(EVENT_TIME), bound_of_topic(strategy, bounds))
    above_first = watermark - first
    cells = ((above_first - F.pmod(above_first, F.lit(step))) / step).cast("long")  # exact
    cell = F.least(F.greatest(cells, F.lit(-1)), F.lit((last - first) // step))
    first_in_cell = (
        records.where(F.col(RISES))
        .groupBy(TOPIC, PARTITION, cell.alias("_target_cell"))
        .agg(
            F.min(OFFSET).alias(OFFSET),
            F.min(EVENT_TIME).alias(EVENT_TIME),
            F.min(PROCESSING_TIME).alias(PROCESSING_TIME),
        )
    )
    return first_in_cell.select(TOPIC, PARTITION, EVENT_TIME, record_position().alias(POSITION))


def combined(per_partition: DataFrame, strategy: WatermarkStrategy, n_partitions: int) -> DataFrame:
    """Where the combined watermark reaches each target (``_target``, ``_pos``), from where
    each partition's does (``_target``, ``_reached``: a position, null where never)."""
    if strategy.combine == "max":  # the first partition to reach it decides
        reached = per_partition.groupBy(TARGET).agg(F.min(REACHED).alias(REACHED))
    else:  # every partition must have reached it; the last one decides
        reached = (
            per_partition.groupBy(TARGET)
            .agg(F.count(REACHED).alias("_partitions"), F.max(REACHED).alias(REACHED))
            .where(F.col("_partitions") == n_partitions)
        )
    reached = reached.where(F.col(REACHED).isNotNull())
    return reached.select(TARGET, strategy.emitted_at(F.col(REACHED)).alias(POSITION))


def reaches_with_idleness(
    idle: DataFrame,
    per_partition: DataFrame,
    keys: list[tuple[str, int]],
    strategy: WatermarkStrategy,
) -> DataFrame:
    """As :func:`watermark_reaches`, with idle partitions left out: ``idle``, the partitions'
    idle periods (:func:`idleness.idle_periods`); ``per_partition``, where each partition
    (``keys``) reaches each target (``_target``, ``_reached``). A partition's *level* is how
    many targets its watermark has reached; the combined level is replayed
    (:mod:`watermark_replay`)."""
    _one_topic(keys, strategy)
    # A partition reaching a target has reached every smaller one: the reached targets are the
    # levels. Kept, as both the events and the levels read them.
    kept = per_partition.where(F.col(REACHED).isNotNull()).persist()
    levels = (
        kept.select(TARGET)
        .distinct()
        .withColumn("_level", F.dense_rank().over(Window.orderBy(TARGET)).cast("long"))
        .persist()
    )
    reached = kept.join(F.broadcast(levels), TARGET)
    events = reached.select(
        TOPIC,
        PARTITION,
        F.col(REACHED).alias(EVENT_AT),
        F.lit(REACH).alias(EVENT_KIND),
        F.col("_level").alias(EVENT_VALUE),
    ).unionByName(idle_events(idle, tick_position(F.col(IDLE_FROM)), F.col(IDLE_UNTIL)))
    at = F.col(EVENT_AT)
    if strategy.emission == "periodic":
        at = strategy.emitted_at(at)
    rises = replay(events.withColumn(EVENT_AT, at), keys, initial=0)
    crossed = rises.select(
        F.explode(F.sequence(F.col(RISE_FROM) + 1, F.col(RISE_TO))).alias("_level"),
        from_fields().alias(POSITION),
    )
    timeline = crossed.join(F.broadcast(levels), "_level").select(TARGET, POSITION)
    timeline = timeline.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    timeline.count()  # computed now, so the inputs can go
    levels.unpersist()
    kept.unpersist()
    return timeline


def watermark_timeline(
    records: DataFrame, strategy: WatermarkStrategy, bounds: Mapping[str, int] | None = None
) -> DataFrame:
    """Every change of the combined watermark before the archive ends: ``_pos`` and ``_w``,
    the watermark from there on. At most one row per tick in periodic mode (one per record
    that raises it, on-event)."""
    interval = strategy.interval_ms
    value = rules.partition_watermark(F.col(EVENT_TIME), bound_of_topic(strategy, bounds))
    if strategy.emission == "on_event":
        at = F.col(POSITION)
    else:
        at = tick_position(next_tick(F.col(PROCESSING_TIME), interval))
    spans = (
        records.groupBy(TOPIC, PARTITION)
        .agg(F.min(PROCESSING_TIME).alias("_span_from"), F.max(PROCESSING_TIME).alias("_span_to"))
        .collect()
    )
    partitions = [(r[TOPIC], r[PARTITION]) for r in spans]
    rises = _rises(records).select(
        TOPIC,
        PARTITION,
        at.alias(EVENT_AT),
        value.alias(EVENT_VALUE),
        F.lit(REACH).alias(EVENT_KIND),
    )
    if strategy.detects_idleness:
        _one_topic(partitions, strategy)
        idle = idle_periods(records, interval, strategy.idle_timeout_ms)
        wakes = F.col(IDLE_UNTIL)
        if strategy.emission == "periodic":
            wakes = tick_position(next_tick(F.col(WAKES_AT), interval))
        rises = rises.groupBy(TOPIC, PARTITION, EVENT_AT, EVENT_KIND).agg(
            F.max(EVENT_VALUE).alias(EVENT_VALUE)
        )  # fewer rows for the one task
        events = rises.unionByName(idle_events(idle, tick_position(F.col(IDLE_FROM)), wakes))
        changes = replay(events, partitions, LONG_MIN, strategy.combine)
    else:
        first = min((r["_span_from"] for r in spans), default=0)
        last = max((r["_span_to"] for r in spans), default=0) + interval  # its tick
        changes = replay_in_ranges(rises, partitions, LONG_MIN, strategy.combine, (first, last))
    return changes.select(from_fields().alias(POSITION), F.col(RISE_TO).alias(WATERMARK))
