"""The windows' aggregate by status (:func:`window_operator.by_status`), a pane at a time:
each record is grouped once, with the pane's windows it is dropped from and those the
watermark reaches, however many windows hold it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from feast_stream_backfill import rules, window_operator
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    EVENT_TIME,
    FIRE_POSITION,
    OFFSET,
    PARTITION,
    POSITION,
    STATUS,
    TARGET,
    TOPIC,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.strategies.aligned_unsorted.offsets import COPIED, PANE
from feast_stream_backfill.strategies.aligned_unsorted.reaches_and_drops import DROP_FROM
from feast_stream_backfill.triggers import ON_TIME, PENDING, Trigger
from feast_stream_backfill.windows import SlidingWindows, TumblingWindows, pane_start

if TYPE_CHECKING:
    from feast_stream_backfill.job import StreamJob

#: Sliding windows are merged where their panes land: per key and chunk of this many windows'
#: sizes, so that a hot key still spreads over tasks and only a pane in a chunk's last window
#: is sent to the next chunk too (1 in 64 or fewer).
CHUNK_WINDOWS = 64

UNPAIRED = "_unpaired"  # a window whose copies do not pair up: group them by offset instead
_INDEX, _DROP_FROMS, _LATE_FROMS = "_window_index", "_drop_froms", "_late_froms"
_DROPPED_IN, _LATE_IN, _REACHED_WINDOWS = "_dropped_in", "_late_in", "_reached_windows"
_CHUNK, _PAIRS = "_chunk", "_pairs"
WEIGHT = "_weight"  # twice the records a group holds, a copy once: its count, halved


@dataclass(frozen=True)
class Watermarked:
    """What the watermark does to the windows, over the ``partitions`` read: ``panes``
    (:func:`pane_windows`), ``reaches`` (where it reaches each window's ``maxTs``,
    :func:`reaches_and_drops.watermark_reaches`) and ``drops`` (each partition's first
    offset too late for each window, :func:`reaches_and_drops.drop_offsets`). Kept."""

    panes: DataFrame
    reaches: DataFrame
    drops: DataFrame
    partitions: list[tuple[str, int]]

    @property
    def cached(self) -> list[DataFrame]:
        return [self.panes, self.reaches, self.drops]


def pane_windows(grouped: DataFrame, window: TumblingWindows | SlidingWindows) -> DataFrame:
    """The panes holding a record (``_pane``, their start, from :func:`offsets.group_records`)
    and their windows, a row each, numbered ``_window_index`` 1, 2, ... by end. A few rows per
    window: kept."""
    panes = grouped.select(PANE).distinct()
    windowed = window.assign(panes.withColumn(EVENT_TIME, F.col(PANE)))
    by_end = Window.partitionBy(PANE).orderBy(WINDOW_END)
    numbered = windowed.select(
        PANE, WINDOW_START, WINDOW_END, F.row_number().over(by_end).alias(_INDEX)
    ).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    numbered.count()
    return numbered


def per_status(records: DataFrame, watermarked: Watermarked, job: StreamJob) -> DataFrame:
    """:func:`window_operator.by_status` for the event-time trigger, a pane at a time: a
    record is DROPPED from a window at or after its partition's first offset read after the
    tick at which the watermark reaches the window's cleanup time (in the first
    ``_dropped_in`` of its pane's windows), else LATE at or after the first offset read after
    the tick reaching ``maxTs`` (the first ``_late_in``; with allowed lateness alone), else
    ON_TIME where the watermark reaches ``maxTs`` before the archive ends, PENDING where not.

    Records are aggregated per (key, pane, ``_dropped_in``, ``_late_in``): with one window
    per pane that
    is the window's value; sliding windows merge their panes' partial aggregates
    (:func:`_merged_panes`), so that each record is grouped once, not once per window.

    Records with ``_copied`` (:func:`offsets.marked_copies`) count at half weight where set:
    both copies are in the same window row (same key, time and offset). Each row says whether
    its copies pair up (``_unpaired``: else the caller groups them by offset instead)."""
    sums = _Sums.of(records, job.aggregations)
    located = _located(records, watermarked, job)
    if job.window.pane_ms == job.window.size_ms:
        per_window = _one_pane_windows(located, sums, job)
    else:
        per_window = _merged_panes(located, watermarked.panes, sums, job)
    fired_at = watermarked.reaches.select(TARGET, F.col(POSITION).alias(FIRE_POSITION))
    fired = per_window.withColumn(TARGET, rules.max_timestamp(F.col(WINDOW_END)))
    return fired.join(F.broadcast(fired_at), TARGET, "left").select(
        *_window_columns(job),
        FIRE_POSITION,
        "record_count",
        *[a.name for a in job.aggregations],
        *([UNPAIRED] if sums.marked else []),
        *(sums.kept_partials() if _keeps_partials(job) else []),
    )


def _keeps_partials(job: StreamJob) -> bool:
    """Does :func:`per_status` keep the on-time partial aggregates (``_weight`` and each
    aggregation's ``__part`` columns)? Where late records fire: :func:`late_pairs`."""
    return job.trigger.allowed_lateness_ms > 0


def _located(records: DataFrame, watermarked: Watermarked, job: StreamJob) -> DataFrame:
    """The records with their pane and how many of its windows each is dropped from and late
    for (``_dropped_in``, ``_late_in``)."""
    lateness = job.trigger.allowed_lateness_ms
    most = job.window.most_windows
    return (
        records.withColumn(PANE, pane_start(job.window))
        .join(F.broadcast(_drops_per_pane(watermarked, lateness)), [TOPIC, PARTITION, PANE])
        .withColumn(_DROPPED_IN, _prefix_from(_DROP_FROMS, most))
        .withColumn(_LATE_IN, _prefix_from(_LATE_FROMS, most) if lateness else F.col(_DROPPED_IN))
    )


def late_pairs(records: DataFrame, watermarked: Watermarked, job: StreamJob) -> DataFrame:
    """Every (record, window) pair whose record is late for the window: read after the
    watermark passed the window's ``maxTs``, before its cleanup time (a copy of a record is
    a pair too). :func:`per_status` keeps the windows' on-time partial aggregates for
    them (``_weight``, the ``__part`` columns)."""
    columns = [c for c in records.columns if c != COPIED]
    late = _located(records, watermarked, job).where(F.col(_LATE_IN) > F.col(_DROPPED_IN))
    index = F.explode(F.sequence(F.col(_DROPPED_IN) + 1, F.col(_LATE_IN))).alias(_INDEX)
    return (
        late.select(*columns, PANE, index)
        .join(F.broadcast(watermarked.panes), [PANE, _INDEX])
        .select(*columns, WINDOW_START, WINDOW_END)
    )


def _window_columns(job: StreamJob) -> list[str]:
    return [*job.keys, WINDOW_START, WINDOW_END, STATUS]


def _drops_per_pane(watermarked: Watermarked, lateness_ms: int) -> DataFrame:
    """Per (topic, partition, pane): ``_drop_froms``, for each of the pane's windows by end,
    the partition's first offset read after the watermark reaches the window's cleanup time
    (dropped from it; null: none), with allowed lateness ``_late_froms``, the same for its
    ``maxTs`` (late for it), and ``_reached_windows``, how many of them the watermark
    reaches before the archive ends. The watermark reaches windows in the order of their
    ends, so all three are prefixes."""
    panes = watermarked.panes
    spark = panes.sparkSession
    pairs = spark.createDataFrame(watermarked.partitions, f"{TOPIC} string, {PARTITION} int")
    table = watermarked.drops.select(TOPIC, PARTITION, TARGET, DROP_FROM, FIRE_POSITION)
    max_ts = rules.max_timestamp(F.col(WINDOW_END))
    per_window = (
        pairs.crossJoin(panes)
        .withColumn(TARGET, max_ts)
        .join(table, [TOPIC, PARTITION, TARGET], "left")
        .withColumnRenamed(DROP_FROM, "_late_from")
    )
    if lateness_ms:
        cleanup = table.select(
            TOPIC, PARTITION, F.col(TARGET).alias("_cleanup"), F.col(DROP_FROM).alias(DROP_FROM)
        )
        per_window = per_window.withColumn(
            "_cleanup", rules.cleanup_time(max_ts, lateness_ms)
        ).join(cleanup, [TOPIC, PARTITION, "_cleanup"], "left")
    else:
        per_window = per_window.withColumn(DROP_FROM, F.col("_late_from"))
    per_pane = per_window.groupBy(TOPIC, PARTITION, PANE).agg(
        F.sort_array(F.collect_list(F.struct(_INDEX, DROP_FROM, "_late_from"))).alias("_by_end"),
        F.count(FIRE_POSITION).alias(_REACHED_WINDOWS),
    )
    return per_pane.select(
        TOPIC,
        PARTITION,
        PANE,
        F.col("_by_end")[DROP_FROM].alias(_DROP_FROMS),
        F.col("_by_end")["_late_from"].alias(_LATE_FROMS),
        _REACHED_WINDOWS,
    )


def _prefix_from(froms: str, most_windows: int) -> Column:
    """How many of its pane's windows the record is at or past the first offset of (in
    ``froms``, by window end; dropped from, or late for): a prefix, ended by the first window
    whose first such offset is after the record's, or that has none. A CASE, not a
    higher-order function: Spark interprets those, row by row."""
    kept = [
        ~F.coalesce(F.get(froms, i) <= F.col(OFFSET), F.lit(False)) for i in range(most_windows)
    ]
    if not kept:
        return F.lit(0)
    ends = F.when(kept[0], F.lit(0))
    for i, condition in enumerate(kept[1:], start=1):
        ends = ends.when(condition, F.lit(i))
    return ends.otherwise(F.lit(most_windows))


def _status(trigger: Trigger, index: Column) -> Column:
    """Of the pane's ``index``-th window by end: the record is dropped from it, or late for
    it, or it waits for the watermark, which reaches the window before the archive ends or
    not."""
    waiting = F.when(index <= F.col(_REACHED_WINDOWS), ON_TIME).otherwise(PENDING)
    late = index <= F.col(_LATE_IN) if trigger.allowed_lateness_ms else False
    return rules.on_element(trigger, index <= F.col(_DROPPED_IN), late, waiting)


@dataclass(frozen=True)
class _Sums:
    """What a group of records sums for its windows: each aggregation's partial aggregates of
    the records on time in some window (by_status's rule: no other can overflow); where
    copies are marked (``marked``), the weight (a record 2, a copy 1: halved, each record
    counts once) and the copies' hashes, which cancel out where they pair up (same offset,
    same content)."""

    aggregations: Sequence[Aggregation]
    types: dict[str, DataType]
    marked: bool
    payload: list[str]

    @classmethod
    def of(cls, records: DataFrame, aggregations: Sequence[Aggregation]) -> _Sums:
        types = {a.column: records.schema[a.column].dataType for a in aggregations}
        payload = [c for c in records.columns if not c.startswith("_")]
        return cls(aggregations, types, COPIED in records.columns, payload)

    def copied(self) -> Column:
        return F.col(COPIED) if self.marked else F.lit(False)

    def summed(self, a: Aggregation) -> Column:
        return F.when(F.col(_LATE_IN) < F.col(_REACHED_WINDOWS), F.col(a.column))

    def partials(self) -> list[Column]:
        return [
            part
            for a in self.aggregations
            for part in a.partials(self.summed(a), self.copied(), self.types[a.column])
        ]

    def weight(self) -> Column:
        return F.sum(F.when(self.copied(), 1).otherwise(2)).alias(WEIGHT)

    def pairs(self) -> list[Column]:
        copy_hash = F.xxhash64(TOPIC, PARTITION, OFFSET, EVENT_TIME, *self.payload)
        return [F.bit_xor(F.when(self.copied(), copy_hash)).alias(_PAIRS)] if self.marked else []

    def unpaired(self) -> Column:
        return F.coalesce(F.col(_PAIRS), F.lit(0)) != 0

    def kept_partials(self) -> list[str]:
        """The columns of the partials, for :func:`late_pairs`' firings."""
        names = [n for a in self.aggregations for n in a.partial_names(self.types[a.column])]
        return [WEIGHT, *names]


def _one_pane_windows(located: DataFrame, sums: _Sums, job: StreamJob) -> DataFrame:
    """Tumbling windows: a window is one pane, its value the pane's aggregate."""
    kept = sums.kept_partials() if _keeps_partials(job) else []
    if sums.marked or kept:
        aggregates = [sums.weight(), *sums.partials(), *sums.pairs()]
        results = [
            F.shiftright(WEIGHT, 1).alias("record_count"),
            *[a.finished(sums.types[a.column]) for a in job.aggregations],
            *([sums.unpaired().alias(UNPAIRED)] if sums.marked else []),
            *kept,
        ]
    else:
        values = [a.expr(None, sums.summed(a)).alias(a.name) for a in job.aggregations]
        aggregates = [F.count(F.lit(1)).alias("record_count"), *values]
        results = ["record_count", *[a.name for a in job.aggregations]]
    group = [*job.keys, PANE, _DROPPED_IN, _LATE_IN, _REACHED_WINDOWS]
    return (
        located.groupBy(*group)
        .agg(*aggregates)
        .select(
            *job.keys,
            F.col(PANE).alias(WINDOW_START),
            (F.col(PANE) + job.window.size_ms).alias(WINDOW_END),
            _status(job.trigger, F.lit(1)).alias(STATUS),
            *results,
        )
    )


def _merged_panes(located: DataFrame, panes: DataFrame, sums: _Sums, job: StreamJob) -> DataFrame:
    """Sliding windows: their panes' partial aggregates merged where the panes were
    aggregated. The records are shuffled once, by key and :data:`CHUNK_WINDOWS` chunk of the
    windows' last panes (shuffling the panes again, a row per window, cost more than the
    records' shuffle); a pane in a chunk's last window goes to the next chunk too."""
    window = job.window
    chunk_ms = F.lit(CHUNK_WINDOWS * window.size_ms)

    def chunk(last_pane: Column) -> Column:
        return last_pane - F.pmod(last_pane, chunk_ms)

    chunks = F.array(chunk(F.col(PANE)), chunk(F.col(PANE) + window.size_ms - window.pane_ms))
    spread = located.withColumn(_CHUNK, F.explode(F.array_distinct(chunks)))
    spread = spread.repartition(*job.keys, _CHUNK)
    group = [*job.keys, PANE, _DROPPED_IN, _LATE_IN, _REACHED_WINDOWS, _CHUNK]
    per_pane = spread.groupBy(*group).agg(sums.weight(), *sums.partials(), *sums.pairs())
    on_time = F.col(STATUS) == ON_TIME
    kept = []
    if _keeps_partials(job):
        kept = [F.sum(WEIGHT).alias(WEIGHT)]
        kept += [
            p for a in job.aggregations for p in a.merged_partials(on_time, sums.types[a.column])
        ]
    return (
        per_pane.join(F.broadcast(panes), PANE)
        .where(chunk(F.col(WINDOW_END) - window.pane_ms) == F.col(_CHUNK))
        .withColumn(STATUS, _status(job.trigger, F.col(_INDEX)))
        .groupBy(*_window_columns(job), _CHUNK)
        .agg(
            F.shiftright(F.sum(WEIGHT), 1).alias("record_count"),
            *[a.merged(on_time, sums.types[a.column]) for a in job.aggregations],
            *([F.max(sums.unpaired()).alias(UNPAIRED)] if sums.marked else []),
            *kept,
        )
    )


@dataclass(frozen=True)
class StatusCounts:
    """:func:`status_counts`' answer: ``n`` (record, window) pairs per status; whether some
    window's copies do not pair up (:func:`offsets.marked_copies`: the caller groups them by
    offset instead); whether some window's key has a null (the value check on keys, read here
    from the windows rather than observed on every record)."""

    statuses: dict[str, int]
    unpaired: bool
    null_key: bool


def status_counts(per_status: DataFrame, keys: Sequence[str]) -> StatusCounts:
    """:func:`window_operator.status_counts` of :func:`per_status`, with its checks."""
    null_key = reduce(Column.__or__, [F.col(k).isNull() for k in keys])
    unpaired = F.col(UNPAIRED) if UNPAIRED in per_status.columns else F.lit(False)
    flags = {UNPAIRED: unpaired, "_null_key": null_key}
    rows = window_operator.status_counts(per_status, **flags).collect()
    return StatusCounts(
        statuses={row[STATUS]: row["n"] for row in rows},
        unpaired=any(row[UNPAIRED] for row in rows),
        null_key=any(row["_null_key"] for row in rows),
    )
