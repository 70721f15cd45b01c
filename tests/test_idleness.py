"""Idleness (``withIdleness(T)``), every expectation computed by hand, Spark and simulator alike.

All scenarios: ticks every I = 100 ms, T = 250 ms, B = 0, tumbling windows, one topic. Flink's
IdlenessTimer checks on ticks: the first tick with no new record starts the clock, a tick more
than T later marks the partition idle. After a last record at ``a`` that is the tick
``ceil_I(a) + I + (floor(T/I) + 1) * I`` = ``ceil_I(a) + 400``; before a partition's first
record, ``ceil_I(S) + 300`` with S the job's first processing time.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    Backfill,
    EventTimeTrigger,
    ProcessingTimeModel,
    SessionWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.columns import (
    IDLE_FROM,
    IDLE_UNTIL,
    OFFSET,
    PARTITION,
    PROCESSING_TIME,
    TOPIC,
    WAKES_AT,
)
from feast_stream_backfill.idleness import idle_periods
from feast_stream_backfill.strategies.aligned_unsorted import idle as unsorted_idle
from tests.reference_simulator import Job, Record, simulate

TICK, T = 100, 250


def spark_result(make_archive, rows, size, strategy, min_gap=0) -> Backfill:
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=make_archive(rows))],
        keys=["user"],
        window=TumblingWindows(size),
        aggregations=[Aggregation("amount", "sum", "sum")],
        trigger=EventTimeTrigger(),
        watermark=strategy,
        processing_time=ProcessingTimeModel(min_gap_ms=min_gap),
    )
    return backfill(make_archive([]).sparkSession, job)


def spark_log(make_archive, rows, size, strategy, min_gap=0):
    return logged(spark_result(make_archive, rows, size, strategy, min_gap))


def logged(result: Backfill):
    """(emissions as (user, start, end, emit time, record count), records pending)."""
    ms = F.unix_millis
    rows = result.emissions.select(
        "user", ms("window_start"), ms("window_end"), ms("emit_time"), "record_count"
    ).collect()
    return sorted(tuple(r) for r in rows), result.stats["records_pending"]


def simulated(rows, size, idleness, emission="periodic", interval=TICK, min_gap=0):
    records = [Record("t", p, o, et, k, v) for p, o, et, k, v in rows]
    job = Job(size=size, interval=interval, emission=emission, idleness=idleness, min_gap=min_gap)
    emissions, _ = simulate(records, job)
    return sorted((e[0], e[1], e[2], e[3], e[6]) for e in emissions)


# p1's only record is at 50: it goes idle at tick ceil(50) + 400 = 500; from then on p0 alone
# moves the watermark, and its record at 1100 fires both [0, 1000) windows at tick 1100.
# Without idleness p1 holds the watermark at 49 forever: nothing fires.
QUIET = [(0, 0, 100, "a", 1.0), (0, 1, 500, "a", 2.0), (0, 2, 1100, "a", 4.0), (1, 0, 50, "b", 8.0)]


def test_an_idle_partition_no_longer_holds_the_watermark_back(make_archive):
    expected = [("a", 0, 1000, 1100, 2), ("b", 0, 1000, 1100, 1)]
    assert simulated(QUIET, 1000, T) == expected
    idle = WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T)
    assert spark_log(make_archive, QUIET, 1000, idle) == (expected, 1)
    assert spark_log(make_archive, QUIET, 1000, WatermarkStrategy(interval_ms=TICK)) == ([], 4)


def test_idleness_needs_the_periodic_timer(make_archive):
    # Flink checks idleness in onPeriodicEmit: with I = 0 nothing ever goes idle.
    off = WatermarkStrategy(interval_ms=0, emission="on_event", idle_timeout_ms=T)
    assert simulated(QUIET, 1000, T, emission="on_event", interval=0) == []
    assert spark_log(make_archive, QUIET, 1000, off) == ([], 4)


def test_idleness_with_on_event_watermarks(make_archive):
    # p1 idle at tick 500 as above; p0's record at 1100 emits its watermark 1099 at once: the
    # windows fire at the record, not at a tick.
    on_event = WatermarkStrategy(interval_ms=TICK, emission="on_event", idle_timeout_ms=T)
    expected = [("a", 0, 1000, 1100, 2), ("b", 0, 1000, 1100, 1)]
    assert simulated(QUIET, 1000, T, emission="on_event") == expected
    assert spark_log(make_archive, QUIET, 1000, on_event) == (expected, 1)


# p1 starts late (first record at 2000): idle before it from tick ceil(S=100) + 300 = 400.
# p0 goes idle at ceil(100) + 400 = 500 (every partition idle: the watermark flushes to the
# MAX, 99), wakes at 1100 and alone fires [0, 1000) at tick 1100. p1's first record wakes it
# at 2000 while p0 (last record 1100) has been idle since 1500: [1000, 2000) fires at 2000.
# Without idleness p1 holds the watermark at -inf until 2000, then at min(1099, 1999).
LATE_START = [(0, 0, 100, "a", 1.0), (0, 1, 1100, "a", 2.0), (1, 0, 2000, "b", 4.0)]


def test_a_partition_that_has_produced_nothing_goes_idle_from_the_start(make_archive):
    expected = [("a", 0, 1000, 1100, 1), ("a", 1000, 2000, 2000, 1)]
    assert simulated(LATE_START, 1000, T) == expected
    idle = WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T)
    assert spark_log(make_archive, LATE_START, 1000, idle) == (expected, 1)
    held = WatermarkStrategy(interval_ms=TICK)
    assert spark_log(make_archive, LATE_START, 1000, held) == ([("a", 0, 1000, 2000, 1)], 2)


# With D1 = 100 p1's six records at et 100 are read at pt 100..600: p1 goes idle last (tick
# 1000) with the LOWER watermark, 99; p0 (et 400 at pt 400) went idle at 800 with 399. Flink
# 2.3's CombinedWatermarkStatus, every split idle, flushes to the MAX: W = 399 at tick 1000, so
# b's [0, 200) fires then, not when p0 wakes at 2000. a's [400, 600) fires at 2000.
FLUSH = [(1, o, 100, "b", 1.0) for o in range(6)] + [(0, 0, 400, "a", 2.0), (0, 1, 2000, "a", 4.0)]


def test_every_partition_idle_flushes_to_the_max_watermark(make_archive):
    expected = [("a", 400, 600, 2000, 1), ("b", 0, 200, 1000, 6)]
    assert simulated(FLUSH, 200, T, min_gap=100) == expected
    idle = WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T)
    assert spark_log(make_archive, FLUSH, 200, idle, min_gap=100) == (expected, 1)


@pytest.mark.parametrize("kind", [TumblingWindows(1000), SessionWindows(500)])
def test_idleness_across_topics_is_refused(make_archive, kind):
    job = StreamJob(
        topics=[ArchivedTopic(t, dataframe=make_archive(QUIET)) for t in ("t", "u")],
        keys=["user"],
        window=kind,
        aggregations=[Aggregation("amount", "sum", "sum")],
        watermark=WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T),
    )
    with pytest.raises(ValueError, match="idleness with several topics"):
        backfill(make_archive([]).sparkSession, job)


def test_idleness_is_refused_where_it_is_not_modelled():
    with pytest.raises(ValueError, match="MAX"):
        WatermarkStrategy(combine="max", idle_timeout_ms=T)
    with pytest.raises(ValueError, match="> 0"):
        WatermarkStrategy(idle_timeout_ms=0)


def periods(spark, read_at, interval, timeout):
    """:func:`idle_periods` of partitions given as their records' processing times, in
    offset order: ``(partition, idle from, offset of the waking record, its time)``."""
    rows = [("t", p, o, pt) for p, times in read_at.items() for o, pt in enumerate(times)]
    schema = f"{TOPIC} string, {PARTITION} int, {OFFSET} long, {PROCESSING_TIME} long"
    found = idle_periods(spark.createDataFrame(rows, schema), interval, timeout).collect()
    return sorted(
        (r[PARTITION], r[IDLE_FROM], r[IDLE_UNTIL] and r[IDLE_UNTIL]["offset"], r[WAKES_AT])
        for r in found
    )


# waits = (250 // 100 + 1) * 100 = 300; the job starts at S = 50 and the archive ends at the
# tick 1000 (its last record is at 960). p0: after 310 (tick 400) idle at 400 + 100 + 300 =
# 800, woken by 900; 120 -> 290 and 290 -> 310 cross a 300 ms cell without a period. p1 and
# p2: idle from ceil(S) + 300 = 400 until their first record; after it, p2 (tick 600) idle at
# 1000, the archive's end, for good; p1 (tick 700) at 1100, after the end: no period.
HAND = {0: [50, 120, 290, 310, 900, 960], 1: [650], 2: [560]}


def test_idle_periods_by_hand(spark):
    assert periods(spark, HAND, TICK, T) == [
        (0, 800, 4, 900),
        (1, 400, 0, 650),
        (2, 400, 0, 560),
        (2, 1000, None, None),
    ]


def successive(read_at, interval, timeout):
    """The rule record by record: after each record, idle at ``ceil_I(a) + I + waits`` unless
    the next record comes first or the archive ends (at the tick at or after its last
    record) before; before the first, at ``ceil_I(S) + waits``."""
    waits = (timeout // interval + 1) * interval
    ceil = lambda t: -(-t // interval) * interval  # noqa: E731
    start = min(times[0] for times in read_at.values())
    horizon = ceil(max(times[-1] for times in read_at.values()))
    found = []
    for p, times in read_at.items():
        if ceil(start) + waits < times[0]:
            found.append((p, ceil(start) + waits, 0, times[0]))
        for o, a in enumerate(times):
            went = ceil(a) + interval + waits
            if o + 1 < len(times) and went < times[o + 1]:
                found.append((p, went, o + 1, times[o + 1]))
            if o + 1 == len(times) and went <= horizon:
                found.append((p, went, None, None))
    return sorted(found)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    gaps=st.dictionaries(
        st.integers(0, 3), st.lists(st.integers(0, 900), min_size=1, max_size=12), min_size=1
    ),
    interval=st.sampled_from([1, 7, 100, 200]),
    timeout=st.integers(1, 700),
)
def test_idle_periods_equal_the_rule_record_by_record(spark, gaps, interval, timeout):
    read_at = {p: [int(t) for t in np.cumsum(g)] for p, g in gaps.items()}
    assert periods(spark, read_at, interval, timeout) == successive(read_at, interval, timeout)


# D1 = 0: p0 reads et 0 at 0, then 400 at 400; p1 100 at 100, 350 at 350. After its record at
# 0, p0 would go idle at ceil(0) + 400 = 400, but its next record is read at 400: never idle.
# W = min(399, 349) at tick 400 fires both [0, 200) windows; a's [400, 600) and b's
# [200, 400) stay pending. With p0's second record at et 401, p0 is idle at tick 400: W = 349
# fires them at 400 all the same, where without idleness p0 holds it at -1 until tick 500.
# Either way the records are not sorted (the strategy without a sort finds the period).
def steady(second: int) -> list[tuple]:
    return [
        (0, 0, 0, "a", 1.0),
        (0, 1, second, "a", 2.0),
        (1, 0, 100, "b", 4.0),
        (1, 1, 350, "b", 8.0),
    ]


STEADY_FIRED = [("a", 0, 200, 400, 1), ("b", 0, 200, 400, 1)]


@pytest.fixture
def sorted_reads(monkeypatch) -> list[int]:
    """One item per time the backfill sorts the records (``timed_records``)."""
    records_module = importlib.import_module("feast_stream_backfill.job_records")
    reads, timed = [], records_module.timed_records
    monkeypatch.setattr(
        records_module, "timed_records", lambda *args: reads.append(1) or timed(*args)
    )
    return reads


@pytest.mark.parametrize("second", [400, 401])
def test_idle_periods_need_no_sort(make_archive, sorted_reads, second):
    assert simulated(steady(second), 200, T) == STEADY_FIRED
    idle = WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T)
    assert spark_log(make_archive, steady(second), 200, idle) == (STEADY_FIRED, 2)
    held = WatermarkStrategy(interval_ms=TICK)
    fired_at = 500 if second == 401 else 400
    assert spark_log(make_archive, steady(second), 200, held)[0] == [
        ("a", 0, 200, fired_at, 1),
        ("b", 0, 200, fired_at, 1),
    ]
    assert not sorted_reads


def test_too_many_blocks_to_read_again_take_the_sorted_path(
    make_archive, monkeypatch, sorted_reads
):
    monkeypatch.setattr(unsorted_idle, "MAX_BLOCKS_READ_AGAIN", 0)
    strategy = WatermarkStrategy(interval_ms=TICK, idle_timeout_ms=T)
    result = spark_result(make_archive, steady(401), 200, strategy)
    assert logged(result) == (STEADY_FIRED, 2)
    assert result.ran == "aligned-in-order"
    assert result.stats["strategies_declined"] == 1
    assert sorted_reads
