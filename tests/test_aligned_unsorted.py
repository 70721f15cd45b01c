"""The strategy that never sorts the records
(:mod:`feast_stream_backfill.strategies.aligned_unsorted`), hand-computed;
``tests/test_differential.py`` checks it against the simulator on random archives, and against
the strategy in processing order."""

import re

import pytest
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    WatermarkStrategy,
    idleness,
)
from feast_stream_backfill.columns import (
    EVENT_TIME,
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    TOPIC,
    WAKES_AT,
)
from feast_stream_backfill.job_records import job_records
from feast_stream_backfill.planner import plan
from feast_stream_backfill.strategies import StrategyDeclined
from feast_stream_backfill.strategies.aligned_unsorted import (
    idle,
    offsets,
    reaches_and_drops,
    thresholds,
    window_aggregates,
)
from feast_stream_backfill.strategies.aligned_unsorted.thresholds import BucketStarts
from feast_stream_backfill.windows import SlidingWindows, TumblingWindows
from tests.reference_simulator import Job, Record
from tests.test_differential import run_backfill, spark_backfill_with_stats, stream_job


def in_partition_0(rows: list[tuple]) -> list[Record]:
    """(offset, event time, key, value) rows: records of topic t1's partition 0."""
    return [Record("t1", 0, *row) for row in rows]


@pytest.mark.parametrize("cells", [thresholds.MAX_CELLS, 1, 3])
def test_first_records_at_or_above_each_threshold(spark, monkeypatch, cells):
    # p0 in offset order: et 100, 50, 300, 120; p1: 130, then 40 at offset 5. Buckets from
    # the records in ranges, each starting at a threshold: the first record with et >= 120
    # in p0 is offset 2 (et 300): offset 3 has et 120 but comes later. [301, 400) is empty.
    # A bucket [45, 150) overlapping them changes nothing: a minimum. With one or three
    # coarse cells, ranges share cells and a record picks its own by et.
    monkeypatch.setattr(thresholds, "MAX_CELLS", cells)
    rows = [(0, 0, 100), (0, 1, 50), (0, 2, 300), (0, 3, 120), (1, 0, 130), (1, 5, 40)]
    records = spark.createDataFrame(
        [("t", *row) for row in rows],
        f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {EVENT_TIME} long",
    )
    ranges = {"t": [(40, 60), (60, 120), (120, 121), (121, 301), (301, 400)]}
    minima = thresholds.range_minima(records, ranges)
    assert sorted(tuple(r) for r in minima.collect()) == [
        ("t", 0, 40, 1, 50),
        ("t", 0, 60, 0, 100),
        ("t", 0, 120, 3, 120),
        ("t", 0, 121, 2, 300),
        ("t", 1, 40, 5, 40),
        ("t", 1, 121, 0, 130),
    ]
    overlapping = thresholds.range_minima(records, {"t": [(45, 150)]})
    asked = {"t": [60, 120, 121, 301, 40]}
    found = thresholds.first_at_or_above(
        minima.unionByName(overlapping), [("t", 0), ("t", 1)], asked
    )
    actual = {
        (r[PARTITION], r["_threshold"]): None if r["_first"] is None else tuple(r["_first"])
        for r in found.collect()
    }
    assert actual == {
        (0, 40): (0, 100),
        (0, 60): (0, 100),
        (0, 120): (2, 300),
        (0, 121): (2, 300),
        (0, 301): None,
        (1, 40): (0, 130),
        (1, 60): (0, 130),
        (1, 120): (0, 130),
        (1, 121): (0, 130),
        (1, 301): None,
    }


