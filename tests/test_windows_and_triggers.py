"""Sliding and processing-time windows, per-record firing, MAX combining: hand-computed on the
archive of tests/test_event_time_windows.py (read its docstring first)::

    key a: p0 et 1 ($1), 4 ($2), 12 ($4), 25 ($8) at pt = et;  p1 et 2 ($16) at pt 2,
           et 7 ($128) at pt 31;   key b: p1 et 30 ($32) at pt 30, et 31 ($64) at pt 31

Watermark ticks every 10 ms, B = 0: the MIN watermark reaches x when both partitions have
seen et >= x + 1; p1 only gets past 2 at pt 30.
"""

import re
from datetime import timezone

import pytest
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    CumulativeWindows,
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.columns import EVENT_TIME
from tests.test_event_time_windows import ROWS, ms, run


def sums(emissions):
    """(key, start, end, emit_time, sequence, firing, count, sum) with times in epoch ms."""

    def to_ms(moment):
        return round(moment.replace(tzinfo=timezone.utc).timestamp() * 1000)

    return [(k, to_ms(s), to_ms(e), to_ms(at), *rest) for k, s, e, at, *rest in emissions]


def test_sliding_event_time_windows_fire_in_timer_order_and_drop_per_window(make_archive):
    # size 10, slide 5: a record is in 2 windows. Every window with end <= 25 needs both
    # partitions at et >= end: p1 gets there at pt 30, so all fire on tick 30, by maxTs.
    # The et-7 record (pt 31) is late for [0, 10) and [5, 15): dropped from both.
    emissions, dropped, _ = run(make_archive, window=SlidingWindows(10, 5))
    assert sums(emissions) == [
        ("a", -5, 5, 30, 0, "on_time", 3, 19.0),
        ("a", 0, 10, 30, 1, "on_time", 3, 19.0),
        ("a", 5, 15, 30, 2, "on_time", 1, 4.0),
        ("a", 10, 20, 30, 3, "on_time", 1, 4.0),
    ]
    assert [(k, s, n) for k, s, _, n in dropped] == [("a", ms(0), 1), ("a", ms(5), 1)]


def test_processing_time_windows_fire_when_the_clock_passes_max_ts(make_archive):
    # Windows by pt: a: [0,10) pt 1, 2, 4; [10,20) pt 12; [20,30) pt 25; [30,40) pt 31.
    # Each fires when the clock passes its maxTs: real Flink fires a processing-time timer for
    # t at t + 1 (ProcessingTimeServiceUtil.getProcessingTimeDelay), so at end, not at
    # maxTs. Late event times notwithstanding, nothing is dropped.
    emissions, dropped, _ = run(
        make_archive,
        window=TumblingWindows(10, domain="processing"),
        trigger=ProcessingTimeTrigger(),
    )
    assert sums(emissions) == [
        ("a", 0, 10, 10, 0, "on_time", 3, 19.0),
        ("a", 10, 20, 20, 0, "on_time", 1, 4.0),
        ("a", 20, 30, 30, 0, "on_time", 1, 8.0),
        ("a", 30, 40, 40, 0, "on_time", 1, 128.0),
        ("b", 30, 40, 40, 0, "on_time", 2, 96.0),
    ]
    assert dropped == []


def test_per_record_trigger_fires_every_record_until_the_window_closes(make_archive):
    # Each record fires its window at its pt with the running aggregate. [0, 10) closes at
    # the tick at 30 (W >= 9 + L, L = 0): the et-7 record read at pt 31 is dropped.
    emissions, dropped, stats = run(make_archive, trigger=PerRecordTrigger())
    assert sums(emissions) == [
        ("a", 0, 10, 1, 0, "per_record", 1, 1.0),
        ("a", 0, 10, 2, 0, "per_record", 2, 17.0),
        ("a", 0, 10, 4, 0, "per_record", 3, 19.0),
        ("a", 10, 20, 12, 0, "per_record", 1, 4.0),
        ("a", 20, 30, 25, 0, "per_record", 1, 8.0),
        ("b", 30, 40, 30, 0, "per_record", 1, 32.0),
        ("b", 30, 40, 31, 0, "per_record", 2, 96.0),
    ]
    assert [(k, s, n) for k, s, _, n in dropped] == [("a", ms(0), 1)]
    # no timer: nothing waits, so nothing is on time or pending
    assert stats == {
        "records_read": 8,
        "duplicates_removed": 0,
        "records_on_time": 0,
        "records_late": 0,
        "records_per_record": 7,
        "records_dropped": 1,
        "records_pending": 0,
    }


