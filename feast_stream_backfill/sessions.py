"""Session windows in Spark: closed form where Flink's merges are simple, a replay elsewhere.

A session's extent depends on the order its records merged in and on the watermark each one
saw, so each record first gets that watermark (:mod:`watermark_lookup`; processing time: the
clock, ``pt - 1``). Then, per key in processing order, window functions check the simple
case: each record either opens a session beyond every earlier one (or after all of them are
gone) or joins the one open session, touching only it, before its timer fires. Such a key's
sessions are groups: each fires once with all its records when the watermark reaches its
``maxTs`` (per record: a running aggregate), as :class:`MergingWindowSet` would have found.
The other keys' records (late records, bridging ones, ...) stream through one
:class:`MergingWindowSet` per key (``mapInArrow``, rows sorted by key and position). Timers'
firings carry their target, and where the watermark first reached it is looked up at the end:
nothing about the watermark is collected to the driver but its last value.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    FIRE_POSITION,
    FIRED_BY_RECORD,
    POSITION,
    STATUS,
    TARGET,
    WATERMARK,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.merging_window_set import MergingWindowSet
from feast_stream_backfill.processing_order import (
    FIELDS,
    STRUCT,
    Position,
    clock_position,
    from_fields,
)
from feast_stream_backfill.stages import stage
from feast_stream_backfill.triggers import DROPPED, ON_TIME, PENDING, PER_RECORD, STATUSES, Trigger
from feast_stream_backfill.watermark_lookup import (
    bucket_width,
    timeline_reaches,
    watermark_before,
)
from feast_stream_backfill.watermarks import LONG_MIN
from feast_stream_backfill.windows import SessionWindows

_ROW, _COUNT, _AT = "_kind_of_row", "_n", "_at_"  # replay output: a firing, dropped, a status
_TIME, _HIGHEST, _OPENS, _FLOOR = "_time", "_highest_before", "_opens", "_floor"
_SESSION, _SIMPLE, _DROPPED = "_session", "_simple", "_dropped_here"


def session_firings(
    records: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    window: SessionWindows,
    trigger: Trigger,
    timeline: DataFrame | None,
) -> tuple[DataFrame, DataFrame, DataFrame, list[DataFrame]]:
    """Returns (firings, dropped, statuses, cached): firings as the emission log reads them
    (with ``_fire_pos``), dropped records per key and (own) window, ``_status`` counts, and
    what is kept for them (release it after use). ``timeline`` (``_pos``, ``_w``) is the
    combined watermark's changes; None for processing-time sessions."""
    lateness = trigger.allowed_lateness_ms if timeline is not None else 0
    columns = list(dict.fromkeys(a.column for a in aggregations))
    timed = records.select(*dict.fromkeys([*keys, *columns]), window.time().alias(_TIME), POSITION)
    cached: list[DataFrame] = []
    if timeline is None:  # the clock: a timer for maxTs fires before the records at maxTs + 1
        seen = timed.withColumn(WATERMARK, F.col(POSITION)["time"] - 1)
        last_watermark: float = math.inf
    else:
        timeline = timeline.persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(timeline)
        with stage("watermark"):
            width = bucket_width(timeline)
            last = timeline.agg(F.max(WATERMARK)).first()[0]
        last_watermark = -math.inf if last is None else last
        seen = watermark_before(timed, timeline, width)
        seen = seen.withColumn(WATERMARK, F.coalesce(WATERMARK, F.lit(LONG_MIN)))
    classified = _classify(seen, keys, window.gap_ms, trigger, lateness)
    classified = classified.persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(classified)
    simple = classified.where(F.col(_SIMPLE) & ~F.col(_DROPPED))
    dropped_simply = (
        classified.where(F.col(_SIMPLE) & F.col(_DROPPED))
        .groupBy(*keys, F.col(_TIME).alias(WINDOW_START))
        .agg(F.count(F.lit(1)).alias("dropped_count"))
        .select(
            *keys,
            WINDOW_START,
            (F.col(WINDOW_START) + window.gap_ms).alias(WINDOW_END),
            "dropped_count",
        )
    )
    if trigger.timer is None:
        closed, closed_statuses = _per_record(simple, keys, aggregations, window.gap_ms)
    else:
        closed, closed_statuses = _by_timer(
            simple, keys, aggregations, window.gap_ms, last_watermark
        )
    replayed = _replay(
        classified.where(~F.col(_SIMPLE)),
        keys,
        aggregations,
        window.gap_ms,
        trigger,
        lateness,
        last_watermark,
    ).persist(StorageLevel.MEMORY_AND_DISK)
    cached.append(replayed)
    features = [a.name for a in aggregations]
    fired = closed.unionByName(
        replayed.where(F.col(_ROW) == "firing").select(
            *keys,
            WINDOW_START,
            WINDOW_END,
            F.when(F.col(FIRED_BY_RECORD), from_fields(_AT)).alias(POSITION),
            TARGET,
            FIRED_BY_RECORD,
            "firing",
            "record_count",
            *features,
        )
    )
    if timeline is None:
        where = F.coalesce(POSITION, clock_position(F.col(TARGET)))
    else:
        fired = fired.persist(StorageLevel.MEMORY_AND_DISK)  # read for its targets, then joined
        cached.append(fired)
        targets = fired.where(F.col(TARGET).isNotNull()).select(TARGET).distinct()
        reaches = timeline_reaches(targets, timeline, width).withColumnRenamed(
            POSITION, "_reached_at"
        )
        fired = fired.join(reaches, TARGET, "left")
        where = F.coalesce(POSITION, "_reached_at")
    firings = fired.select(
        *keys,
        WINDOW_START,
        WINDOW_END,
        where.alias(FIRE_POSITION),
        FIRED_BY_RECORD,
        "firing",
        "record_count",
        *features,
    )
    dropped = (
        replayed.where(F.col(_ROW) == "dropped")
        .select(*keys, WINDOW_START, WINDOW_END, F.col(_COUNT).alias("dropped_count"))
        .unionByName(dropped_simply)
    )
    statuses = (
        replayed.where(F.col(_ROW) == "status")
        .select(F.col("firing").alias(STATUS), F.col(_COUNT).alias("n"))
        .unionByName(closed_statuses)
        .unionByName(
            dropped_simply.select(F.lit(DROPPED).alias(STATUS), F.col("dropped_count").alias("n"))
        )
        .groupBy(STATUS)
        .agg(F.sum("n").alias("n"))
    )
    return firings, dropped, statuses, cached


