"""The global processing order: where every moment of the job stands.

The model: docs/concepts/model.md#records-and-processing-time.

Records, periodic watermark ticks and processing-time timers are moments of one order, a
:class:`Position` ``(time, phase, topic, partition, offset)`` compared field by field. Within
one millisecond, processing-time timers due then fire first (Flink fires a timer for ``maxTs``
at ``maxTs + 1``, before that millisecond's records), then records in ``(topic, partition,
offset)`` order (the tie-break is a convention, the same everywhere), then the periodic tick
(a record and a tick at the same millisecond: the record first).

One encoding for every stage: a Spark struct with these fields in DataFrames, the same
tuple in Python (the session replay); Spark orders structs and Python tuples alike (strings
by code point, which is UTF-8 byte order). "Was the record processed before the watermark?"
is ``record < watermark`` in either.
"""

from __future__ import annotations

from typing import NamedTuple

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from feast_stream_backfill import rules
from feast_stream_backfill.columns import OFFSET, PARTITION, PROCESSING_TIME, TOPIC

CLOCK, RECORD, TICK = -1, 0, 1
#: Flink's ``Long.MIN_VALUE``: the watermark before any.
LONG_MIN = -(1 << 63)

#: The struct's fields and their Spark types, in comparison order.
FIELDS: tuple[tuple[str, str], ...] = (
    ("time", "bigint"),
    ("phase", "int"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
)
_TYPES = {"bigint": LongType(), "int": IntegerType(), "string": StringType()}
STRUCT = StructType([StructField(name, _TYPES[kind]) for name, kind in FIELDS])


class Position(NamedTuple):
    time: int
    phase: int
    topic: str
    partition: int
    offset: int

    @classmethod
    def record(cls, time: int, topic: str, partition: int, offset: int) -> Position:
        return cls(time, RECORD, topic, partition, offset)

    @classmethod
    def tick(cls, time: int) -> Position:
        return cls(time, TICK, "", 0, 0)

    @classmethod
    def clock(cls, max_ts: int) -> Position:
        """A processing-time timer for ``maxTs``: fired at :func:`rules.clock_fires_at`, before
        that millisecond's records."""
        return cls(rules.clock_fires_at(max_ts), CLOCK, "", 0, 0)


def _struct(time: Column, phase: int, topic: Column, partition: Column, offset: Column) -> Column:
    return F.struct(
        time.cast("bigint").alias("time"),
        F.lit(phase).alias("phase"),
        topic.alias("topic"),
        partition.cast("int").alias("partition"),
        offset.cast("bigint").alias("offset"),
    )


def record_position() -> Column:
    """Where a record stands: at its processing time, among that ms's records by topic,
    partition and offset. Never null (a record always has a processing time), so Spark
    compares it without null checks."""
    return _struct(F.col(PROCESSING_TIME), RECORD, F.col(TOPIC), F.col(PARTITION), F.col(OFFSET))


def _moment(time: Column, phase: int) -> Column:
    """A tick or timer; null where ``time`` is null (no such moment, e.g. an idle partition
    that no record wakes), so that ``isNotNull`` tells whether the moment exists."""
    return F.when(time.isNotNull(), _struct(time, phase, F.lit(""), F.lit(0), F.lit(0)))


def tick_position(time: Column) -> Column:
    """A periodic watermark tick: after every record of the same millisecond."""
    return _moment(time, TICK)


def clock_position(max_ts: Column) -> Column:
    """A processing-time timer for ``maxTs``, as :meth:`Position.clock`."""
    return _moment(rules.clock_fires_at(max_ts), CLOCK)


def next_tick(time: Column, interval_ms: int) -> Column:
    """The first tick (a multiple of the interval since the epoch) at or after ``time``."""
    return F.ceil(time / F.lit(interval_ms)).cast("bigint") * interval_ms


def fields(column: str | Column) -> list[Column]:
    """A position column as its fields, named as :data:`FIELDS` (for Arrow and pandas)."""
    struct = F.col(column) if isinstance(column, str) else column
    return [struct[name].alias(name) for name, _ in FIELDS]


def from_fields(prefix: str = "") -> Column:
    """The position struct from flat columns ``<prefix>time``, ``<prefix>phase``, ..."""
    return F.struct(*[F.col(f"{prefix}{name}").alias(name) for name, _ in FIELDS])