def test_cumulative_windows_fire_every_step_and_a_late_record_joins_those_not_fired(
    make_archive,
):
    # CUMULATE size 40, step 10: [0, 10), [0, 20), [0, 30), [0, 40), each holding every record
    # since 0. Two more records (c at et 60 on p0, et 61 on p1) move the watermark on: W = 24
    # at tick 30, 30 at tick 60, 59 at tick 70. a's et 7 (read at 31, W = 24) is late for
    # [0, 10) and [0, 20), which fired at 30, and joins [0, 30) and [0, 40). [0, 40) fires at
    # 70 with no record since [0, 30): the same value again. c's [40, 70) and [40, 80) wait.
    rows = [*ROWS, (0, 4, 60, "c", 256.0), (1, 4, 61, "c", 512.0)]
    emissions, dropped, stats = run(make_archive, rows, window=CumulativeWindows(40, 10))
    assert sums(emissions) == [
        ("a", 0, 10, 30, 0, "on_time", 3, 19.0),
        ("a", 0, 20, 30, 1, "on_time", 4, 23.0),
        ("a", 0, 30, 60, 0, "on_time", 6, 159.0),
        ("a", 0, 40, 70, 0, "on_time", 6, 159.0),
        ("b", 0, 40, 70, 0, "on_time", 2, 96.0),
    ]
    assert sorted(dropped) == [
        ("a", ms(0), ms(10), 1),
        ("a", ms(0), ms(20), 1),
    ]
    # (record, window) pairs: a's 17 on time (4 + 4 + 4 + 3 + 2), et 7's 2; b's 2; c's 4 wait.
    assert {k: stats[k] for k in ("records_on_time", "records_dropped", "records_pending")} == {
        "records_on_time": 21,
        "records_dropped": 2,
        "records_pending": 4,
    }


def test_cumulative_windows_take_their_domains_default_trigger_alone(make_archive):
    """Flink has cumulative windows in SQL only: no allowed lateness, no other trigger than
    the watermark's (over a rowtime) or the clock's (over a PROCTIME() column)."""
    topic = ArchivedTopic("clicks", dataframe=make_archive(ROWS))
    for domain, trigger, expected in [
        ("event", EventTimeTrigger(5), "cumulative windows .* EventTimeTrigger\\(0\\)"),
        ("event", PerRecordTrigger(), "cumulative windows .* EventTimeTrigger\\(0\\)"),
        ("processing", PerRecordTrigger(), "cumulative windows .* ProcessingTimeTrigger\\(\\)"),
    ]:
        with pytest.raises(ValueError, match=expected):
            StreamJob(
                topics=[topic],
                keys=["user"],
                aggregations=[Aggregation("amount", "sum", "amount_sum")],
                window=CumulativeWindows(40, 10, domain=domain),
                trigger=trigger,
            )
    with pytest.raises(ValueError, match="multiple of its step"):
        CumulativeWindows(40, 15)


def test_per_record_sliding_fires_latest_window_first(make_archive):
    # et 12 is in [10, 20) and [5, 15): Flink fires them latest start first.
    emissions, _, _ = run(make_archive, window=SlidingWindows(10, 5), trigger=PerRecordTrigger())
    at_12 = [e for e in sums(emissions) if e[3] == 12]
    assert at_12 == [
        ("a", 10, 20, 12, 0, "per_record", 1, 4.0),
        ("a", 5, 15, 12, 1, "per_record", 1, 4.0),
    ]