def _classify(
    seen: DataFrame, keys: Sequence[str], gap: int, trigger: Trigger, lateness: int
) -> DataFrame:
    """``_dropped_here``, ``_session`` (per key, in processing order) and ``_simple``: does
    the key take the closed form? It does if, in processing order, every record

    - is dropped for certain: its own window ``[t, t + gap)`` is closed (``W >= maxTs + L``)
      and it touches no live session: every earlier record's window is closed too, or it
      falls short of the open session by more than the gap and the earlier ones are gone;
    - or opens a session: its own window is not late (per record: not closed), and it lies
      beyond every earlier accepted record's window (``t > highest + gap``), or all their
      sessions are gone (``W >= highest + gap - 1 + L``) and ``t > highest``;
    - or joins the open session: it touches it (``t >= its lowest - gap``), touches no
      earlier live session (``t > highest when it opened + gap``), and the open session's
      timer has not fired (per record: its state is not gone): ``W < highest + gap - 1``.

    Then no record is late or merges two sessions, and a dropped one changes nothing: each
    session holds exactly its group's accepted records when it fires."""
    t, w = F.col(_TIME), F.col(WATERMARK)
    # the open session's timer must not have fired; without a timer, its state must be live
    live_until = lateness if trigger.timer is None else 0
    by_position = Window.partitionBy(*keys).orderBy(POSITION)
    earlier = by_position.rowsBetween(Window.unboundedPreceding, -1)
    highest = F.col(_HIGHEST)
    after = lambda h: w >= h + gap - 1 + lateness  # noqa: E731 (the state of h's window is gone)
    closed = after(t)
    dropped = seen.withColumn(
        _DROPPED, closed & F.coalesce(after(F.max(t).over(earlier)), F.lit(True))
    )
    opened = dropped.withColumn(
        _HIGHEST, F.max(F.when(~F.col(_DROPPED), t)).over(earlier)
    ).withColumns(
        {
            _OPENS: ~F.col(_DROPPED)
            & (highest.isNull() | (t > highest + gap) | ((t > highest) & after(highest))),
            _FLOOR: F.when(highest.isNotNull() & ~after(highest), highest + gap),
        }
    )
    sessions = opened.withColumn(
        _SESSION,
        F.sum(F.col(_OPENS).cast("long")).over(
            by_position.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        ),
    )
    by_session = Window.partitionBy(*keys, _SESSION).orderBy(POSITION)
    before_in_session = by_session.rowsBetween(Window.unboundedPreceding, -1)
    floor = F.col(_FLOOR)
    sessions = sessions.withColumn(
        _FLOOR, F.first(_FLOOR).over(by_session.rowsBetween(Window.unboundedPreceding, 0))
    )
    # Closed, and short of the open session's lowest record (of any: a lower bound) by more
    # than the gap while every earlier session is gone: it touches nothing live.
    sessions = sessions.withColumn(
        _DROPPED,
        F.col(_DROPPED)
        | (
            ~F.col(_OPENS)
            & closed
            & (t + gap < F.min(t).over(before_in_session))
            & (floor.isNull() | (w >= floor - 1 + lateness))
        ),
    )
    lowest = F.min(F.when(~F.col(_DROPPED), t)).over(before_in_session)
    ok = (
        F.when(F.col(_DROPPED), True)
        .when(F.col(_OPENS), t + gap - 1 + live_until > w)
        .otherwise(
            (t >= lowest - gap)
            & (floor.isNull() | (t > floor))
            & (w < highest + gap - 1 + live_until)
        )
    )
    checked = sessions.withColumn("_ok", ok.cast("int"))
    return checked.withColumn(_SIMPLE, F.min("_ok").over(Window.partitionBy(*keys)) == 1).drop(
        "_ok", _HIGHEST, _OPENS, _FLOOR
    )


