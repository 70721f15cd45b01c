"""When does the job's watermark pass a given event time? (SEMANTICS section 2)

Flink's bounded-out-of-orderness generator gives each partition ``p`` the watermark
``maxEt_p - B - 1 ms``; the source combines partitions by MIN, so the combined watermark
reaches ``x`` at the first moment *every* partition has seen an event time ``>= x + B + 1``:

    first(W >= x) = MAX over partitions of (first record of p with et >= x + B + 1)

That needs no per-record watermark: for each target ``x`` (a window's ``maxTs``) one
descending sweep per partition finds that record, and the result, one row per target, is
small enough to broadcast.

Moments are *positions* in the global processing order ``(time, phase, topic, partition,
offset)``: a record is at ``(pt, 0, topic, partition, offset)``; a periodic watermark tick at
``t`` is at ``(t, 1, ...)``, after every record of the same millisecond. A record is processed
before a watermark iff its position is ``<=`` the watermark's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.idleness import idle_events, idle_periods
from feast_stream_backfill.processing_time import PROCESSING_TIME
from feast_stream_backfill.records import EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.watermark_replay import REACH, replay

POSITION, TARGET, REACHED = "_pos", "_target", "_reached"


def position(time: Column, phase: int, topic: Column, partition: Column, offset: Column) -> Column:
    return F.struct(
        time.alias("time"),
        F.lit(phase).alias("phase"),
        topic.alias("topic"),
        partition.alias("partition"),
        offset.alias("offset"),
    )


def record_position() -> Column:
    """Where a record stands in the global processing order."""
    return position(F.col(PROCESSING_TIME), 0, F.col(TOPIC), F.col(PARTITION), F.col(OFFSET))


def tick_position(time: Column) -> Column:
    """A periodic watermark tick: after every record of the same millisecond."""
    return position(time, 1, F.lit(""), F.lit(0), F.lit(0).cast("long"))


def clock_position(max_ts: Column) -> Column:
    """A processing-time timer for ``maxTs``: Flink fires it at ``maxTs + 1`` at the earliest
    (``ProcessingTimeServiceUtil.getProcessingTimeDelay`` adds 1 ms so that the records of
    ``maxTs`` are in), so it stands at ``maxTs + 1``, before the records of that ms."""
    return position(max_ts + 1, -1, F.lit(""), F.lit(0), F.lit(0).cast("long"))


@dataclass(frozen=True)
class WatermarkStrategy:
    """Flink's ``forBoundedOutOfOrderness(B)`` with ``pipeline.auto-watermark-interval`` I.

    ``emission="periodic"`` emits on the timer's ticks (Flink's default generator);
    ``"on_event"`` after every record. Ticks are at multiples of ``interval_ms`` since the epoch.
    ``combine="min"`` is Flink's source (MIN over partitions); ``"max"`` is the seed's
    simplification (readers perfectly aligned), also what one reader does when the watermark
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
        time = reached["time"]
        tick = F.ceil(time / F.lit(self.interval_ms)).cast("long") * self.interval_ms
        return tick_position(tick)


def _out_of_orderness(strategy: WatermarkStrategy, bounds: Mapping[str, int] | None) -> Column:
    bound: Column = F.lit(strategy.out_of_orderness_ms)
    for topic, topic_bound in (bounds or {}).items():  # each source has its own generator
        bound = F.when(F.col(TOPIC) == topic, F.lit(topic_bound)).otherwise(bound)
    return bound


