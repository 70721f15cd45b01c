"""Aligned event-time windows without sorting the records by offset (D1 = 0).

With D1 = 0 a record is read at ``D2`` plus the highest event time of its partition up to it
(docs/concepts/model.md#records-and-processing-time), so the questions the watermark and the
triggers ask need no order of records, only *first offsets*:

- the first record of a partition with ``et >= v`` raises that highest event time, so it is
  read at ``D2 + et``: there the partition's watermark first reaches ``v - B - 1``, and the
  combined watermark reaches a window's ``maxTs`` where the last partition (MIN) or the first
  (MAX) does, emitted at the next periodic tick ``T`` (:func:`watermarks.watermark_reaches`);
- a record is read after that tick, so that its window is gone (DROPPED), iff its partition's
  highest event time up to it is ``> T - D2``: iff its offset is at or after the partition's
  first offset with ``et >= T - D2 + 1``.

First offsets per threshold are hash aggregates: the lowest offset per (partition, bucket of
event time), then a suffix minimum over a partition's buckets (:func:`first_at_or_above`), a
few rows per window. The windows' thresholds lie on the pane grid, and a window's tick usually
comes within a few ticks of its threshold, so both start buckets of the read that also counts
the offsets and finds the panes (:class:`Buckets`, :func:`group_records`); a tick further on,
known only once the watermark has reached the windows, takes a read of the records near it
(:func:`range_minima`). Archived copies of a record share its offset and event time, so
they change no first offset; only the windows' counts must see each record once
(:func:`marked_copies`: counted at half weight, or :func:`distinct_records`: grouped by
offset). The windows are aggregated a pane at a time
(:func:`per_status`): a sliding window's records are grouped once, not once per window.

With idleness, a partition goes idle only where its running max jumps by more than the
idle timeout allows: the words of 64 offsets over which it rises that much are the only
records read again, in offset order (:func:`idle_periods`), and the combined watermark is
replayed with those periods (:func:`watermarks.reaches_with_idleness`).

The sorted path (:mod:`processing_time`, :mod:`watermarks`) keeps what needs a record's own
time: D1 > 0 (ranks), on-event watermarks, processing-time and session windows, late and
per-record firings, enrichment.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType

from feast_stream_backfill import window_operator
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    ARCHIVE_TIME,
    EVENT_TIME,
    FIRE_POSITION,
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    TARGET,
    TOPIC,
    WAKES_AT,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.errors import conflicting_copies
from feast_stream_backfill.idleness import idle_wait_ms
from feast_stream_backfill.processing_order import next_tick, record_position
from feast_stream_backfill.triggers import ON_TIME, PENDING, Trigger, on_element
from feast_stream_backfill.watermarks import (
    REACHED,
    WatermarkStrategy,
    combined,
    reaches_with_idleness,
)
from feast_stream_backfill.windows import (
    SlidingWindows,
    TumblingWindows,
    max_timestamp,
    pane_start,
)

#: Coarse cells of event time between the lowest and highest bound of :func:`range_minima`'s
#: ranges (each listed in the cells it overlaps): a small broadcast, however long the archive.
MAX_CELLS = 1 << 16

_FIRST, _THRESHOLD, _DROP_FROM, _WORD = "_first", "_threshold", "_drop_from", "_word"
_COPY_BITS = "_copy_bits"
COPIED, UNPAIRED = "_copied", "_unpaired"
_PANE, _INDEX, _DROP_FROMS = "_pane", "_window_index", "_drop_froms"
_DROPPED_IN, _REACHED_WINDOWS = "_dropped_in", "_reached_windows"
_CHUNK, _HIGHEST, _BEFORE = "_chunk", "_highest", "_before"

#: Sliding windows are merged where their panes land: per key and chunk of this many windows'
#: sizes, so that a hot key still spreads over tasks and only a pane in a chunk's last window
#: is sent to the next chunk too (1 in 64 or fewer).
CHUNK_WINDOWS = 64

#: Words of 64 offsets that :func:`idle_periods` reads again, at most: beyond, a job with
#: idleness takes the sorted path.
MAX_IDLE_WORDS = 1 << 14

#: Event-time ranges per topic that :func:`range_minima` hands the archive's reader.
MAX_PUSHED_RANGES = 32

#: Ticks after each window's reach threshold whose drop thresholds start a bucket
#: (:class:`Buckets`, within half a pane).
FINE_TICKS = 16


@dataclass(frozen=True)
class Buckets:
    """Where the buckets of event time of :func:`group_records` start, per topic: at each
    window's reach threshold ``end + B`` (``maxTs + B + 1``, ``end`` on the panes' grid, B the
    topic's bound) and, within :data:`FINE_TICKS` ticks and half a pane after it (``fine_ms``),
    at each tick ``T``'s drop threshold ``T - D2 + 1``. Where a window's tick is that close (a
    partition rarely waits long for its first record past a threshold), its drops are read
    from these buckets too. A partition has at most 17 buckets per pane (where the panes are
    short, 1 + pane / (2 x tick)): a few rows per pane, not per record."""

    window: TumblingWindows | SlidingWindows
    bound: Mapping[str, int]
    tick_ms: int
    delay_ms: int

    @property
    def fine_ms(self) -> int:
        """How far after a reach threshold the ticks' drop thresholds start buckets."""
        return min(FINE_TICKS * self.tick_ms, self.window.pane_ms // 2)

    def start(self) -> Column:
        """The start of the record's bucket: the highest start at or below its event time."""
        et = F.col(EVENT_TIME)
        grid = self.window.offset_ms + _per_topic(self.bound)
        reach = et - F.pmod(et - grid, F.lit(self.window.pane_ms))
        fine = F.least(et, reach + (self.fine_ms - 1))
        tick = fine - F.pmod(fine - (1 - self.delay_ms), F.lit(self.tick_ms))
        return F.greatest(reach, tick)

    def _reach(self, topic: str, value: int) -> int:
        """The highest reach threshold at or below ``value``."""
        grid = self.window.offset_ms + self.bound[topic]
        return value - (value - grid) % self.window.pane_ms

    def starts_at(self, topic: str, value: int) -> bool:
        """Does a bucket of ``topic`` start at ``value`` (then the thresholds at ``value`` are
        answered from the buckets, :func:`first_at_or_above`)?"""
        reach = self._reach(topic, value)
        on_tick = (value - (1 - self.delay_ms)) % self.tick_ms == 0
        return value == reach or (on_tick and value - reach < self.fine_ms)

    def next_reach(self, topic: str, value: int) -> int:
        """The lowest reach threshold above ``value``: a bucket starts there."""
        return self._reach(topic, value) + self.window.pane_ms


def group_records(records: DataFrame, buckets: Buckets, *, highest: bool = False) -> DataFrame:
    """Every record read once, in one hash aggregate per (topic, partition, 64-offset word
    ``_word``, ``_threshold``, ``_pane``), kept: the offset bits (for :func:`offset_words`),
    the lowest offset and its event time (for :func:`bucket_minima`); ``_threshold`` is the
    start of the record's bucket (:class:`Buckets`): each window's reach threshold starts one
    (:func:`watermark_reaches`), and so do most ticks' drop thresholds
    (:func:`drop_offsets`); a record's pane is the other key (:func:`pane_windows`).

    A word's 64 offsets are read within moments, so they usually share one or two buckets:
    about a row per word, and each record is aggregated once (listing it once per word and
    once per bucket aggregated twice as many rows: 6.1 s against 4.8 s at 16M records).
    Records with a null or negative partition or offset, or a null event time, are grouped
    too, under their nulls: :func:`offset_words` sees them. ``highest``: each group's highest
    event time too (``_highest``, for :func:`idle_periods`)."""
    bit = F.expr(f"shiftleft(1L, int({OFFSET} & 63))")
    return (
        records.groupBy(
            TOPIC,
            PARTITION,
            F.shiftright(OFFSET, 6).alias(_WORD),
            buckets.start().alias(_THRESHOLD),
            pane_start(buckets.window).alias(_PANE),
        )
        .agg(
            F.bit_or(bit).alias("_offset_bits"),
            F.bit_xor(bit).alias("_odd_bits"),
            F.count(F.lit(1)).alias("_word_records"),
            *_lowest_offset(),
            *([F.max(EVENT_TIME).alias(_HIGHEST)] if highest else []),
        )
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def _lowest_offset() -> list[Column]:
    """The lowest offset and its event time, as aggregates: not min(struct), whose buffer is
    not hash-aggregated (a sort of every record)."""
    return [F.min(OFFSET).alias(OFFSET), F.min_by(EVENT_TIME, OFFSET).alias(EVENT_TIME)]


def bucket_minima(grouped: DataFrame) -> DataFrame:
    """The lowest offset (and its event time) per (topic, partition, ``_threshold``) of
    :func:`group_records`' buckets, for :func:`first_at_or_above`."""
    minima = grouped.groupBy(TOPIC, PARTITION, _THRESHOLD)
    return minima.agg(*_lowest_offset())


@dataclass(frozen=True)
class OffsetWords:
    """:func:`offset_words`' answer. ``paired``: every copied offset is archived exactly twice
    (no word's ``_copy_bits`` is -1). ``suspect``: some record has a null or negative
    partition or offset, or a null event time (the value checks' problems this pass can see:
    :meth:`records.RecordChecks.refuse_problems` counts and names them)."""

    words: DataFrame
    counts: dict[str, int]
    partitions: list[tuple[str, int]]
    paired: bool
    suspect: bool


def offset_words(grouped: DataFrame) -> OffsetWords:
    """Offsets counted as set bits of 64-offset words (of :func:`group_records`); the counts
    ``records_read`` and ``duplicates_removed``; the (topic, partition) pairs read.

    A word's ``_copy_bits`` are the offsets archived more than once. An offset held twice
    leaves its bit set in the OR and clear in the XOR (set in OR ^ XOR); when that accounts
    for every extra record, those are exactly the copied offsets. Otherwise (three copies of
    one offset) every offset of the word counts as copied (-1)."""
    words = (
        grouped.groupBy(TOPIC, PARTITION, _WORD)
        .agg(
            F.bit_or("_offset_bits").alias("_offset_bits"),
            F.bit_xor("_odd_bits").alias("_odd_bits"),
            F.sum("_word_records").alias("_word_records"),
            F.max(F.col(_THRESHOLD).isNull()).alias("_no_time"),
        )
        .withColumn("_twice", F.col("_offset_bits").bitwiseXOR(F.col("_odd_bits")))
        .select(
            TOPIC,
            PARTITION,
            _WORD,
            "_offset_bits",
            "_word_records",
            F.when(F.col("_word_records") == F.bit_count("_offset_bits"), F.lit(0))
            .when(
                F.col("_word_records") - F.bit_count("_offset_bits") == F.bit_count("_twice"),
                F.col("_twice"),
            )
            .otherwise(F.lit(-1))
            .alias(_COPY_BITS),
            "_no_time",
        )
    )
    partition, word = F.col(PARTITION), F.col(_WORD)
    bad = partition.isNull() | word.isNull() | (partition < 0) | (word < 0) | F.col("_no_time")
    pair = F.when(partition.isNotNull(), F.struct(TOPIC, PARTITION))
    totals = words.agg(
        F.coalesce(F.sum("_word_records"), F.lit(0)).alias("records_read"),
        F.coalesce(F.sum(F.bit_count("_offset_bits")), F.lit(0)).alias("distinct"),
        F.collect_set(pair).alias("partitions"),
        F.count_if(F.col(_COPY_BITS) == -1).alias("unpaired"),
        F.count_if(bad).alias("bad"),
    ).first()
    read = totals["records_read"]
    return OffsetWords(
        words=words,
        counts={"records_read": read, "duplicates_removed": read - totals["distinct"]},
        partitions=sorted(tuple(pair) for pair in totals["partitions"]),
        paired=totals["unpaired"] == 0,
        suspect=totals["bad"] > 0,
    )


def idle_periods(
    grouped: DataFrame,
    records: DataFrame,
    partitions: Sequence[tuple[str, int]],
    interval_ms: int,
    timeout_ms: int,
    delay_ms: int,
) -> DataFrame | None:
    """:func:`idleness.idle_periods` with D1 = 0, without sorting the records; None where
    more than :data:`MAX_IDLE_WORDS` words would be read again (the sorted path's then).
    ``grouped``: :func:`group_records` with ``highest``.

    A partition's records are read at ``D2 +`` its running max of event time. Where that jumps
    from ``m`` to ``m'``, the partition goes idle at ``ceil_I(D2 + m) + I + wait``
    (:func:`idleness.idle_wait_ms`) if that comes before ``D2 + m'``, when the record at
    ``m'`` wakes it: never where ``m' - m <= I + wait``. A jump is at most the rise of the
    running max over the 64-offset word it falls in, so only the words rising more can hold
    one: their records alone are read again, in offset order from the running max before the
    word. Before a partition's first record and after its last, the closed forms hold."""
    wait = idle_wait_ms(interval_ms, timeout_ms)
    words = _words_rising(grouped, interval_ms + wait, len(partitions))
    if words is None:
        return None

    def tick(time: int) -> int:
        return -(-time // interval_ms) * interval_ms

    firsts = [word for word in words if word[_BEFORE] is None]
    lasts = {  # a partition's highest event time, where its last word leaves the running max
        (word[TOPIC], word[PARTITION]): max(
            v for v in (word[_HIGHEST], word[_BEFORE]) if v is not None
        )
        for word in words
        if word["_last_word"]
    }
    start = tick(delay_ms + min(word[EVENT_TIME] for word in firsts))
    end = tick(delay_ms + max(lasts.values()))
    ends = [  # idle before its first record, which wakes it
        (word[TOPIC], word[PARTITION], word[OFFSET], delay_ms + word[EVENT_TIME], start + wait)
        for word in firsts
        if start + wait < delay_ms + word[EVENT_TIME]
    ]
    ends += [  # idle after its last record, to the end
        (topic, partition, None, None, tick(delay_ms + last) + interval_ms + wait)
        for (topic, partition), last in lasts.items()
        if tick(delay_ms + last) + interval_ms + wait <= end
    ]
    spark = records.sparkSession
    schema = f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {PROCESSING_TIME} long"
    woken = F.when(F.col(OFFSET).isNotNull(), record_position())
    at_ends = spark.createDataFrame(ends, f"{schema}, {IDLE_FROM} long").select(
        TOPIC, PARTITION, IDLE_FROM, woken.alias(IDLE_UNTIL), F.col(PROCESSING_TIME).alias(WAKES_AT)
    )
    rising = [
        (word[TOPIC], word[PARTITION], word[_WORD], word[_BEFORE])
        for word in words
        if word["_risen"]
    ]
    if not rising:  # no word to read again: no record is read
        return at_ends
    words_schema = f"{TOPIC} string, {PARTITION} int, {_WORD} long, {_BEFORE} long"
    again = (
        records.where(_offsets_within(rising))
        .withColumn(_WORD, F.shiftright(OFFSET, 6))
        .join(F.broadcast(spark.createDataFrame(rising, words_schema)), [TOPIC, PARTITION, _WORD])
    )
    by_offset = Window.partitionBy(TOPIC, PARTITION, _WORD).orderBy(OFFSET)
    so_far = F.max(EVENT_TIME).over(by_offset.rowsBetween(Window.unboundedPreceding, -1))
    highest = F.greatest(so_far, F.col(_BEFORE))  # null before a partition's first record
    went_idle = next_tick(highest + delay_ms, interval_ms) + interval_ms + wait
    # where it raises the running max, a record is read at its own event time + D2; where it
    # does not, it wakes nothing (went_idle is later than that)
    timed = again.withColumn(PROCESSING_TIME, F.col(EVENT_TIME) + delay_ms)
    within = timed.select(
        TOPIC,
        PARTITION,
        went_idle.alias(IDLE_FROM),
        record_position().alias(IDLE_UNTIL),
        F.col(PROCESSING_TIME).alias(WAKES_AT),
    ).where(F.col(IDLE_FROM) < F.col(WAKES_AT))
    return within.unionByName(at_ends)


def _words_rising(grouped: DataFrame, most: int, partitions: int) -> list[Row] | None:
    """Of each partition's 64-offset words (of :func:`group_records`, with ``highest``), in
    one job: those over which the running max of event time rises by more than ``most``
    (``_risen``; from the first record's event time in the partition's first word), and the
    first and last (``_last_word``), with ``_before``, the running max before the word (null in
    the first), their highest event time, lowest offset and its event time. None where more
    than :data:`MAX_IDLE_WORDS` rise."""
    per_word = grouped.groupBy(TOPIC, PARTITION, _WORD).agg(
        F.max(_HIGHEST).alias(_HIGHEST), *_lowest_offset()
    )
    earlier = Window.partitionBy(TOPIC, PARTITION).orderBy(_WORD)
    before = F.max(_HIGHEST).over(earlier.rowsBetween(Window.unboundedPreceding, -1))
    risen = F.col(_HIGHEST) - F.coalesce(_BEFORE, EVENT_TIME) > most
    most_rows = MAX_IDLE_WORDS + 2 * partitions
    words = (
        per_word.select(
            "*", before.alias(_BEFORE), F.lead(_WORD).over(earlier).isNull().alias("_last_word")
        )
        .select("*", risen.alias("_risen"))
        .where(F.col("_risen") | F.col(_BEFORE).isNull() | F.col("_last_word"))
        .limit(most_rows + 1)
        .collect()
    )
    if len(words) > most_rows or sum(word["_risen"] for word in words) > MAX_IDLE_WORDS:
        return None
    return words


def _offsets_within(words: Sequence[tuple[str, int, int, int]]) -> Column:
    """The records of ``words`` (topic, partition, word, ...), or more, as a filter
    on offsets that the archive's reader applies (Parquet row groups and Delta files whose
    offsets lie outside are skipped: 0.4 s instead of 1.4 s for one word at 16M records): a
    few merged ranges per partition, none (every record) where the partitions are many."""
    ranges: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for topic, partition, word, *_ in words:
        ranges.setdefault((topic, partition), []).append((word << 6, (word + 1) << 6))
    if len(ranges) > MAX_PUSHED_RANGES:
        return F.lit(True)
    within = F.lit(False)
    for (topic, partition), pairs in ranges.items():
        for lo, hi in _merged(sorted(pairs), MAX_PUSHED_RANGES // len(ranges)):
            span = (F.col(OFFSET) >= lo) & (F.col(OFFSET) < hi)
            within = within | ((F.col(TOPIC) == topic) & (F.col(PARTITION) == partition) & span)
    return within


def _copies(words: DataFrame) -> DataFrame:
    """The copied bits of the words that have some, by a long per word (``_key``); words
    colliding on it share their copied bits, so that a record at a copied offset is always
    marked (others marked too are harmless: see the callers). Kept: the windows read the
    records through it."""
    copied = words.where(F.col(_COPY_BITS) != 0)
    return (
        copied.groupBy(F.xxhash64(TOPIC, PARTITION, _WORD).alias("_key"))
        .agg(F.bit_or(_COPY_BITS).alias(_COPY_BITS))
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def _marked(records: DataFrame, with_copies: DataFrame) -> tuple[DataFrame, Column]:
    """``records`` joined to :func:`_copies`, and whether each is at a copied offset."""
    key = F.xxhash64(TOPIC, PARTITION, F.shiftright(OFFSET, 6)).alias("_key")
    marked = records.select("*", key).join(F.broadcast(with_copies), "_key", "left")
    is_copied = F.coalesce(F.expr(f"({_COPY_BITS} >> int({OFFSET} & 63)) & 1 = 1"), F.lit(False))
    return marked, is_copied


def weighs_copies(records: DataFrame, aggregations: Sequence[Aggregation]) -> bool:
    """Can :func:`per_status` weigh copies (:func:`marked_copies`)? Not for a mean of a
    decimal column: Spark's ``avg`` of it is a decimal, the halved partials are doubles."""
    return not any(
        a.function == "mean" and isinstance(records.schema[a.column].dataType, DecimalType)
        for a in aggregations
    )


def marked_copies(records: DataFrame, words: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """The records with ``_copied``: at an offset archived twice (``_copy_bits`` of
    :func:`offset_words`, where no word is -1), for :func:`per_status` to count each copy at
    half weight instead of grouping them by offset (a pass over every record: 3 s at 16M).
    A copy marked wrongly (a word colliding on :func:`_copies`' key) or differing from its
    twin leaves its window's copies unpaired: :func:`per_status` flags the window."""
    with_copies = _copies(words)
    marked, is_copied = _marked(records, with_copies)
    return marked.select(*records.columns, is_copied.alias(COPIED)), [with_copies]


@dataclass(frozen=True)
class StatusCounts:
    """:func:`status_counts`' answer: ``n`` (record, window) pairs per status; whether some
    window's copies do not pair up (:func:`marked_copies`: the caller groups them by offset
    instead); whether some window's key has a null (the value check on keys, read here from
    the windows rather than observed on every record)."""

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


def distinct_records(records: DataFrame, words: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """Each record once, and what is kept for it, where some offset is archived twice
    (``duplicates_removed`` of :func:`offset_words`): only the records at copied offsets are
    grouped by offset. Copies whose event time or payload differ are refused, naming one."""
    with_copies = _copies(words)
    marked, is_copied = _marked(records, with_copies)
    single = marked.where(~is_copied).select(*records.columns)
    payload = [c for c in records.columns if not c.startswith("_")]
    version = F.xxhash64(EVENT_TIME, *payload)
    same_offset = Window.partitionBy(TOPIC, PARTITION, OFFSET)
    copies = (
        marked.where(is_copied)
        .select(
            *records.columns,
            (F.min(version).over(same_offset) != F.max(version).over(same_offset)).alias("_differ"),
            F.row_number().over(same_offset.orderBy(version)).alias("_copy"),
        )
        .where(F.col("_copy") == 1)
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )  # a window, not a group by: the payload's strings would make it a sort aggregate
    conflicts = copies.where("_differ")
    found = conflicts.count()
    if found:
        example = conflicts.select(TOPIC, PARTITION, OFFSET).first()
        copies.unpersist()
        with_copies.unpersist()
        raise conflicting_copies(example[TOPIC], found, example[PARTITION], example[OFFSET])
    return single.unionByName(copies.select(*records.columns)), [copies, with_copies]


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
        f"{TOPIC} string, {PARTITION} int, {_THRESHOLD} long",
    )
    sweep = minima.select(
        TOPIC,
        PARTITION,
        _THRESHOLD,
        F.struct(OFFSET, EVENT_TIME).alias(_FIRST),
        F.lit(False).alias("_wanted"),
    ).unionByName(
        wanted.select(
            TOPIC,
            PARTITION,
            _THRESHOLD,
            F.lit(None).cast(f"struct<{OFFSET}: bigint, {EVENT_TIME}: bigint>").alias(_FIRST),
            F.lit(True).alias("_wanted"),
        )
    )
    # Descending, a bucket before the threshold it starts at: the running minimum is the
    # first record at or above each threshold.
    at_or_above = (
        Window.partitionBy(TOPIC, PARTITION)
        .orderBy(F.desc(_THRESHOLD), "_wanted")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    swept = sweep.select(
        TOPIC, PARTITION, _THRESHOLD, "_wanted", F.min(_FIRST).over(at_or_above).alias(_FIRST)
    )
    return swept.where("_wanted").drop("_wanted")


def _per_topic(values: Mapping[str, int]) -> Column:
    """The value of the record's topic (the topics are few)."""
    column = F.lit(None).cast("long")
    for topic, value in values.items():
        column = F.when(F.col(TOPIC) == topic, F.lit(value)).otherwise(column)
    return column


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
        .groupBy(TOPIC, PARTITION, F.col("_lo").alias(_THRESHOLD))
        .agg(*_lowest_offset())
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
        for lo, hi in _merged(sorted(pairs), MAX_PUSHED_RANGES):  # a topic may have none
            span = (time >= F.timestamp_millis(F.lit(lo))) & (time < F.timestamp_millis(F.lit(hi)))
            within = within | ((F.col(TOPIC) == topic) & span)
    return within


def _merged(pairs: Sequence[tuple[int, int]], most: int) -> list[tuple[int, int]]:
    """Sorted ``[lo, hi)`` ranges as at most ``most`` ranges covering them: overlapping ones
    joined, then the smallest gaps closed."""
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


def watermark_reaches(
    minima: DataFrame,
    buckets: Buckets,
    partitions: Sequence[tuple[str, int]],
    targets: Sequence[int],
    strategy: WatermarkStrategy,
    idle: DataFrame | None = None,
) -> DataFrame:
    """:func:`watermarks.watermark_reaches` with D1 = 0 and periodic emission: ``_target``
    and ``_pos``, the tick of the first watermark ``>= _target``; absent where none before
    the archive ends. A partition reaches ``x`` at the first record with ``et >= x + B + 1``,
    read at ``D2 + et``; ``minima``: :func:`bucket_minima` of ``buckets`` (their B per topic,
    their D2); ``idle``: the partitions' idle periods (:func:`idle_periods`), where the job
    detects idleness. Kept (one row per target)."""
    bound = buckets.bound
    thresholds = {topic: [x + bound[topic] + 1 for x in targets] for topic, _ in partitions}
    first = first_at_or_above(minima, partitions, thresholds).select(
        TOPIC,
        PARTITION,
        (F.col(_THRESHOLD) - _per_topic(bound) - 1).alias(TARGET),
        (F.col(_FIRST)[EVENT_TIME] + buckets.delay_ms).alias(PROCESSING_TIME),
        F.col(_FIRST)[OFFSET].alias(OFFSET),
    )
    reached = F.when(F.col(OFFSET).isNotNull(), record_position())
    per_partition = first.select(TOPIC, PARTITION, TARGET, reached.alias(REACHED))
    if idle is not None:
        return reaches_with_idleness(idle, per_partition, list(partitions), strategy)
    reaches = combined(per_partition, strategy, len(partitions))
    reaches = reaches.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    reaches.count()
    return reaches


def drop_offsets(
    minima: DataFrame,
    buckets: Buckets,
    records: DataFrame,
    partitions: Sequence[tuple[str, int]],
    reaches: DataFrame,
) -> DataFrame:
    """Per (topic, partition, ``_target``) reached: ``_drop_from``, the partition's first
    offset read after the target's tick ``T`` (first with ``et >= T - D2 + 1``; null: none),
    and the tick as ``_fire_pos``. One row per partition and target: broadcast, kept.

    From ``minima`` (:func:`bucket_minima`), and where a tick's threshold starts no bucket
    (a tick far from its window's reach threshold), from the ``records`` between it and the
    next bucket start, the next reach threshold (a read that skips the others)."""
    delay_ms = buckets.delay_ms
    times = reaches.select(F.col(POSITION)["time"]).distinct().collect()
    after = {topic: [time - delay_ms + 1 for (time,) in times] for topic, _ in partitions}
    ranges = {
        topic: [
            (v, buckets.next_reach(topic, v)) for v in values if not buckets.starts_at(topic, v)
        ]
        for topic, values in after.items()
    }
    if any(ranges.values()):  # a record in two ranges goes to both: a minimum does not mind
        minima = minima.unionByName(range_minima(records, ranges))
    first = first_at_or_above(minima, partitions, after)
    ticks = reaches.select(
        TARGET,
        (F.col(POSITION)["time"] - delay_ms + 1).alias(_THRESHOLD),
        F.col(POSITION).alias(FIRE_POSITION),
    )
    table = first.join(F.broadcast(ticks), _THRESHOLD).select(
        TOPIC, PARTITION, TARGET, F.col(_FIRST)[OFFSET].alias(_DROP_FROM), FIRE_POSITION
    )
    table = table.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    table.count()
    return table


def pane_windows(grouped: DataFrame, window: TumblingWindows | SlidingWindows) -> DataFrame:
    """The panes holding a record (``_pane``, their start, from :func:`group_records`) and
    their windows, a row each, numbered ``_window_index`` 1, 2, ... by end. A few rows per
    window: kept."""
    panes = grouped.select(_PANE).distinct()
    windowed = window.assign(panes.withColumn(EVENT_TIME, F.col(_PANE)))
    by_end = Window.partitionBy(_PANE).orderBy(WINDOW_END)
    numbered = windowed.select(
        _PANE, WINDOW_START, WINDOW_END, F.row_number().over(by_end).alias(_INDEX)
    ).persist(StorageLevel.MEMORY_AND_DISK_DESER)
    numbered.count()
    return numbered


def _drops_per_pane(
    panes: DataFrame, drops: DataFrame, partitions: Sequence[tuple[str, int]]
) -> DataFrame:
    """Per (topic, partition, pane): ``_drop_froms``, for each of the pane's windows by end,
    the partition's first offset dropped from it (null: none), and ``_reached_windows``,
    how many of them the watermark reaches before the archive ends. The watermark reaches
    and drops windows in the order of their ends, so both are prefixes."""
    spark = panes.sparkSession
    pairs = spark.createDataFrame(list(partitions), f"{TOPIC} string, {PARTITION} int")
    table = drops.select(TOPIC, PARTITION, TARGET, _DROP_FROM, FIRE_POSITION)
    per_window = (
        pairs.crossJoin(panes)
        .withColumn(TARGET, max_timestamp())
        .join(table, [TOPIC, PARTITION, TARGET], "left")
    )
    per_pane = per_window.groupBy(TOPIC, PARTITION, _PANE).agg(
        F.sort_array(F.collect_list(F.struct(_INDEX, _DROP_FROM))).alias("_by_end"),
        F.count(FIRE_POSITION).alias(_REACHED_WINDOWS),
    )
    return per_pane.select(
        TOPIC,
        PARTITION,
        _PANE,
        F.col("_by_end")[_DROP_FROM].alias(_DROP_FROMS),
        _REACHED_WINDOWS,
    )


def _dropped_in(most_windows: int) -> Column:
    """How many of its pane's windows the record is dropped from: a prefix, ended by the
    first window whose first dropped offset is after the record's, or that drops none. A
    CASE, not a higher-order function: Spark interprets those, row by row."""
    kept = [
        ~F.coalesce(F.get(_DROP_FROMS, i) <= F.col(OFFSET), F.lit(False))
        for i in range(most_windows)
    ]
    if not kept:
        return F.lit(0)
    ends = F.when(kept[0], F.lit(0))
    for i, condition in enumerate(kept[1:], start=1):
        ends = ends.when(condition, F.lit(i))
    return ends.otherwise(F.lit(most_windows))


def per_status(
    records: DataFrame,
    panes: DataFrame,
    drops: DataFrame,
    reaches: DataFrame,
    partitions: Sequence[tuple[str, int]],
    window: TumblingWindows | SlidingWindows,
    trigger: Trigger,
    keys: Sequence[str],
    aggregations: Sequence[Aggregation],
) -> DataFrame:
    """:func:`window_operator.by_status` for an event-time trigger without lateness, a pane
    at a time: a record is DROPPED from a window at or after its partition's first offset
    read after the window's tick (in the first ``_dropped_in`` of its pane's windows), else
    ON_TIME where the watermark reaches ``maxTs`` before the archive ends, PENDING where not.

    Records are aggregated per (key, pane, ``_dropped_in``): with one window per pane that
    is the window's value; sliding windows merge their panes' partial aggregates, so that
    each record is grouped once, not once per window. The merge happens where the panes
    were aggregated (the records are shuffled once, by key and :data:`CHUNK_WINDOWS` chunk
    of the windows' last panes): shuffling the panes again, a row per window, cost more than
    the records' shuffle.

    Records with ``_copied`` (:func:`marked_copies`) count at half weight where set: both
    copies are in the same window row (same key, time and offset). Each row says whether
    its copies pair up (``_unpaired``: else the caller groups them by offset instead)."""
    marked = COPIED in records.columns
    copied = F.col(COPIED) if marked else F.lit(False)
    located = (
        records.withColumn(_PANE, pane_start(window))
        .join(F.broadcast(_drops_per_pane(panes, drops, partitions)), [TOPIC, PARTITION, _PANE])
        .withColumn(_DROPPED_IN, _dropped_in(window.most_windows))
    )
    # Only records on time in some window are summed (by_status's rule: no other can overflow)
    summed = F.col(_DROPPED_IN) < F.col(_REACHED_WINDOWS)
    group = [*keys, _PANE, _DROPPED_IN, _REACHED_WINDOWS]
    types = {a.column: records.schema[a.column].dataType for a in aggregations}
    partials = [
        part
        for a in aggregations
        for part in a.partials(F.when(summed, F.col(a.column)), copied, types[a.column])
    ]
    # a record counted twice, a copy once: halved, each record once
    weight = F.sum(F.when(copied, 1).otherwise(2)).alias("_weight")
    # a window's copies pair up (same offset, same content) where their hashes cancel out
    payload = [c for c in records.columns if not c.startswith("_")]
    copy_hash = F.xxhash64(TOPIC, PARTITION, OFFSET, EVENT_TIME, *payload)
    pairs = [F.bit_xor(F.when(copied, copy_hash)).alias("_pairs")] if marked else []
    unpaired = F.coalesce(F.col("_pairs"), F.lit(0)) != 0

    def status(index: Column) -> Column:
        """Of the pane's ``index``-th window by end."""
        waiting = F.when(index <= F.col(_REACHED_WINDOWS), ON_TIME).otherwise(PENDING)
        return on_element(trigger, index <= F.col(_DROPPED_IN), False, waiting)

    window_columns = [*keys, WINDOW_START, WINDOW_END, STATUS]
    features = [a.name for a in aggregations]
    if window.pane_ms == window.size_ms:  # a pane is its window: the pane's value
        if marked:
            aggregates = [weight, *partials, *pairs]
            results = [
                F.shiftright("_weight", 1).alias("record_count"),
                *[a.finished(types[a.column]) for a in aggregations],
                unpaired.alias(UNPAIRED),
            ]
        else:
            values = [a.expr(None, F.when(summed, F.col(a.column))) for a in aggregations]
            aggregates = [
                F.count(F.lit(1)).alias("record_count"),
                *[value.alias(a.name) for value, a in zip(values, aggregations, strict=True)],
            ]
            results = ["record_count", *features]
        per_window = (
            located.groupBy(*group)
            .agg(*aggregates)
            .select(
                *keys,
                F.col(_PANE).alias(WINDOW_START),
                (F.col(_PANE) + window.size_ms).alias(WINDOW_END),
                status(F.lit(1)).alias(STATUS),
                *results,
            )
        )
    else:
        chunk_ms = F.lit(CHUNK_WINDOWS * window.size_ms)

        def chunk(last_pane: Column) -> Column:
            return last_pane - F.pmod(last_pane, chunk_ms)

        chunks = F.array(chunk(F.col(_PANE)), chunk(F.col(_PANE) + window.size_ms - window.pane_ms))
        spread = located.withColumn(_CHUNK, F.explode(F.array_distinct(chunks)))
        spread = spread.repartition(*keys, _CHUNK)
        per_pane = spread.groupBy(*group, _CHUNK).agg(weight, *partials, *pairs)
        on_time = F.col(STATUS) == ON_TIME
        per_window = (
            per_pane.join(F.broadcast(panes), _PANE)
            .where(chunk(F.col(WINDOW_END) - window.pane_ms) == F.col(_CHUNK))
            .withColumn(STATUS, status(F.col(_INDEX)))
            .groupBy(*window_columns, _CHUNK)
            .agg(
                F.shiftright(F.sum("_weight"), 1).alias("record_count"),
                *[a.merged(on_time, types[a.column]) for a in aggregations],
                *([F.max(unpaired).alias(UNPAIRED)] if marked else []),
            )
        )
    fired_at = reaches.select(
        (F.col(TARGET) + 1).alias(WINDOW_END), F.col(POSITION).alias(FIRE_POSITION)
    )
    return per_window.join(F.broadcast(fired_at), WINDOW_END, "left").select(
        *window_columns, FIRE_POSITION, "record_count", *features, *([UNPAIRED] if marked else [])
    )