def test_a_bucket_starts_where_starts_at_says(spark):
    # Panes of 2000 from 10, B = 5: reach thresholds 15 (mod 2000). Ticks every 20, D2 = 7:
    # drop thresholds T - 6 = 14 (mod 20); those of the 16 ticks after the reach threshold
    # 15 are 34, 54, ..., 334 (< 15 + 16 x 20, within half a pane). 14 (1999 after -1985) and
    # 354 start none.
    window = TumblingWindows(size_ms=2000, offset_ms=10)
    starts = BucketStarts(window, WatermarkStrategy(interval_ms=20), {"t": 5}, delay_ms=7)
    assert [starts.starts_at("t", v) for v in (-1985, 14, 15, 34, 35, 334, 354, 2015)] == [
        True,
        False,
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    values = range(-2100, 2100)
    events = spark.createDataFrame([("t", v) for v in values], f"{TOPIC} string, {EVENT_TIME} long")
    start = dict(events.select(EVENT_TIME, starts.record_bucket()).collect())
    # 14 is in -1985's bucket from its 16th tick threshold, -1666 (< -1985 + 320)
    assert [start[v] for v in (14, 15, 33, 34, 353, 2014, 2015)] == [
        -1666,
        15,
        15,
        34,
        334,
        334,
        2015,
    ]
    assert [v for v in values if start[v] == v] == [v for v in values if starts.starts_at("t", v)]


def test_allowed_lateness_off_the_panes_starts_a_second_grid(spark):
    # As above, with L = 1003: the cleanup times' reach thresholds are 15 + 1003 = 1018 (mod
    # 2000), with the drop thresholds of the 16 ticks after them, 1034, ..., 1334. 1017, 1019
    # and 1354 start none; the next reach threshold after 20 is 1018, after 1018 it is 2015.
    window = TumblingWindows(size_ms=2000, offset_ms=10)
    watermark = WatermarkStrategy(interval_ms=20)
    starts = BucketStarts(window, watermark, {"t": 5}, delay_ms=7, lateness_ms=1003)
    assert starts.phases == (0, 1003)
    checked = (15, 34, 1017, 1018, 1019, 1034, 1334, 1354)
    assert [starts.starts_at("t", v) for v in checked] == [
        True,
        True,
        False,
        True,
        False,
        True,
        True,
        False,
    ]
    assert (starts.next_reach("t", 20), starts.next_reach("t", 1018)) == (1018, 2015)
    values = range(-2100, 2100)
    events = spark.createDataFrame([("t", v) for v in values], f"{TOPIC} string, {EVENT_TIME} long")
    start = dict(events.select(EVENT_TIME, starts.record_bucket()).collect())
    assert [start[v] for v in (1017, 1018, 1033, 1340, 2014)] == [334, 1018, 1018, 1334, 1334]
    assert [v for v in values if start[v] == v] == [v for v in values if starts.starts_at("t", v)]
    # a whole number of panes adds no grid: its thresholds are the windows' own
    on_grid = BucketStarts(window, watermark, {"t": 5}, delay_ms=7, lateness_ms=4000)
    assert on_grid.phases == (0,)


def test_one_read_groups_records_by_block_reach_threshold_and_pane(spark):
    # Sliding windows of 100 ms by 50, offset 10: panes of 50 start at 10 (mod 50) and so do
    # the windows' ends. B = 5: a window's reach threshold maxTs + B + 1 = end + 5 is 15
    # (mod 50). Ticks every 20 ms, D2 = 0: drop thresholds T + 1 = 1 (mod 20), those less
    # than half a pane (25) after a reach threshold start buckets: -19, 21 (not 61: 46 after
    # 15). p0: et 9 (pane -40) and 14 (pane 10) from -19, et 64 from 21 (pane 60). p1: et 15
    # from 15 (pane 10); 65 and 66 from 65 (pane 60), where offset 2 (et 66) is the first.
    rows = [(0, 0, 14), (0, 1, 9), (0, 70, 64), (1, 3, 15), (1, 4, 65), (1, 2, 66)]
    records = spark.createDataFrame(
        [("t", *row) for row in rows],
        f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {EVENT_TIME} long",
    )
    window = SlidingWindows(size_ms=100, slide_ms=50, offset_ms=10)
    starts = BucketStarts(window, WatermarkStrategy(interval_ms=20), {"t": 5}, delay_ms=0)
    grouped = offsets.group_records(records, starts)
    # one row per (partition, block, bucket, pane): its offsets' bits, the lowest and its et
    assert {
        (r[PARTITION], r["_block"], r["_threshold"], r["_pane"]): (
            r["_offset_bits"],
            r[OFFSET],
            r[EVENT_TIME],
        )
        for r in grouped.collect()
    } == {
        (0, 0, -19, -40): (0b10, 1, 9),
        (0, 0, -19, 10): (0b1, 0, 14),
        (0, 1, 21, 60): (1 << (70 - 64), 70, 64),
        (1, 0, 15, 10): (1 << 3, 3, 15),
        (1, 0, 65, 60): (1 << 4 | 1 << 2, 2, 66),
    }
    minima = thresholds.bucket_minima(grouped).collect()
    assert {(r[PARTITION], r["_threshold"]): (r[OFFSET], r[EVENT_TIME]) for r in minima} == {
        (0, -19): (0, 14),
        (0, 21): (70, 64),
        (1, 15): (3, 15),
        (1, 65): (2, 66),
    }
    panes = window_aggregates.pane_windows(grouped, window)  # each pane is in two windows
    assert sorted(tuple(r) for r in panes.collect()) == [
        (-40, -90, 10, 1),
        (-40, -40, 60, 2),
        (10, -40, 60, 1),
        (10, 10, 110, 2),
        (60, 10, 110, 1),
        (60, 60, 160, 2),
    ]
    found = offsets.offset_blocks(grouped)
    assert {(r[PARTITION], r["_block"]): r["_offset_bits"] for r in found.blocks.collect()} == {
        (0, 0): 0b11,
        (0, 1): 1 << (70 - 64),
        (1, 0): 0b11100,
    }
    assert found.counts == {"records_read": 6, "duplicates_removed": 0}
    assert not found.suspect
    for cached in (grouped, panes):
        cached.unpersist()


@pytest.mark.parametrize("ticks_after_reach", [thresholds.TICKS_AFTER_REACH, 0])
def test_a_record_read_after_the_windows_tick_is_dropped(spark, monkeypatch, ticks_after_reach):
    # D2 = 10, B = 0, ticks every 50 ms, one partition, windows of 100 ms. Read at
    # D2 + the highest et so far: o0 et 50 at 60, o1 et 120 at 130, o2 et 60 at 130,
    # o3 et 145 at 155, o4 et 70 at 155. [0, 100) needs et >= 100: o1, read at 130, so the
    # tick at 150 fires it (a: 1 + 4). o4 is read at 155, after that tick: it is at or after
    # the first offset with et >= 150 - 10 + 1 = 141 (o3): dropped. [100, 200) never fires.
    # 141 starts a bucket of the grouped read (41 after the reach threshold 100, within 16
    # ticks and half a window): no second read. With no ticks after a reach threshold it
    # starts none: the records in [141, 200) are read again.
    monkeypatch.setattr(thresholds, "TICKS_AFTER_REACH", ticks_after_reach)
    reads = []
    range_minima = reaches_and_drops.range_minima
    monkeypatch.setattr(
        reaches_and_drops,
        "range_minima",
        lambda *args: reads.append(args[1]) or range_minima(*args),
    )
    records = in_partition_0(
        [
            (0, 50, "a", 1.0),
            (1, 120, "b", 2.0),
            (2, 60, "a", 4.0),
            (3, 145, "b", 8.0),
            (4, 70, "a", 16.0),
        ]
    )
    job = Job(size=100, interval=50, min_delay=10)
    assert plan(stream_job(spark, records, job)).strategy.name == "aligned-unsorted"
    emissions, dropped, stats = spark_backfill_with_stats(spark, records, job)
    assert [e[:8] for e in emissions] == [("a", 0, 100, 150, 0, "on_time", 2, 5.0)]
    assert dropped == {("a", 0): 1}
    assert (stats["records_on_time"], stats["records_dropped"], stats["records_pending"]) == (
        2,
        1,
        2,
    )
    assert reads == ([] if ticks_after_reach else [{"t1": [(141, 200)]}])


@pytest.mark.parametrize("strategy", ["aligned-unsorted", "aligned-in-order"])
def test_late_records_are_read_at_the_highest_event_time_of_earlier_blocks(spark, strategy):
    # B = 0, D2 = 0, ticks every 10 ms, windows of 10 ms, L = 100, one partition whose
    # offsets span three blocks of 64. Read at the highest et so far: o0 et 1 at 1, o1 et 50
    # at 50, o64 et 57 at 57, o66 et 3 at 57 (its own block's o64), o128 et 20 at 57 and
    # o130 et 5 at 57 (block 1's highest, before their own block). The tick at 50 (W = 49)
    # fires a's [0, 10) with o0; W never reaches a cleanup time 9 + 100. o66 and o130 are
    # late for [0, 10) and fire it at 57, in offset order: 1 + 8, then 1 + 8 + 32; o128 is
    # late for c's [20, 30) and fires it alone. b's [50, 60) never fires (W ends at 56).
    records = in_partition_0(
        [
            (0, 1, "a", 1.0),
            (1, 50, "b", 2.0),
            (64, 57, "b", 4.0),
            (66, 3, "a", 8.0),
            (128, 20, "c", 16.0),
            (130, 5, "a", 32.0),
        ]
    )
    job = Job(size=10, interval=10, lateness=100)
    assert plan(stream_job(spark, records, job)).strategy.name == "aligned-unsorted"
    emissions, dropped, stats = spark_backfill_with_stats(spark, records, job, strategy=strategy)
    assert sorted(e[:8] for e in emissions) == [
        ("a", 0, 10, 50, 0, "on_time", 1, 1.0),
        ("a", 0, 10, 57, 0, "late", 2, 9.0),
        ("a", 0, 10, 57, 1, "late", 3, 41.0),
        ("c", 20, 30, 57, 0, "late", 1, 16.0),
    ]
    assert dropped == {}
    assert (stats["records_on_time"], stats["records_late"], stats["records_pending"]) == (1, 3, 2)


def test_copied_offsets_are_found_per_block(spark):
    # Block 0 of p0: offsets 0, 1, 1, 2 (offset 1 archived twice): copy bits 0b10.
    # Block 1 of p0: offsets 64, 65, 65, 65 (three copies of 65): OR ^ XOR cannot tell which
    # offsets, so all of the block's go to the grouping (-1). p1 has no copies (0).
    rows = [(0, o, 10 * o) for o in (0, 1, 1, 2, 64, 65, 65, 65)] + [(1, 0, 5), (1, 1, 6)]
    records = spark.createDataFrame(
        [("t", *row) for row in rows],
        f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {EVENT_TIME} long",
    )
    starts = BucketStarts(
        TumblingWindows(size_ms=100), WatermarkStrategy(interval_ms=200), {"t": 0}, 0
    )
    grouped = offsets.group_records(records, starts)
    found = offsets.offset_blocks(grouped)
    assert found.partitions == [("t", 0), ("t", 1)]
    assert not found.paired  # three copies of 65: copies cannot be counted at half weight
    bits = {(r[PARTITION], r["_block"]): r["_copy_bits"] for r in found.blocks.collect()}
    assert bits == {(0, 0): 0b10, (0, 1): -1, (1, 0): 0}
    assert found.counts == {"records_read": 10, "duplicates_removed": 3}
    distinct, kept = offsets.distinct_records(records, found.blocks)
    assert sorted(tuple(r) for r in distinct.collect()) == sorted(("t", *row) for row in {*rows})
    for cached in [grouped, *kept]:
        cached.unpersist()


#: p0, tumbling windows of 100 ms, D2 = 10, B = 0, ticks every 50 ms; offsets 1 and 3 archived
#: twice. Read at D2 + the highest et so far: o0 at 50, o1 at 70, o2 at 160, o3 at 170, o4 at
#: 270. The tick at 200 (W = 159) fires [0, 100): a's 1 + 2; the tick at 300 (W = 259) fires
#: [100, 200): b's 4, a's 8 (once). [200, 300) is pending.
COPIED_ARCHIVE = in_partition_0(
    [
        (0, 40, "a", 1.0),
        (1, 60, "a", 2.0),
        (1, 60, "a", 2.0),
        (2, 150, "b", 4.0),
        (3, 160, "a", 8.0),
        (3, 160, "a", 8.0),
        (4, 260, "c", 16.0),
    ]
)
COPIED_EMISSIONS = [
    ("a", 0, 100, 200, 0, "on_time", 2, 3.0),
    ("a", 100, 200, 300, 0, "on_time", 1, 8.0),
    ("b", 100, 200, 300, 0, "on_time", 1, 4.0),
]


def test_copies_count_once_without_grouping_them_by_offset(spark, monkeypatch):
    def grouped_by_offset(*_):
        raise AssertionError("copies grouped by offset")

    monkeypatch.setattr(offsets, "distinct_records", grouped_by_offset)
    job = Job(size=100, interval=50, min_delay=10)
    emissions, _, stats = spark_backfill_with_stats(spark, COPIED_ARCHIVE, job)
    assert sorted(e[:8] for e in emissions) == COPIED_EMISSIONS
    assert (stats["records_read"], stats["duplicates_removed"]) == (7, 2)
    assert (stats["records_on_time"], stats["records_pending"]) == (4, 1)


def test_copies_marked_wrongly_are_grouped_by_offset(spark, monkeypatch):
    # Every offset marked copied, as a collision of two blocks' keys would mark a block's: the
    # records archived once leave their windows unpaired, so copies are grouped by offset.
    copies, grouped = offsets._copies, []

    def every_offset(blocks):
        return copies(blocks.withColumn("_copy_bits", F.lit(-1)))

    def grouped_by_offset(records, blocks):
        grouped.append(True)
        return distinct_records(records, blocks)

    distinct_records = offsets.distinct_records
    monkeypatch.setattr(offsets, "_copies", every_offset)
    monkeypatch.setattr(offsets, "distinct_records", grouped_by_offset)
    job = Job(size=100, interval=50, min_delay=10)
    emissions, _, stats = spark_backfill_with_stats(spark, COPIED_ARCHIVE, job)
    assert sorted(e[:8] for e in emissions) == COPIED_EMISSIONS
    assert grouped == [True]
    assert stats["duplicates_removed"] == 2


@pytest.mark.parametrize("chunk_windows", [window_aggregates.CHUNK_WINDOWS, 1])
def test_a_sliding_window_record_dropped_from_its_earlier_window_only(
    spark, monkeypatch, chunk_windows
):
    # Windows of 100 ms sliding by 50 (panes of 50); D2 = 10, B = 0, ticks every 50 ms. Read
    # at D2 + the highest et so far: o0 et 40 at 50, o1 et 110 at 120, o2 et 60 at 120,
    # o3 et 160 at 170, o4 et 70 at 170. The tick at 150 has W = 109: it fires [-50, 50) and
    # [0, 100); the tick at 200 (W = 159) fires [50, 150); [100, 200) and [150, 250) never.
    # o4, read at 170, is in [0, 100) (fired at 150: dropped) and [50, 150) (on time): its
    # pane's windows are dropped for a prefix only. Chunks of one window (100 ms) send the
    # panes at 50 and 150 to two chunks each: the windows are the same.
    monkeypatch.setattr(window_aggregates, "CHUNK_WINDOWS", chunk_windows)
    records = in_partition_0(
        [
            (0, 40, "a", 1.0),
            (1, 110, "b", 2.0),
            (2, 60, "a", 4.0),
            (3, 160, "b", 8.0),
            (4, 70, "a", 16.0),
        ]
    )
    job = Job(size=100, slide=50, interval=50, min_delay=10)
    assert plan(stream_job(spark, records, job)).strategy.name == "aligned-unsorted"
    emissions, dropped, stats = spark_backfill_with_stats(spark, records, job)
    assert sorted(e[:8] for e in emissions) == [
        ("a", -50, 50, 150, 0, "on_time", 1, 1.0),
        ("a", 0, 100, 150, 1, "on_time", 2, 5.0),
        ("a", 50, 150, 200, 0, "on_time", 2, 20.0),
        ("b", 50, 150, 200, 0, "on_time", 1, 2.0),
    ]
    assert dropped == {("a", 0): 1}
    assert (stats["records_on_time"], stats["records_dropped"], stats["records_pending"]) == (
        6,
        1,
        3,
    )


def test_the_emission_log_reads_no_record_again(spark):
    # Computing the status counts keeps the windows' aggregate: the emission log reads it,
    # not the records. A cache Spark cannot match again (as one whose plan held grouping
    # sets' Expand, under the log's self-join) makes it read every record a second time.
    records = [
        Record("t1", 0, offset, et, key, 1.0)
        for offset, et, key in [(0, 50, "a"), (1, 120, "b"), (2, 60, "a"), (3, 145, "b")]
    ]
    job = Job(size=100, interval=50, min_delay=10)
    result = run_backfill(spark, records, job)  # with the status counts
    plan = result.emissions._jdf.queryExecution().sparkPlan()  # before adaptive execution
    leaves = [plan.collectLeaves().apply(i) for i in range(plan.collectLeaves().size())]
    read = [(leaf.nodeName(), leaf.output().toString()) for leaf in leaves]
    assert any(name == "InMemoryTableScan" for name, _ in read), read
    records = [(name, output) for name, output in read if "amount" in output]  # a payload column
    assert all(name == "InMemoryTableScan" for name, _ in records), records
    result.release()


def test_a_far_ticks_read_filters_the_archives_own_event_time(spark, tmp_path):
    # A Delta archive of two files: p0 at et 100, 120.999, 300.9 and 50 ms (offsets 0-3),
    # then offsets 4-5 at 10,150 and 10,050 ms. Ranges [121, 301) and [10,100, 10,200): the
    # first record of each is offset 2 (300.9 ms floors to 300) and offset 4; 120.999 ms
    # floors to 120, outside. The filter on the archive's own column reaches the reader
    # (Parquet and Delta skip what lies outside) and finds the same minima.
    path = str(tmp_path / "archive")
    for rows in ([(0, 100_000), (1, 120_999), (2, 300_900), (3, 50_000)],
                 [(4, 10_150_000), (5, 10_050_000)]):  # fmt: skip
        spark.createDataFrame(
            [(0, offset, micros, "a", 1.0) for offset, micros in rows],
            "partition int, offset long, micros long, user string, amount double",
        ).select(
            *["partition", "offset", F.timestamp_micros("micros").alias("event_time")],
            *["user", "amount"],
        ).write.format("delta").mode("append").save(path)
    job = StreamJob(
        topics=[ArchivedTopic("t", path=path)],
        keys=["user"],
        window=TumblingWindows(size_ms=100),
        aggregations=[Aggregation("amount", "sum", "amount")],
    )
    records, _ = job_records(spark, job, archive_time=True)
    # A job's other topic may have no range.
    ranges = {"t": [(121, 301), (10_100, 10_200)], "other": []}
    minima = thresholds.range_minima(records, ranges)
    assert sorted(tuple(r) for r in minima.collect()) == [
        ("t", 0, 121, 2, 300),
        ("t", 0, 10_100, 4, 10_150),
    ]
    plan = minima._jdf.queryExecution().executedPlan().toString()
    scan = next(line for line in plan.splitlines() if "FileScan" in line)
    assert re.search(r"DataFilters: \[.*\(event_time#\d+ >= 1970-01-01 00:00:00\.121\)", scan)


def test_pushed_ranges_cover_every_range_closest_merged_first():
    # Joined: [0, 20) (overlapping), [30, 40), [41, 50), [100, 110); gaps 10, 1, 50. Two
    # ranges at most: the gaps of 1 and 10 are closed.
    pairs = [(0, 10), (5, 20), (30, 40), (41, 50), (100, 110)]
    assert thresholds.merged_ranges(pairs, 2) == [(0, 50), (100, 110)]
    assert thresholds.merged_ranges(pairs, 10) == [(0, 20), (30, 40), (41, 50), (100, 110)]


# I = 100, T = 250: a partition goes idle at ceil_I(a) + I + 300 after a record read at a,
# unless its next record comes first, and at ceil_I(S) + 300 before its first, S the job's
# start; D2 = 0, so a record is read at its partition's highest event time so far. Only a
# block of 64 offsets over which that rises by more than I + 300 = 400 is read again.
BLOCKS_RISE = [(0, 0, 0), (0, 64, 400), (0, 128, 800)]  # p0 rises 400 per block


@pytest.mark.parametrize(
    ("rows", "periods"),
    [
        # p0 reads 400 at 400: idle at ceil(0) + 400 = 400 only if nothing came before it
        ([(0, 0, 0), (0, 1, 400), (1, 0, 100), (1, 1, 350)], set()),
        ([(0, 0, 0), (0, 1, 401), (1, 0, 100), (1, 1, 350)], {(0, 400, 1, 401)}),
        # a block rising 0 -> 300 -> 600 is read again: no jump over 400, no period
        ([(0, 0, 0), (0, 1, 300), (0, 2, 600)], set()),
        # p1 starts at 300: idle from ceil(S = 0) + 300 = 300 only if it started later
        ([(0, 0, 0), (0, 1, 400), (1, 0, 300)], set()),
        ([(0, 0, 0), (0, 1, 400), (1, 0, 301)], {(1, 300, 0, 301)}),
        # the archive ends at ceil(800) = 800; p1's last record at 400 goes idle at
        # ceil(400) + 400 = 800, not after: idle to the end; at 401, at 900
        ([*BLOCKS_RISE, (1, 0, 100), (1, 1, 400)], {(1, 800, None, None)}),
        ([*BLOCKS_RISE, (1, 0, 100), (1, 1, 401)], set()),
    ],
)
def test_idle_periods_read_again_only_the_blocks_rising_past_the_wait(spark, rows, periods):
    records = spark.createDataFrame(
        [("t", *row) for row in rows],
        f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {EVENT_TIME} long",
    )
    grouped = offsets.group_records(records, idle_starts(), highest=True)
    partitions = sorted({("t", row[0]) for row in rows})
    found = idle.idle_periods(grouped, records, partitions, 100, 250, 0)

    def as_set(idle):
        until = F.col(IDLE_UNTIL)["offset"]
        return {tuple(r) for r in idle.select(PARTITION, IDLE_FROM, until, WAKES_AT).collect()}

    assert as_set(found) == periods
    # the sorted path's periods, from each record's processing time
    highest, read_at = {}, []
    for partition, offset, et in sorted(rows):
        highest[partition] = max(highest.get(partition, et), et)
        read_at.append(("t", partition, offset, highest[partition]))
    timed = spark.createDataFrame(
        read_at, f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {PROCESSING_TIME} long"
    )
    assert as_set(idleness.idle_periods(timed, 100, 250)) == periods
    grouped.unpersist()


def idle_starts() -> BucketStarts:
    return BucketStarts(TumblingWindows(1000), WatermarkStrategy(interval_ms=100), {"t": 0}, 0)


@pytest.mark.parametrize(("second", "declined"), [(400, False), (401, True)])
def test_idle_periods_decline_past_the_blocks_they_may_read_again(
    spark, monkeypatch, second, declined
):
    # No block may be read again: p0's block rising from 0 to 401 (more than 400) makes the
    # strategy decline; rising to 400, it reads nothing again, and the partitions' first and
    # last blocks (two per partition) are not counted against the limit.
    monkeypatch.setattr(idle, "MAX_BLOCKS_READ_AGAIN", 0)
    rows = [(0, 0, 0), (0, 1, second), (1, 0, 100), (1, 1, 350)]
    records = spark.createDataFrame(
        [("t", *row) for row in rows],
        f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {EVENT_TIME} long",
    )
    grouped = offsets.group_records(records, idle_starts(), highest=True)
    partitions = [("t", 0), ("t", 1)]
    if declined:
        with pytest.raises(StrategyDeclined, match="more than 0 blocks of 64 offsets"):
            idle.idle_periods(grouped, records, partitions, 100, 250, 0)
    else:
        assert idle.idle_periods(grouped, records, partitions, 100, 250, 0).count() == 0
    grouped.unpersist()