def _firing_columns(
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    at: Column,
    target: Column,
    label: str,
) -> list[Column]:
    return [
        *keys,
        WINDOW_START,
        WINDOW_END,
        at.alias(POSITION),
        target.alias(TARGET),
        F.lit(label == PER_RECORD).alias(FIRED_BY_RECORD),
        F.lit(label).alias("firing"),
        F.col("record_count").cast("long").alias("record_count"),
        *[a.name for a in aggregations],
    ]


def _by_timer(
    simple: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    gap: int,
    last_watermark: float,
) -> tuple[DataFrame, DataFrame]:
    """Each simple session fires once, all its records on time, when the watermark reaches
    its ``maxTs``; if it never does, they are pending."""
    sessions = simple.groupBy(*keys, _SESSION).agg(
        F.min(_TIME).alias(WINDOW_START),
        (F.max(_TIME) + gap).alias(WINDOW_END),
        F.count(F.lit(1)).alias("record_count"),
        *[a.expr().alias(a.name) for a in aggregations],
    )
    reached = (F.col(WINDOW_END) - 1) <= F.lit(last_watermark)
    firings = sessions.where(reached).select(
        *_firing_columns(
            keys, aggregations, F.lit(None).cast(STRUCT), F.col(WINDOW_END) - 1, ON_TIME
        )
    )
    statuses = sessions.groupBy(F.when(reached, ON_TIME).otherwise(PENDING).alias(STATUS)).agg(
        F.sum("record_count").alias("n")
    )
    return firings, statuses


