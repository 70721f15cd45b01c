"""Session windows (SEMANTICS section 3): Flink's ``MergingWindowSet``, key by key.

A session's extent depends on which records merged into it, in processing order, and whether
a record is late depends on the merged window (a record that alone would be late can join a
live session): there is no closed form. So each key's records are replayed in processing
order (sorted by key and position, streamed through one Python function per Spark partition),
as ``WindowOperator`` does for a merging assigner, against the
combined watermark's timeline (:func:`watermarks.watermark_timeline`, broadcast: one row per
change of the watermark, at most one per tick in periodic mode). Per key this is linear in its
records; the aggregates are kept per session and merged with it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    FloatType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.processing_time import PROCESSING_TIME
from feast_stream_backfill.records import EVENT_TIME
from feast_stream_backfill.triggers import (
    DROPPED,
    FIRE_POSITION,
    FIRED_BY_RECORD,
    LATE,
    ON_TIME,
    PENDING,
    PER_RECORD,
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)
from feast_stream_backfill.watermarks import (
    KEY_BITS,
    LONG_MIN,
    POSITION,
    TICK_SLOT,
    clock_position,
    tick_position,
)
from feast_stream_backfill.windows import WINDOW_END, WINDOW_START, Domain, check_window


@dataclass(frozen=True)
class SessionWindows:
    """Flink's ``{EventTime,ProcessingTime}SessionWindows.withGap(gap)``: a record opens
    ``[t, t + gap)``; windows that touch merge."""

    gap_ms: int
    domain: Domain = "event"

    def __post_init__(self) -> None:
        check_window(self.domain, gap=self.gap_ms)


@dataclass
class _Session:
    end: int
    cleanup: int | None  # position key from which its state is gone (None: not in the archive)
    stats: list[list[float]]  # per aggregated column: n, sum, min, max
    rows: int = 0
    timer: int | None = None  # position key of the on-time firing, once registered
    buffered: int = 0  # records waiting for that firing

    def expired(self, before: float) -> bool:
        return self.timer is None and self.cleanup is not None and self.cleanup < before

    def add(self, values: Sequence[object]) -> None:
        self.rows += 1
        for s, v in zip(self.stats, values, strict=True):
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            s[0] += 1
            s[1] += v
            s[2] = v if s[0] == 1 else min(s[2], v)
            s[3] = v if s[0] == 1 else max(s[3], v)

    def absorb(self, other: _Session) -> None:
        self.rows += other.rows
        self.buffered += other.buffered
        for s, o in zip(self.stats, other.stats, strict=True):
            if o[0]:
                s[2] = o[2] if not s[0] else min(s[2], o[2])
                s[3] = o[3] if not s[0] else max(s[3], o[3])
                s[0] += o[0]
                s[1] += o[1]


def _value(function: str, s: list[float]) -> object:
    n, total, low, high = s
    if function == "count":
        return n
    if not n:
        return None
    return {"sum": total, "mean": total / n, "min": low, "max": high}[function]


def session_firings(
    windowed: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    window: SessionWindows,
    trigger: EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger,
    timeline: DataFrame | None,
) -> tuple[DataFrame, DataFrame, DataFrame]:
    """Returns (firings, dropped, statuses): firings as :mod:`triggers` builds them (with
    ``_fire_pos``), dropped records per key and (own) window, and ``_status`` counts."""
    spark = windowed.sparkSession
    if timeline is not None:
        table = timeline.orderBy("_key").toArrow()
        changes = spark.sparkContext.broadcast(
            (table.column("_key").to_numpy(), table.column("_w").to_numpy())
        )
    event_time = window.domain == "event"
    lateness = getattr(trigger, "allowed_lateness_ms", 0) if event_time else 0
    per_record = isinstance(trigger, PerRecordTrigger)
    gap = window.gap_ms
    columns = list(dict.fromkeys(a.column for a in aggregations))
    functions = [(a.function, columns.index(a.column)) for a in aggregations]
    fields = windowed.select(*keys, *columns).schema
    schema = StructType(
        [
            *[StructField(f.name, f.dataType, True) for f in fields[: len(keys)]],
            StructField("_row", StringType()),
            StructField(WINDOW_START, LongType()),
            StructField(WINDOW_END, LongType()),
            StructField("_fire_key", LongType()),
            StructField(FIRED_BY_RECORD, BooleanType()),
            StructField("firing", StringType()),
            StructField("record_count", LongType()),
            StructField("_n", LongType()),
            *[StructField(a.name, _type(a, fields[a.column].dataType)) for a in aggregations],
        ]
    )
    time_column = EVENT_TIME if event_time else PROCESSING_TIME

    width = len(keys)

    def replay(batches: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        """Records sorted by key then position: one key's sessions at a time."""
        change_keys, change_w = changes.value if event_time else (None, None)

        def first_reaching(target: int) -> int | None:
            """The position key of the first watermark >= target (None: not in the archive)."""
            if not event_time:
                return (target << KEY_BITS) | TICK_SLOT  # the clock, after that ms's records
            i = int(np.searchsorted(change_w, target, side="left"))
            return int(change_keys[i]) if i < len(change_w) else None

        def watermark_before(key: int) -> int:
            i = int(np.searchsorted(change_keys, key, side="left")) - 1
            return int(change_w[i]) if i >= 0 else LONG_MIN

        counts = dict.fromkeys((ON_TIME, LATE, PER_RECORD, DROPPED, PENDING), 0)
        rows: list[tuple] = []
        blank = (None,) * len(aggregations)
        current: tuple = ()
        sessions: dict[int, _Session] = {}
        dropped: dict[int, int] = {}

        def fire(start: int, s: _Session, at: int, by_record: bool, label: str) -> None:
            values = [_value(f, s.stats[i]) for f, i in functions]
            rows.append(
                (*current, "firing", start, s.end, at, by_record, label, s.rows, 0, *values)
            )

        def advance(before: float) -> None:
            """Timers due before the position ``before`` fire (in timestamp order), then
            sessions past their cleanup time lose their state."""
            due = sorted(
                (s.timer, s.end, start)
                for start, s in sessions.items()
                if s.timer is not None and s.timer < before
            )
            for at, _, start in due:
                s = sessions[start]
                fire(start, s, at, False, ON_TIME)
                counts[ON_TIME] += s.buffered
                s.timer, s.buffered = None, 0
            for start in [st for st, s in sessions.items() if s.expired(before)]:
                del sessions[start]

        def finish_key() -> None:
            advance(math.inf)
            counts[PENDING] += sum(s.buffered for s in sessions.values())
            for time, n in dropped.items():
                rows.append((*current, "dropped", time, time + gap, *(None,) * 4, n, *blank))
            sessions.clear()
            dropped.clear()

        for batch in batches:
            for record in batch.itertuples(index=False, name=None):
                if record[:width] != current:
                    if current:
                        finish_key()
                    current = record[:width]
                key, time = int(record[width]), int(record[width + 1])
                advance(key)
                start, end = time, time + gap
                touching = [st for st, s in sessions.items() if st <= end and s.end >= start]
                start = min([start, *touching])
                end = max([end, *(sessions[st].end for st in touching)])
                watermark = watermark_before(key) if event_time else LONG_MIN
                if event_time and end - 1 + lateness <= watermark:
                    dropped[time] = dropped.get(time, 0) + 1
                    counts[DROPPED] += 1
                    continue
                merged = _Session(
                    end, first_reaching(end - 1 + lateness), [[0, 0, 0, 0] for _ in columns]
                )
                for st in touching:
                    merged.absorb(sessions.pop(st))
                merged.add(record[width + 2 :])
                sessions[start] = merged
                if per_record:
                    fire(start, merged, key, True, PER_RECORD)
                    counts[PER_RECORD] += 1
                elif event_time and end - 1 <= watermark:
                    fire(start, merged, key, True, LATE)
                    counts[LATE] += 1
                    counts[ON_TIME] += merged.buffered
                    merged.buffered = 0
                else:
                    merged.timer = first_reaching(end - 1)
                    merged.buffered += 1
            if rows:
                yield pd.DataFrame(rows, columns=schema.fieldNames())
                rows.clear()
        if current:
            finish_key()
        empty_key = (None,) * width
        for status, n in counts.items():
            rows.append((*empty_key, "status", None, None, None, None, status, None, n, *blank))
        yield pd.DataFrame(rows, columns=schema.fieldNames())

    out = (
        windowed.select(*keys, "_key", time_column, *columns)
        .repartition(*keys)
        .sortWithinPartitions(*keys, "_key")
        .mapInPandas(replay, schema)
    )
    firings = out.where(F.col("_row") == "firing")
    tick = (F.col("_fire_key").bitwiseAND(F.lit(TICK_SLOT))) == TICK_SLOT
    by_record = windowed.select(F.col("_key").alias("_fire_key"), POSITION)
    fired_at = F.shiftright("_fire_key", KEY_BITS)
    at_tick = clock_position(fired_at) if not event_time else tick_position(fired_at)
    firings = firings.join(by_record, "_fire_key", "left").withColumn(
        FIRE_POSITION, F.when(tick, at_tick).otherwise(F.col(POSITION))
    )
    dropped = out.where(F.col("_row") == "dropped").select(
        *keys, WINDOW_START, WINDOW_END, F.col("_n").alias("dropped_count")
    )
    statuses = out.where(F.col("_row") == "status").groupBy(F.col("firing").alias("_status"))
    return firings, dropped, statuses.agg(F.sum("_n").alias("n"))


def _type(aggregation: Aggregation, column_type: DataType) -> DataType:
    """The type Spark's own aggregate would give (as :mod:`aggregations` computes it)."""
    if aggregation.function == "count":
        return LongType()
    if aggregation.function == "mean" or isinstance(column_type, (DoubleType, FloatType)):
        return DoubleType()
    return LongType() if aggregation.function == "sum" else column_type
