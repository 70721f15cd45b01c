"""The thresholds of event time the watermark and the drops ask about, and each partition's
first offset at or above them.

A threshold is answered from the lowest offset of each bucket starting at or above it
(:func:`first_at_or_above`). The buckets of the one read of the records start where
:class:`BucketStarts` says (:func:`bucket_minima`); a threshold that starts none is answered
from a second read of the records near it (:func:`range_minima`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.columns import ARCHIVE_TIME, EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.watermarks import WatermarkStrategy, bound_of_topic
from feast_stream_backfill.windows import SlidingWindows, TumblingWindows

if TYPE_CHECKING:
    from feast_stream_backfill.job import StreamJob

#: Coarse cells of event time between the lowest and highest bound of :func:`range_minima`'s
#: ranges (each listed in the cells it overlaps): a small broadcast, however long the archive.
MAX_CELLS = 1 << 16

#: Event-time ranges per topic that a read of the records hands the archive's reader.
MAX_PUSHED_RANGES = 32

#: Ticks after each window's reach threshold whose drop thresholds start a bucket
#: (:class:`BucketStarts`, within half a pane).
TICKS_AFTER_REACH = 16

THRESHOLD = "_threshold"  # where a bucket starts, or a threshold asked about
FIRST = "_first"  # (offset, event time) of a partition's first record at or above it
_WANTED = "_wanted"


@dataclass(frozen=True)
class BucketStarts:
    """Where the buckets of event time start, per topic: at each window's reach threshold
    (``maxTs + B + 1``: ``end + B``, ``end`` on the panes' grid, B the topic's bound) and,
    within :data:`TICKS_AFTER_REACH` ticks and half a pane after it (``after_reach_ms``), at
    each tick ``T``'s drop threshold (:func:`rules.highest_read_after`). A partition rarely
    waits long for its first record past a threshold, so most windows' ticks come that close,
    and their drops are read from these buckets too. A partition has at most 17 buckets per
    pane (where the panes are short, 1 + pane / (2 x tick)): a few rows per pane, not per
    record. With allowed lateness ``L`` the watermark is asked about each window's cleanup
    time ``maxTs + L`` too: where ``L`` is not a whole number of panes, a second grid of
    buckets starts ``L`` later, at the cleanup times' reach thresholds, with its ticks after
    them (twice the rows). ``bounds``: every topic's B."""

    window: TumblingWindows | SlidingWindows
    watermark: WatermarkStrategy
    bounds: Mapping[str, int]
    delay_ms: int
    lateness_ms: int = 0

    @classmethod
    def of(cls, job: StreamJob) -> BucketStarts:
        """The job's (its windows are aligned: the strategy's conditions)."""
        bounds = {t.name: job.out_of_orderness(t.name) for t in job.topics}
        lateness = job.trigger.allowed_lateness_ms
        return cls(job.window, job.watermark, bounds, job.processing_time.min_delay_ms, lateness)

    @property
    def phases(self) -> tuple[int, ...]:
        """Where the grids of reach thresholds stand after the maxTs' own, within a pane:
        the windows' (0) and, off it, their cleanup times' (:func:`rules.cleanup_time`)."""
        late = rules.cleanup_time(0, self.lateness_ms) % self.window.pane_ms
        return (0, late) if late else (0,)

    @property
    def tick_ms(self) -> int:
        return self.watermark.interval_ms

    @property
    def after_reach_ms(self) -> int:
        """How far after a reach threshold the ticks' drop thresholds start buckets."""
        return min(TICKS_AFTER_REACH * self.tick_ms, self.window.pane_ms // 2)

    def bound(self) -> Column:
        """The record's topic's B, as a long (a window's offset plus B may pass an int's)."""
        return bound_of_topic(self.watermark, self.bounds).cast("long")

    def record_bucket(self) -> Column:
        """The start of the record's bucket: the highest start at or below its event time,
        of every grid's."""
        et = F.col(EVENT_TIME)
        tick_phase = rules.highest_read_after(0, self.delay_ms)
        starts = []
        for phase in self.phases:
            grid = rules.reach_threshold(
                rules.max_timestamp(self.window.offset_ms) + phase, self.bound()
            )
            reach = et - F.pmod(et - grid, F.lit(self.window.pane_ms))
            near = F.least(et, reach + (self.after_reach_ms - 1))
            tick = near - F.pmod(near - tick_phase, F.lit(self.tick_ms))
            starts.append(F.greatest(reach, tick))
        return starts[0] if len(starts) == 1 else F.greatest(*starts)

    def _reach(self, topic: str, value: int, phase: int) -> int:
        """The highest reach threshold of the grid at ``phase`` at or below ``value``."""
        target = rules.max_timestamp(self.window.offset_ms) + phase
        grid = rules.reach_threshold(target, self.bounds[topic])
        return value - (value - grid) % self.window.pane_ms

    def starts_at(self, topic: str, value: int) -> bool:
        """Does a bucket of ``topic`` start at ``value`` (then the thresholds at ``value`` are
        answered from the buckets, :func:`first_at_or_above`)?"""
        on_tick = (value - rules.highest_read_after(0, self.delay_ms)) % self.tick_ms == 0
        for phase in self.phases:
            reach = self._reach(topic, value, phase)
            if value == reach or (on_tick and value - reach < self.after_reach_ms):
                return True
        return False

    def next_reach(self, topic: str, value: int) -> int:
        """The lowest reach threshold above ``value``: a bucket starts there."""
        pane = self.window.pane_ms
        return min(self._reach(topic, value, phase) + pane for phase in self.phases)


def lowest_offset() -> list[Column]:
    """The lowest offset and its event time, as aggregates: not min(struct), whose buffer is
    not hash-aggregated (a sort of every record)."""
    return [F.min(OFFSET).alias(OFFSET), F.min_by(EVENT_TIME, OFFSET).alias(EVENT_TIME)]


def bucket_minima(grouped: DataFrame) -> DataFrame:
    """The lowest offset (and its event time) per (topic, partition, bucket ``_threshold``) of
    the grouped read (:func:`offsets.group_records`), for :func:`first_at_or_above`."""
    return grouped.groupBy(TOPIC, PARTITION, THRESHOLD).agg(*lowest_offset())


def first_at_or_above(
    minima: DataFrame,
    partitions: Sequence[tuple[str, int]],
    thresholds: Mapping[str, Sequence[int]],
) -> DataFrame:
    """For each (topic, partition) of ``partitions`` and each of its topic's ``thresholds``
    (``_threshold``): ``_first``, the struct (offset, event time) of the partition's first
    record with ``et >= _threshold``, null where there is none; from ``minima``, the lowest
    offset (and its event time) per (topic, partition, bucket from ``_threshold``). Every
    record at or above a threshold must be in a bucket starting at or above it; buckets may
    overlap."""
    spark = minima.sparkSession
    wanted = spark.createDataFrame(
        [
            (topic, partition, value)
            for topic, partition in partitions
            for value in sorted(set(thresholds.get(topic, ())))
        ],
        f"{TOPIC} string, {PARTITION} int, {THRESHOLD} long",
    )
    sweep = minima.select(
        TOPIC,
        PARTITION,
        THRESHOLD,
        F.struct(OFFSET, EVENT_TIME).alias(FIRST),
        F.lit(False).alias(_WANTED),
    ).unionByName(
        wanted.select(
            TOPIC,
            PARTITION,
            THRESHOLD,
            F.lit(None).cast(f"struct<{OFFSET}: bigint, {EVENT_TIME}: bigint>").alias(FIRST),
            F.lit(True).alias(_WANTED),
        )
    )
    # Descending, a bucket before the threshold it starts at: the running minimum is the
    # first record at or above each threshold.
    at_or_above = (
        Window.partitionBy(TOPIC, PARTITION)
        .orderBy(F.desc(THRESHOLD), _WANTED)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    swept = sweep.select(
        TOPIC, PARTITION, THRESHOLD, _WANTED, F.min(FIRST).over(at_or_above).alias(FIRST)
    )
    return swept.where(_WANTED).drop(_WANTED)


def range_minima(records: DataFrame, ranges: Mapping[str, Sequence[tuple[int, int]]]) -> DataFrame:
    """The lowest offset (and its event time) per (topic, partition, range ``[lo, hi)`` of the
    topic's ``ranges``, as ``_threshold`` = lo): buckets for :func:`first_at_or_above` read
    from the records. A record goes to each range holding its event time, found by a broadcast
    join on a coarse cell of event time (at most :data:`MAX_CELLS`), which lists each range in
    every cell it overlaps."""
    spark = records.sparkSession
    low = min(lo for pairs in ranges.values() for lo, _ in pairs)
    high = max(hi for pairs in ranges.values() for _, hi in pairs)
    width = -(-(high - low) // MAX_CELLS)
    rows = [
        (topic, cell, lo, hi)
        for topic, pairs in ranges.items()
        for lo, hi in pairs
        for cell in range((lo - low) // width, (hi - 1 - low) // width + 1)
    ]
    cells = spark.createDataFrame(rows, "_r_topic string, _r_cell long, _lo long, _hi long")
    if ARCHIVE_TIME in records.columns:
        records = records.where(_archive_time_within(ranges))
    located = records.where((F.col(EVENT_TIME) >= low) & (F.col(EVENT_TIME) < high)).select(
        TOPIC,
        PARTITION,
        OFFSET,
        EVENT_TIME,
        F.expr(f"({EVENT_TIME} - {low}) div {width}").alias("_et_cell"),
    )
    in_range = (
        (F.col(TOPIC) == F.col("_r_topic"))
        & (F.col("_et_cell") == F.col("_r_cell"))
        & (F.col(EVENT_TIME) >= F.col("_lo"))
        & (F.col(EVENT_TIME) < F.col("_hi"))
    )
    return (
        located.join(F.broadcast(cells), in_range)
        .groupBy(TOPIC, PARTITION, F.col("_lo").alias(THRESHOLD))
        .agg(*lowest_offset())
    )


def _archive_time_within(ranges: Mapping[str, Sequence[tuple[int, int]]]) -> Column:
    """The records of :func:`range_minima`'s ranges, as a filter on the archive's own
    event-time column that its reader applies (Parquet row groups and Delta files whose times
    lie outside are skipped), where ``EVENT_TIME`` (``unix_millis`` of it) is computed after
    reading: ``unix_millis(t) >= lo`` iff ``t >= timestamp_millis(lo)`` (both floor to the
    millisecond). At most :data:`MAX_PUSHED_RANGES` per topic are listed, the closest merged
    first: a coarser filter keeps every record the exact one does, which still follows."""
    time = F.col(ARCHIVE_TIME)
    within = F.lit(False)
    for topic, pairs in ranges.items():
        for lo, hi in merged_ranges(sorted(pairs), MAX_PUSHED_RANGES):  # a topic may have none
            span = (time >= F.timestamp_millis(F.lit(lo))) & (time < F.timestamp_millis(F.lit(hi)))
            within = within | ((F.col(TOPIC) == topic) & span)
    return within


def merged_ranges(pairs: Sequence[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """Sorted ``[lo, hi)`` ranges as at most ``most`` ranges covering them: overlapping ones
    joined, then the smallest gaps closed. A filter the archive's reader applies needs few."""
    joined: list[tuple[int, int]] = []
    for lo, hi in pairs:
        if joined and lo <= joined[-1][1]:
            joined[-1] = (joined[-1][0], max(hi, joined[-1][1]))
        else:
            joined.append((lo, hi))
    gaps = sorted(range(1, len(joined)), key=lambda i: joined[i][0] - joined[i - 1][1])
    closed = set(gaps[: max(0, len(joined) - most)])
    covering: list[tuple[int, int]] = []
    for i, (lo, hi) in enumerate(joined):
        if i in closed:
            covering[-1] = (covering[-1][0], hi)
        else:
            covering.append((lo, hi))
    return covering
