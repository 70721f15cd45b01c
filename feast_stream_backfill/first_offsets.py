"""Aligned event-time windows without sorting the records by offset (D1 = 0).

With D1 = 0 a record is read at ``D2`` plus the highest event time of its partition up to it
(SEMANTICS section 1), so the questions the watermark and the triggers ask need no order of
records, only *first offsets*:

- the first record of a partition with ``et >= v`` raises that highest event time, so it is
  read at ``D2 + et``: there the partition's watermark first reaches ``v - B - 1``, and the
  combined watermark reaches a window's ``maxTs`` where the last partition (MIN) or the first
  (MAX) does, emitted at the next periodic tick ``T`` (:func:`watermarks.watermark_reaches`);
- a record is read after that tick, so that its window is gone (DROPPED), iff its partition's
  highest event time up to it is ``> T - D2``: iff its offset is at or after the partition's
  first offset with ``et >= T - D2 + 1``.

First offsets per threshold are hash aggregates (:func:`first_records`): the lowest offset
per (partition, bucket of event time between consecutive thresholds), then a suffix minimum
over a partition's buckets, a few rows per window. The windows' thresholds lie on the pane
grid, so their buckets come from the same read as the offset counts and the panes
(:func:`group_records`); the ticks' thresholds, known only once the watermark has reached the
windows, take a second read. Archived copies of a record share its offset and event time, so
they change no first offset; only the windows' counts must see each record once
(:func:`distinct_records`). The windows are aggregated a pane at a time
(:func:`per_status`): a sliding window's records are grouped once, not once per window.

The sorted path (:mod:`processing_time`, :mod:`watermarks`) keeps what needs a record's own
time: D1 > 0 (ranks), idleness, on-event watermarks, processing-time and session windows, late
and per-record firings, enrichment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    EVENT_TIME,
    FIRE_POSITION,
    OFFSET,
    PARTITION,
    POSITION,
    PROCESSING_TIME,
    STATUS,
    TARGET,
    TOPIC,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.errors import conflicting_copies
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.triggers import ON_TIME, PENDING, Trigger, on_element
from feast_stream_backfill.watermarks import REACHED, WatermarkStrategy, combined
from feast_stream_backfill.windows import (
    SlidingWindows,
    TumblingWindows,
    max_timestamp,
    pane_start,
)

#: Coarse cells of event time per bucket table: a broadcast of at most this many rows (plus one
#: per threshold) per topic, however long the archive.
MAX_CELLS = 1 << 16

_FIRST, _THRESHOLD, _DROP_FROM, _WORD = "_first", "_threshold", "_drop_from", "_word"
_COPY_BITS, _SET = "_copy_bits", "_set"
#: The groupings of :func:`group_records` (``_set``).
_WORDS, _BUCKETS = 0, 1
_PANE, _INDEX, _DROP_FROMS = "_pane", "_window_index", "_drop_froms"
_DROPPED_IN, _REACHED_WINDOWS = "_dropped_in", "_reached_windows"


def group_records(
    observed: DataFrame, window: TumblingWindows | SlidingWindows, bound: Mapping[str, int]
) -> DataFrame:
    """Every record read once and grouped two ways in one hash aggregate, kept; ``_set`` says
    which grouping a row is of:

    - ``_WORDS``, per (topic, partition, 64-offset word ``_word``): the offset bits
      (:func:`offset_words`);
    - ``_BUCKETS``, per (topic, partition, ``_threshold``, ``_pane``): the lowest offset and its
      event time, where ``_threshold`` is the highest ``end + B`` at or below the record's
      event time, ``end`` on the grid windows end on (the panes') and B the topic's ``bound``:
      each window's reach threshold ``maxTs + B + 1`` starts one of these buckets
      (:func:`watermark_reaches`), and a record's pane is the other key
      (:func:`pane_windows`); a bucket meets two panes at most.

    ``observed``: the records with their value checks observed (this is the pass that reads
    every record before the checks are verified). Each record is listed once per grouping by
    ``inline``, not by ``groupingSets``: a cache whose plan holds grouping sets' ``Expand`` is
    not found again where a self-join renames its columns (the emission log's does), and
    everything read from it was computed again."""
    bit = F.expr(f"shiftleft(1L, int({OFFSET} & 63))")
    reach_grid = F.lit(window.offset_ms) + _per_topic(bound)
    threshold = F.col(EVENT_TIME) - F.pmod(F.col(EVENT_TIME) - reach_grid, F.lit(window.pane_ms))
    none = F.lit(None).cast("long")
    keys = {
        _WORDS: (F.shiftright(OFFSET, 6), none, none),
        _BUCKETS: (none, threshold, pane_start(window)),
    }
    listed = F.array(
        *[
            F.struct(
                F.lit(grouping).alias(_SET),
                F.col(TOPIC).alias(TOPIC),
                F.col(PARTITION).alias(PARTITION),
                word.alias(_WORD),
                bucket.alias(_THRESHOLD),
                pane.alias(_PANE),
            )
            for grouping, (word, bucket, pane) in keys.items()
        ]
    )
    return (
        observed.select(OFFSET, EVENT_TIME, F.inline(listed))
        .groupBy(_SET, TOPIC, PARTITION, _WORD, _THRESHOLD, _PANE)
        .agg(
            F.bit_or(bit).alias("_offset_bits"),
            F.bit_xor(bit).alias("_odd_bits"),
            F.count(F.lit(1)).alias("_word_records"),
            *_lowest_offset(),
        )
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )


def _lowest_offset() -> list[Column]:
    """The lowest offset and its event time, as aggregates: not min(struct), whose buffer is
    not hash-aggregated (a sort of every record)."""
    return [F.min(OFFSET).alias(OFFSET), F.min_by(EVENT_TIME, OFFSET).alias(EVENT_TIME)]


def offset_words(grouped: DataFrame) -> tuple[DataFrame, dict[str, int], list[tuple[str, int]]]:
    """Offsets counted as set bits of 64-offset words (of :func:`group_records`); the counts
    ``records_read`` and ``duplicates_removed``; the (topic, partition) pairs read.

    A word's ``_copy_bits`` are the offsets archived more than once. An offset held twice
    leaves its bit set in the OR and clear in the XOR (set in OR ^ XOR); when that accounts
    for every extra record, those are exactly the copied offsets. Otherwise (three copies of
    one offset) every offset of the word counts as copied (-1)."""
    words = (
        grouped.where(F.col(_SET) == _WORDS)
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
        )
    )
    totals = words.agg(
        F.coalesce(F.sum("_word_records"), F.lit(0)).alias("records_read"),
        F.coalesce(F.sum(F.bit_count("_offset_bits")), F.lit(0)).alias("distinct"),
        F.collect_set(F.struct(TOPIC, PARTITION)).alias("partitions"),
    ).first()
    read = totals["records_read"]
    counts = {"records_read": read, "duplicates_removed": read - totals["distinct"]}
    return words, counts, sorted(tuple(pair) for pair in totals["partitions"])


def distinct_records(records: DataFrame, words: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
    """Each record once, and what is kept for it, where some offset is archived twice
    (``duplicates_removed`` of :func:`offset_words`): only the records at copied offsets are
    grouped by offset. Copies whose event time or payload differ are refused, naming one."""
    copied = words.where(F.col(_COPY_BITS) != 0)
    # One long per word; words colliding on it share their copied bits, so that a record at a
    # copied offset always goes to the grouping (others going there too is harmless). Kept:
    # the windows read the records through it.
    with_copies = (
        copied.groupBy(F.xxhash64(TOPIC, PARTITION, _WORD).alias("_key"))
        .agg(F.bit_or(_COPY_BITS).alias(_COPY_BITS))
        .persist(StorageLevel.MEMORY_AND_DISK_DESER)
    )
    key = F.xxhash64(TOPIC, PARTITION, F.shiftright(OFFSET, 6)).alias("_key")
    marked = records.select("*", key).join(F.broadcast(with_copies), "_key", "left")
    is_copied = F.coalesce(F.expr(f"({_COPY_BITS} >> int({OFFSET} & 63)) & 1 = 1"), F.lit(False))
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


def first_records(
    records: DataFrame,
    partitions: Sequence[tuple[str, int]],
    thresholds: Mapping[str, Sequence[int]],
) -> DataFrame:
    """For each (topic, partition) of ``partitions`` and each of its topic's ``thresholds``
    (``_threshold``): ``_first``, the struct (offset, event time) of the partition's first
    record with ``et >= _threshold``, null where there is none.

    Each record goes to a bucket, the lowest offset per (partition, bucket) is kept, and a
    suffix minimum over a partition's buckets (:func:`first_at_or_above`) answers every
    threshold. Thresholds on a grid of at most :data:`MAX_CELLS` cells bucket by arithmetic;
    others (the ticks) by the highest threshold at or below the record's event time, found by
    a broadcast join on a coarse cell of event time, which lists each bucket in every cell it
    overlaps."""
    levels = {topic: sorted(set(values)) for topic, values in thresholds.items() if values}
    grids = {topic: _grid(values) for topic, values in levels.items()}
    if levels and all(grids.values()):
        located = _by_grid(records, levels, grids)
    else:
        located = _by_bucket_join(records, levels)
    minima = located.groupBy(TOPIC, PARTITION, _THRESHOLD).agg(*_lowest_offset())
    return first_at_or_above(minima, partitions, levels)


def first_at_or_above(
    minima: DataFrame,
    partitions: Sequence[tuple[str, int]],
    thresholds: Mapping[str, Sequence[int]],
) -> DataFrame:
    """:func:`first_records` from the lowest offset (and its event time) per (topic,
    partition, bucket from ``_threshold`` up to the next): every threshold must start a
    bucket."""
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


def _grid(values: Sequence[int]) -> int | None:
    """The step of the grid the sorted ``values`` lie on, if it has at most
    :data:`MAX_CELLS` cells between them."""
    step = math.gcd(*(value - values[0] for value in values)) or 1
    return step if (values[-1] - values[0]) // step < MAX_CELLS else None


def _per_topic(values: Mapping[str, int]) -> Column:
    """The value of the record's topic (the topics are few)."""
    column = F.lit(None).cast("long")
    for topic, value in values.items():
        column = F.when(F.col(TOPIC) == topic, F.lit(value)).otherwise(column)
    return column


def _by_grid(
    records: DataFrame, levels: Mapping[str, Sequence[int]], grids: Mapping[str, int]
) -> DataFrame:
    """Records with ``_threshold``: the highest grid point at or below their event time
    (capped at the topic's highest threshold); records below the lowest are left out."""
    low = _per_topic({topic: values[0] for topic, values in levels.items()})
    step = _per_topic(grids)
    cells = _per_topic({t: (v[-1] - v[0]) // grids[t] for t, v in levels.items()})
    above = F.col(EVENT_TIME) - low
    cell = F.least((above - F.pmod(above, step)) / step, cells).cast("long")  # exact
    return records.where(F.col(EVENT_TIME) >= low).select(
        TOPIC, PARTITION, OFFSET, EVENT_TIME, (low + cell * step).alias(_THRESHOLD)
    )


def _by_bucket_join(records: DataFrame, levels: Mapping[str, Sequence[int]]) -> DataFrame:
    """Records with ``_threshold``: the highest threshold at or below their event time;
    records below the lowest are left out."""
    spark = records.sparkSession
    if not levels:
        return records.where(F.lit(False)).select(
            TOPIC, PARTITION, OFFSET, EVENT_TIME, F.lit(None).cast("long").alias(_THRESHOLD)
        )
    low = min(values[0] for values in levels.values())
    high = max(values[-1] for values in levels.values())
    width = -(-(high - low + 1) // MAX_CELLS)
    last_cell = (high - low) // width
    rows = []
    for topic, values in levels.items():
        for lo, hi in zip(values, [*values[1:], None], strict=True):
            to = last_cell if hi is None else (hi - 1 - low) // width
            rows += [(topic, cell, lo, hi) for cell in range((lo - low) // width, to + 1)]
    buckets = spark.createDataFrame(rows, "_b_topic string, _b_cell long, _lo long, _hi long")
    cell = F.least(F.expr(f"({EVENT_TIME} - {low}) div {width}"), F.lit(last_cell))
    located = records.where(F.col(EVENT_TIME) >= low).select(
        TOPIC, PARTITION, OFFSET, EVENT_TIME, cell.alias("_et_cell")
    )
    in_bucket = (
        (F.col(TOPIC) == F.col("_b_topic"))
        & (F.col("_et_cell") == F.col("_b_cell"))
        & (F.col(EVENT_TIME) >= F.col("_lo"))
        & (F.col("_hi").isNull() | (F.col(EVENT_TIME) < F.col("_hi")))
    )
    return located.join(F.broadcast(buckets), in_bucket).select(
        TOPIC, PARTITION, OFFSET, EVENT_TIME, F.col("_lo").alias(_THRESHOLD)
    )


def watermark_reaches(
    grouped: DataFrame,
    partitions: Sequence[tuple[str, int]],
    targets: Sequence[int],
    strategy: WatermarkStrategy,
    delay_ms: int,
    bound: Mapping[str, int],
) -> DataFrame:
    """:func:`watermarks.watermark_reaches` with D1 = 0 and periodic emission: ``_target``
    and ``_pos``, the tick of the first watermark ``>= _target``; absent where none before
    the archive ends. A partition reaches ``x`` at the first record with ``et >= x + B + 1``,
    read at ``D2 + et``; the buckets come from :func:`group_records` (same ``bound``: each
    topic's B). Kept (one row per target)."""
    thresholds = {topic: [x + bound[topic] + 1 for x in targets] for topic, _ in partitions}
    minima = grouped.where(F.col(_SET) == _BUCKETS).groupBy(TOPIC, PARTITION, _THRESHOLD)
    minima = minima.agg(*_lowest_offset())
    first = first_at_or_above(minima, partitions, thresholds).select(
        TOPIC,
        PARTITION,
        (F.col(_THRESHOLD) - _per_topic(bound) - 1).alias(TARGET),
        (F.col(_FIRST)[EVENT_TIME] + delay_ms).alias(PROCESSING_TIME),
        F.col(_FIRST)[OFFSET].alias(OFFSET),
    )
    per_partition = first.select(
        TARGET, F.when(F.col(OFFSET).isNotNull(), record_position()).alias(REACHED)
    )
    reaches = combined(per_partition, strategy, len(partitions))
    reaches = reaches.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    reaches.count()
    return reaches


def drop_offsets(
    records: DataFrame, partitions: Sequence[tuple[str, int]], reaches: DataFrame, delay_ms: int
) -> DataFrame:
    """Per (topic, partition, ``_target``) reached: ``_drop_from``, the partition's first
    offset read after the target's tick ``T`` (first with ``et >= T - D2 + 1``; null: none),
    and the tick as ``_fire_pos``. One row per partition and target: broadcast, kept."""
    times = reaches.select(F.col(POSITION)["time"]).distinct().collect()
    after = [time - delay_ms + 1 for (time,) in times]
    first = first_records(records, partitions, {topic: after for topic, _ in partitions})
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
    panes = grouped.where(F.col(_SET) == _BUCKETS).select(_PANE).distinct()
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
    each record is grouped once, not once per window."""
    located = (
        records.withColumn(_PANE, pane_start(window))
        .join(F.broadcast(_drops_per_pane(panes, drops, partitions)), [TOPIC, PARTITION, _PANE])
        .withColumn(_DROPPED_IN, _dropped_in(window.most_windows))
    )
    # Only records on time in some window are summed (by_status's rule: no other can overflow)
    summed = F.col(_DROPPED_IN) < F.col(_REACHED_WINDOWS)
    group = [*keys, _PANE, _DROPPED_IN, _REACHED_WINDOWS]

    def status(index: Column) -> Column:
        """Of the pane's ``index``-th window by end."""
        waiting = F.when(index <= F.col(_REACHED_WINDOWS), ON_TIME).otherwise(PENDING)
        return on_element(trigger, index <= F.col(_DROPPED_IN), False, waiting)

    window_columns = [*keys, WINDOW_START, WINDOW_END, STATUS]
    features = [a.name for a in aggregations]
    if window.pane_ms == window.size_ms:  # a pane is its window: the pane's value
        values = [a.expr(None, F.when(summed, F.col(a.column))).alias(a.name) for a in aggregations]
        per_pane = located.groupBy(*group).agg(F.count(F.lit(1)).alias("record_count"), *values)
        per_window = per_pane.select(
            *keys,
            F.col(_PANE).alias(WINDOW_START),
            (F.col(_PANE) + window.size_ms).alias(WINDOW_END),
            status(F.lit(1)).alias(STATUS),
            "record_count",
            *features,
        )
    else:
        partials = [
            part for a in aggregations for part in a.partials(F.when(summed, F.col(a.column)))
        ]
        per_pane = located.groupBy(*group).agg(F.count(F.lit(1)).alias("record_count"), *partials)
        on_time = F.col(STATUS) == ON_TIME
        per_window = (
            per_pane.join(F.broadcast(panes), _PANE)
            .withColumn(STATUS, status(F.col(_INDEX)))
            .groupBy(*window_columns)
            .agg(
                F.sum("record_count").alias("record_count"),
                *[a.merged(on_time) for a in aggregations],
            )
        )
    fired_at = reaches.select(
        (F.col(TARGET) + 1).alias(WINDOW_END), F.col(POSITION).alias(FIRE_POSITION)
    )
    return per_window.join(F.broadcast(fired_at), WINDOW_END, "left").select(
        *window_columns, FIRE_POSITION, "record_count", *features
    )