def _per_record(
    simple: DataFrame, keys: Sequence[str], aggregations: Sequence[Aggregation], gap: int
) -> tuple[DataFrame, DataFrame]:
    """Each record of a simple session fires it at once, with every record so far."""
    so_far = (
        Window.partitionBy(*keys, _SESSION)
        .orderBy(POSITION)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    running = simple.select(
        *keys,
        POSITION,
        F.min(_TIME).over(so_far).alias(WINDOW_START),
        (F.max(_TIME).over(so_far) + gap).alias(WINDOW_END),
        F.count(F.lit(1)).over(so_far).alias("record_count"),
        *[a.expr(so_far).alias(a.name) for a in aggregations],
    )
    firings = running.select(
        *_firing_columns(keys, aggregations, F.col(POSITION), F.lit(None).cast("long"), PER_RECORD)
    )
    statuses = simple.groupBy(F.lit(PER_RECORD).alias(STATUS)).agg(F.count(F.lit(1)).alias("n"))
    return firings, statuses


def _replay(
    records: DataFrame,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
    gap: int,
    trigger: Trigger,
    lateness: int,
    last_watermark: float,
) -> DataFrame:
    """The records of the other keys, through one :class:`MergingWindowSet` per key: rows of
    firings (a record's: its position; a timer's: its target), dropped records per own
    window, and status counts."""
    columns = list(dict.fromkeys(a.column for a in aggregations))
    functions = [a.rules for a in aggregations]
    width = len(keys)
    value_at = [width + 6 + columns.index(a.column) for a in aggregations]
    types = records.select(*keys, *columns).schema
    schema = StructType(
        [
            *[StructField(f.name, f.dataType, True) for f in types.fields[:width]],
            StructField(_ROW, StringType()),
            StructField(WINDOW_START, LongType()),
            StructField(WINDOW_END, LongType()),
            *[StructField(f"{_AT}{f.name}", f.dataType) for f in STRUCT.fields],
            StructField(TARGET, LongType()),
            StructField(FIRED_BY_RECORD, BooleanType()),
            StructField("firing", StringType()),
            StructField("record_count", LongType()),
            StructField(_COUNT, LongType()),
            *[StructField(a.name, a.result_type(types[a.column].dataType)) for a in aggregations],
        ]
    )
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    nowhere = (None,) * len(FIELDS)
    no_key, no_values = (None,) * width, (None,) * len(aggregations)

    def replay(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows: list[tuple] = []
        counts = dict.fromkeys(STATUSES, 0)

        def finish(key: tuple, sessions: MergingWindowSet) -> None:
            sessions.finish()
            for f in sessions.firings:
                at = f.at or nowhere
                fired = (f.start, f.end, *at, f.target, f.by_record, f.label, f.record_count)
                rows.append((*key, "firing", *fired, None, *f.values))
            for time, n in sessions.dropped.items():
                where = (time, time + gap, *nowhere, None, None, None, None, n)
                rows.append((*key, "dropped", *where, *no_values))
            for status, n in sessions.counts.items():
                counts[status] += n

        def batch() -> pa.RecordBatch:
            out = pa.RecordBatch.from_arrays(
                [
                    pa.array(c, type=t)
                    for c, t in zip(zip(*rows, strict=True), arrow_schema.types, strict=True)
                ],
                schema=arrow_schema,
            )
            rows.clear()
            return out

        key: tuple | None = None
        sessions: MergingWindowSet | None = None
        for records_batch in batches:
            for row in zip(*[c.to_pylist() for c in records_batch.columns], strict=True):
                if row[:width] != key:
                    if sessions is not None:
                        finish(key, sessions)
                    key = row[:width]
                    sessions = MergingWindowSet(gap, trigger, lateness, functions, last_watermark)
                time, pt, topic, partition, offset, watermark = row[width : width + 6]
                sessions.add(
                    time,
                    [row[i] for i in value_at],
                    Position.record(pt, topic, partition, offset),
                    watermark,
                )
            if rows:
                yield batch()
        if sessions is not None:
            finish(key, sessions)
        for status, n in counts.items():
            count = (None, None, *nowhere, None, None, status, None, n)
            rows.append((*no_key, "status", *count, *no_values))
        yield batch()

    at = [
        F.col(POSITION)[name].alias(f"{_AT}{name}")
        for name in ("time", "topic", "partition", "offset")
    ]
    return (
        records.repartition(*keys)
        .sortWithinPartitions(*keys, POSITION)
        .select(*keys, _TIME, *at, WATERMARK, *columns)
        .mapInArrow(replay, schema)
    )