def test_per_record_firings_are_shuffled_once_by_key(make_archive):
    # The running aggregates (per key and window) and the emission log's numbering (per key
    # and instant) share one shuffle of the records, by key alone.
    topic = ArchivedTopic("clicks", dataframe=make_archive(ROWS))
    job = StreamJob(
        topics=[topic],
        keys=["user"],
        aggregations=[Aggregation("amount", "sum", "amount_sum")],
        window=SlidingWindows(10, 5),
        trigger=PerRecordTrigger(),
        watermark=WatermarkStrategy(interval_ms=10),
    )
    result = backfill(make_archive([]).sparkSession, job)
    plan = result.emissions._jdf.queryExecution().executedPlan().toString()
    top = plan.split("InMemoryTableScan")[0]  # above the cached records
    shuffles = re.findall(r"Exchange (hashpartitioning\([^)]*\))", top)
    assert len(shuffles) == 1 and re.fullmatch(r"hashpartitioning\(user#\d+, \d+\)", shuffles[0])
    result.release()


def test_max_combine_fires_on_the_first_partition_to_get_there(make_archive):
    # The seed's simplification: [0, 10) fires once ANY partition has et >= 10: p0 at pt 12,
    # so on tick 20 (not 30); [10, 20) and [20, 30) on tick 30 (p0 et 25, p1 et 30).
    emissions, dropped, _ = run(
        make_archive, watermark=WatermarkStrategy(interval_ms=10, combine="max")
    )
    assert sums(emissions) == [
        ("a", 0, 10, 20, 0, "on_time", 3, 19.0),
        ("a", 10, 20, 30, 0, "on_time", 1, 4.0),
        ("a", 20, 30, 30, 1, "on_time", 1, 8.0),
    ]
    assert [(k, s, n) for k, s, _, n in dropped] == [("a", ms(0), 1)]


def test_a_trigger_of_the_other_time_domain_is_refused(make_archive):
    topic = ArchivedTopic("t", dataframe=make_archive([(0, 0, 1, "a", 1.0)]))
    with pytest.raises(ValueError, match="EventTimeTrigger fires event-time windows"):
        StreamJob(
            topics=[topic],
            keys=["user"],
            aggregations=[Aggregation("amount", "sum", "s")],
            window=TumblingWindows(10, domain="processing"),
            trigger=EventTimeTrigger(),
        )


@pytest.mark.parametrize(("t2_bound", "fires_at"), [(None, 20), (15, 30), (25, None)])
def test_each_topic_has_its_own_out_of_orderness(make_archive, t2_bound, fires_at):
    # Window [0, 10), maxTs 9, job B = 0. t1 (et 1, 12) passes 9 + 0 + 1 = 10 at pt 12.
    # t2 (et 2, 20, 30) with B = 0 passes 10 at pt 20; with B = 15 it must reach
    # 9 + 15 + 1 = 25: et 30 at pt 30; with B = 25 it must reach 35: never.
    from feast_stream_backfill import backfill

    t1 = make_archive([(0, 0, 1, "a", 1.0), (0, 1, 12, "a", 2.0)])
    t2 = make_archive([(0, 0, 2, "a", 4.0), (0, 1, 20, "b", 8.0), (0, 2, 30, "b", 16.0)])
    job = StreamJob(
        topics=[
            ArchivedTopic("t1", dataframe=t1),
            ArchivedTopic("t2", out_of_orderness_ms=t2_bound, dataframe=t2),
        ],
        keys=["user"],
        window=TumblingWindows(10),
        watermark=WatermarkStrategy(interval_ms=10),
        aggregations=[Aggregation("amount", "sum", "s")],
    )
    emissions = backfill(t1.sparkSession, job).emissions.collect()
    fired = [(r.user, r.window_start, r.emit_time, r.s) for r in emissions]
    assert fired == ([] if fires_at is None else [("a", ms(0), ms(fires_at), 5.0)])


@pytest.mark.parametrize("size, slide, most", [(100, 30, 4), (90, 30, 3), (30, 100, 1)])
def test_most_windows_a_record_belongs_to(spark, size, slide, most):
    # Starts every 30 ms, 100 wide: et 0 is in [-90, 10), [-60, 40), [-30, 70), [0, 100); et 20
    # in three. 90 wide: always three. 30 wide every 100 ms: one, or none in the gaps.
    times = spark.range(300).select(F.col("id").alias(EVENT_TIME))
    window = SlidingWindows(size, slide)
    per_time = window.assign(times).groupBy(EVENT_TIME).count()
    assert per_time.agg(F.max("count")).first()[0] == most == window.most_windows
    assert TumblingWindows(size).most_windows == 1