def _archive_span(records: DataFrame, strategy: WatermarkStrategy) -> tuple[int, int]:
    """The job's first processing time and the archive's end: the first tick at or after
    its last record (or that record, without a periodic timer)."""
    first, last = records.agg(F.min(PROCESSING_TIME), F.max(PROCESSING_TIME)).first()
    interval = strategy.interval_ms
    return first, (-(-last // interval) * interval if interval else last)


def watermark_reaches(
    records: DataFrame,
    targets: DataFrame,
    strategy: WatermarkStrategy,
    bounds: Mapping[str, int] | None = None,
) -> DataFrame:
    """For each ``_target`` (epoch ms), ``_pos``: the first watermark with ``W >= _target``.

    ``records`` are the distinct records of every source partition, with ``_pt``. Targets the
    watermark never reaches before the archive ends are absent (a live job has not fired them
    yet). A partition without any record holds the watermark back forever, as in Flink.
    ``bounds`` gives a topic its own out-of-orderness B (Flink: one watermark strategy per
    source); other topics use the strategy's.
    """
    partitions = records.select(TOPIC, PARTITION).distinct()
    n_partitions = partitions.count() if strategy.combine == "min" else 0
    if strategy.detects_idleness and records.select(TOPIC).distinct().count() > 1:
        raise ValueError(
            "idleness with several topics (Flink's StatusWatermarkValve across "
            "sources) is not modelled yet: use one topic, or no idleness"
        )
    threshold = F.col(TARGET) + _out_of_orderness(strategy, bounds) + 1
    sweep = records.select(
        TOPIC,
        PARTITION,
        F.col(EVENT_TIME).alias("_value"),
        F.lit(0).alias("_kind"),
        F.lit(None).cast("long").alias(TARGET),
        record_position().alias(POSITION),
    ).unionByName(
        targets.select(TARGET)
        .distinct()
        .crossJoin(F.broadcast(partitions))
        .select(
            TOPIC,
            PARTITION,
            threshold.alias("_value"),
            F.lit(1).alias("_kind"),
            TARGET,
            F.when(F.lit(False), tick_position(F.lit(0).cast("long"))).alias(POSITION),
        ),
        allowMissingColumns=False,
    )
    # Descending event time, records before a target of equal value: the running MIN of
    # positions is the first record (in processing order) whose event time reaches it.
    descending = Window.partitionBy(TOPIC, PARTITION).orderBy(F.desc("_value"), "_kind")
    per_partition = sweep.withColumn(
        REACHED, F.min(POSITION).over(descending.rowsBetween(Window.unboundedPreceding, 0))
    ).where(F.col("_kind") == 1)
    if strategy.detects_idleness:
        return _reaches_with_idleness(records, per_partition, partitions, strategy)
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


def _reaches_with_idleness(
    records: DataFrame, per_partition: DataFrame, partitions: DataFrame, strategy: WatermarkStrategy
) -> DataFrame:
    """As :func:`watermark_reaches`, with idle partitions left out (:mod:`idleness`): a
    partition's *level* is how many targets its watermark has reached; the combined level is
    replayed (:mod:`watermark_replay`)."""
    interval = strategy.interval_ms
    start, horizon = _archive_span(records, strategy)
    idle = idle_periods(
        records, record_position(), interval, strategy.idle_timeout_ms, start, horizon
    )
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
        F.col(REACHED).alias("_at"),
        F.lit(REACH).alias("_kind"),
        F.col("_level").alias("_value"),
    ).unionByName(idle_events(idle, tick_position(F.col("_idle_from")), F.col("_idle_until")))
    at = F.col("_at") if strategy.emission == "on_event" else strategy.emitted_at(F.col("_at"))
    fields = [
        ("time", "long"),
        ("phase", "int"),
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "long"),
    ]
    flat = events.select(*[at[f].alias(f) for f, _ in fields], TOPIC, PARTITION, "_kind", "_value")
    keys = [(r[TOPIC], r[PARTITION]) for r in partitions.collect()]
    rises = replay(flat, fields, keys, initial=0)
    crossed = rises.select(
        F.explode(F.sequence(F.col("_from") + 1, F.col("_to"))).alias("_level"),
        F.struct(*[f for f, _ in fields]).alias(POSITION),
    )
    timeline = crossed.join(F.broadcast(levels), "_level").select(TARGET, POSITION)
    timeline = timeline.localCheckpoint()  # computed now, so the inputs can go
    levels.unpersist()
    kept.unpersist()
    return timeline


KEY_BITS = 22
TICK_SLOT = (1 << KEY_BITS) - 1
LONG_MIN = -(1 << 63)


def position_key(time: Column, slot: Column) -> Column:
    """A position as one sortable long: ``time << 22 | slot``, where a record's slot is its
    rank among the records of its millisecond and a tick's is the last one."""
    return F.shiftleft(time.cast("long"), KEY_BITS).bitwiseOR(slot.cast("long"))


def tick_key(time: Column) -> Column:
    return position_key(time, F.lit(TICK_SLOT))


def with_position_keys(records: DataFrame) -> DataFrame:
    """Add ``_key``: the record's :func:`position_key` (ranks by topic, partition, offset)."""
    same_ms = Window.partitionBy(PROCESSING_TIME).orderBy(TOPIC, PARTITION, OFFSET)
    slot = F.row_number().over(same_ms) - 1
    checked = F.when(slot < TICK_SLOT, slot).otherwise(
        F.raise_error(F.lit(f"more than {TICK_SLOT} records share one millisecond"))
    )
    return records.withColumn("_key", position_key(F.col(PROCESSING_TIME), checked))


def watermark_timeline(
    records: DataFrame, strategy: WatermarkStrategy, bounds: Mapping[str, int] | None = None
) -> DataFrame:
    """Every change of the combined watermark before the archive ends: ``_key`` (a
    :func:`position_key`) and ``_w``, the watermark from there on. ``records`` carry ``_key``.
    At most one row per tick in periodic mode (one per record that raises it, on-event)."""
    interval = strategy.interval_ms
    earlier = (
        Window.partitionBy(TOPIC, PARTITION)
        .orderBy(OFFSET)
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    before = F.max(EVENT_TIME).over(earlier)
    value = F.col(EVENT_TIME) - _out_of_orderness(strategy, bounds) - 1
    if strategy.emission == "on_event":
        group = F.col("_key")
    else:
        group = tick_key(F.ceil(F.col(PROCESSING_TIME) / interval).cast("long") * interval)
    rises = (
        records.withColumn("_before", before)
        .where(F.col("_before").isNull() | (F.col(EVENT_TIME) > F.col("_before")))
        .groupBy(TOPIC, PARTITION, group.alias("_g"))
        .agg(F.max(value).alias("_value"))
        .withColumn("_kind", F.lit(REACH))
    )
    if strategy.detects_idleness:
        start, horizon = _archive_span(records, strategy)
        idle = idle_periods(
            records, F.col("_key"), interval, strategy.idle_timeout_ms, start, horizon
        )
        wakes = F.col("_idle_until")
        if strategy.emission == "periodic":
            wakes = tick_key(F.ceil(F.col("_wakes_at") / interval).cast("long") * interval)
        events = idle_events(idle, tick_key(F.col("_idle_from")), wakes)
        rises = rises.unionByName(events.withColumnRenamed("_at", "_g"))
    partitions = [
        (r[TOPIC], r[PARTITION]) for r in records.select(TOPIC, PARTITION).distinct().collect()
    ]
    changes = replay(rises, [("_g", "long")], partitions, LONG_MIN, strategy.combine)
    return changes.select(F.col("_g").alias("_key"), F.col("_to").alias("_w"))
