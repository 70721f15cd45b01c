"""Watermarks, windows and triggers on one small archive, every expectation computed by hand.

Two partitions, tumbling 10 ms windows, B = 0 (a partition's watermark is maxEt - 1 ms), so
window [0, 10) (maxTs 9) fires once EVERY partition has seen an event time >= 10:

    p0: offsets 0..3, et  1,  4, 12, 25 -> pt  1,  4, 12, 25
    p1: offsets 0..3, et  2, 30, 31,  7 -> pt  2, 30, 31, 31

p0 reaches 10 at pt 12, but slow p1 only at pt 30: MIN across partitions holds the firing
back to 30. Window [10, 20) needs et >= 20: p0 at 25, p1 at 30 -> also 30. Windows [20, 30)
and [30, 40) need et >= 30 / 40 in p0, which never comes: they never fire.
"""

import importlib
from datetime import datetime, timezone

import pytest

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.columns import POSITION, SHARED_INSTANT, TARGET
from feast_stream_backfill.processing_order import STRUCT, Position
from feast_stream_backfill.triggers import LATE, ON_TIME, PER_RECORD
from feast_stream_backfill.watermarks import watermark_reaches
from feast_stream_backfill.window_operator import shared_instants

ROWS = [
    (0, 0, 1, "a", 1.0),
    (0, 1, 4, "a", 2.0),
    (0, 2, 12, "a", 4.0),
    (0, 3, 25, "a", 8.0),
    (1, 0, 2, "a", 16.0),
    (1, 1, 30, "b", 32.0),
    (1, 2, 31, "b", 64.0),
    (1, 3, 7, "a", 128.0),
]


def ms(t: int) -> datetime:
    """Epoch ms as Spark collects it: a naive UTC datetime."""
    return datetime.fromtimestamp(t / 1000, tz=timezone.utc).replace(tzinfo=None)


def run(make_archive, rows=ROWS, **job):
    topic = ArchivedTopic("clicks", dataframe=make_archive(rows))
    spec = StreamJob(
        topics=[topic],
        keys=["user"],
        aggregations=[
            Aggregation("amount", "sum", "amount_sum"),
            Aggregation("amount", "max", "amount_max"),
        ],
        **{
            "window": TumblingWindows(size_ms=10),
            "watermark": WatermarkStrategy(interval_ms=10),
            **job,
        },
    )
    result = backfill(make_archive([]).sparkSession, spec)
    emissions = [
        (
            r.user,
            r.window_start,
            r.window_end,
            r.emit_time,
            r.emit_sequence,
            r.firing,
            r.record_count,
            r.amount_sum,
        )
        for r in result.emissions.orderBy("user", "emit_time", "emit_sequence").collect()
    ]
    dropped = [tuple(r) for r in result.dropped.orderBy("user", "window_start").collect()]
    return emissions, dropped, result.stats


def test_slow_partition_holds_back_firing_and_late_record_is_dropped(make_archive):
    emissions, dropped, stats = run(make_archive)
    assert emissions == [
        # Both windows fire on the tick at 30; timers fire in maxTs order.
        ("a", ms(0), ms(10), ms(30), 0, "on_time", 3, 1.0 + 2.0 + 16.0),
        ("a", ms(10), ms(20), ms(30), 1, "on_time", 1, 4.0),
    ]
    # et 7 read at pt 31, after window [0, 10) fired at 30: dropped, and counted.
    assert dropped == [("a", ms(0), ms(10), 1)]
    assert stats == {
        "records_read": 8,
        "duplicates_removed": 0,
        "records_on_time": 4,
        "records_late": 0,
        "records_per_record": 0,
        "records_dropped": 1,
        "records_pending": 3,
    }


def test_record_at_the_ticks_millisecond_comes_before_the_tick(make_archive):
    # p1's et-7 record moved to offset 1 and et 30 to offset 2: both read at pt 30, the
    # instant of the tick that fires [0, 10). The record is processed first: not late.
    rows = [r for r in ROWS if r[0] == 0] + [
        (1, 0, 2, "a", 16.0),
        (1, 1, 30, "b", 32.0),
        (1, 2, 7, "a", 128.0),
    ]
    emissions, dropped, _ = run(make_archive, rows)
    assert emissions[0] == ("a", ms(0), ms(10), ms(30), 0, "on_time", 4, 147.0)
    assert dropped == []


def test_periodic_watermark_waits_for_the_next_tick(make_archive):
    # With Flink's default 200 ms interval the watermark reflecting pt 30 is emitted at
    # tick 200, so the record read at pt 31 is still in time.
    emissions, dropped, _ = run(make_archive, watermark=WatermarkStrategy(interval_ms=200))
    assert [e[3] for e in emissions] == [ms(200), ms(200)]
    assert emissions[0][6:] == (4, 147.0)
    assert dropped == []


def test_on_event_watermark_fires_right_after_the_record(make_archive):
    emissions, dropped, _ = run(
        make_archive, watermark=WatermarkStrategy(interval_ms=200, emission="on_event")
    )
    assert [e[3] for e in emissions] == [ms(30), ms(30)]
    assert dropped == [("a", ms(0), ms(10), 1)]


def test_allowed_lateness_fires_late_and_accumulates(make_archive):
    # L = 25: [0, 10) is cleaned up only when W >= 9 + 25 = 34, which never happens, so the
    # record read at pt 31 fires the window again at once, with all four records.
    emissions, dropped, stats = run(make_archive, trigger=EventTimeTrigger(allowed_lateness_ms=25))
    assert emissions == [
        ("a", ms(0), ms(10), ms(30), 0, "on_time", 3, 19.0),
        ("a", ms(10), ms(20), ms(30), 1, "on_time", 1, 4.0),
        ("a", ms(0), ms(10), ms(31), 0, "late", 4, 147.0),
    ]
    assert dropped == []
    assert stats["records_late"] == 1


def test_late_firing_and_timer_of_one_instant_are_numbered(make_archive):
    # L = 25. p0 reads et 40 (key c) at pt 40, then et 7 (key a, $256) also at pt 40: late for
    # [0, 10) (W = 30 < 9 + 25), it fires the window at once. The tick at 40 (W = min(39, 30)
    # = 30 >= 29) then fires a's [20, 30). One instant, one key: the record's firing first.
    rows = ROWS + [(0, 4, 40, "c", 512.0), (0, 5, 7, "a", 256.0)]
    emissions, _, _ = run(make_archive, rows, trigger=EventTimeTrigger(allowed_lateness_ms=25))
    assert [e for e in emissions if e[0] == "a"] == [
        ("a", ms(0), ms(10), ms(30), 0, "on_time", 3, 19.0),
        ("a", ms(10), ms(20), ms(30), 1, "on_time", 1, 4.0),
        ("a", ms(0), ms(10), ms(31), 0, "late", 4, 147.0),
        ("a", ms(0), ms(10), ms(40), 0, "late", 5, 403.0),
        ("a", ms(20), ms(30), ms(40), 1, "on_time", 1, 8.0),
    ]


def test_operator_delay_shifts_emit_time(make_archive):
    emissions, _, _ = run(make_archive, operator_delay_ms=3)
    assert [e[3] for e in emissions] == [ms(33), ms(33)]


def test_duplicates_count_once(make_archive):
    emissions, _, stats = run(make_archive, ROWS + [ROWS[0], ROWS[4]])
    assert stats["records_read"] == 10 and stats["duplicates_removed"] == 2
    assert emissions[0][6:] == (3, 19.0)


def test_mean_is_the_windows_sum_over_its_count(make_archive):
    # Key a, L = 25. [0, 10) holds et 1, 4 (p0) and 2 (p1): amounts 1, 2, 16, mean 19/3, on
    # time at 30; [10, 20) holds et 12 alone: 4, also at 30. The et-7 record (128) read at
    # pt 31 fires [0, 10) late with all four: (1 + 2 + 16 + 128) / 4 = 36.75. (Sums of small
    # integers are exact in doubles, so the means are exactly these quotients.)
    spec = StreamJob(
        topics=[ArchivedTopic("clicks", dataframe=make_archive(ROWS))],
        keys=["user"],
        window=TumblingWindows(size_ms=10),
        aggregations=[Aggregation("amount", "mean", "amount_mean")],
        watermark=WatermarkStrategy(interval_ms=10),
        trigger=EventTimeTrigger(allowed_lateness_ms=25),
    )
    result = backfill(make_archive([]).sparkSession, spec)
    emissions = result.emissions.where("user = 'a'").orderBy("emit_time", "emit_sequence")
    assert [
        (r.window_start, r.emit_time, r.firing, r.amount_mean) for r in emissions.collect()
    ] == [
        (ms(0), ms(30), "on_time", 19 / 3),
        (ms(10), ms(30), "on_time", 4.0),
        (ms(0), ms(31), "late", 36.75),
    ]


@pytest.mark.parametrize("interval", [0, -1])
def test_periodic_watermark_needs_a_positive_interval(interval):
    with pytest.raises(ValueError):
        WatermarkStrategy(interval_ms=interval)


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        # A grid of 6 ms: rises of watermarks 9 and 10 share a cell, as do 15 and 16.
        ([9, 15, 21], {9: (10, 0), 15: (16, 2), 21: (30, 4)}),
        # Target 16 makes the grid 1 ms: every rise is its own cell.
        ([9, 15, 16, 21], {9: (10, 0), 15: (16, 2), 16: (17, 3), 21: (30, 4)}),
        # Watermark 29 reaches the last target and nothing beyond; 30 is never reached.
        ([29, 30], {29: (30, 4)}),
    ],
)
def test_first_record_reaching_each_target(make_archive, targets, expected):
    """``watermark_reaches`` keeps one rise per cell of the targets' grid: the answer must be
    the first record whose watermark (on event, B = 0: et - 1) is >= the target, ties
    included. One partition, event times rising: W = 9, 10, 15, 16, 29 at offsets 0..4."""
    records_module = importlib.import_module("feast_stream_backfill.job_records")
    rows = [(0, offset, et, "a", 1.0) for offset, et in enumerate([10, 11, 16, 17, 30])]
    job = StreamJob(
        topics=[ArchivedTopic("clicks", dataframe=make_archive(rows))],
        keys=["user"],
        aggregations=[Aggregation("amount", "sum", "amount_sum")],
        window=TumblingWindows(size_ms=10),
    )
    spark = make_archive([]).sparkSession
    timed, _ = records_module.timed_records(spark, job)
    strategy = WatermarkStrategy(emission="on_event", interval_ms=0)
    wanted = spark.createDataFrame([(t,) for t in targets], "_target long")
    reaches = watermark_reaches(records_module.distinct_records(timed), wanted, strategy)
    found = {r._target: (r._pos.time, r._pos.offset) for r in reaches.collect()}
    assert found == expected
    timed.unpersist()


def test_only_instants_where_timers_meet_or_records_fire_are_numbered(spark):
    """The emission log numbers a key's firings within an instant only where it can have
    two: wherever a record fires (late or per record: None, every instant; a late firing and
    a timer of one instant in ``test_late_firing_and_timer_of_one_instant_are_numbered``), or
    at a time where the watermark reaches several targets (one tick fires two windows,
    sequences 0 and 1, in ``test_slow_partition_holds_back_firing_and_late_record_is_
    dropped``). Processing-time timers never meet."""

    def reaches(*at: Position):
        rows = list(enumerate(at))
        return spark.createDataFrame(rows, f"{TARGET} long, {POSITION} {STRUCT.simpleString()}")

    def shared(reached, counted) -> list[int] | None:
        found = shared_instants(spark, reached, counted)
        return None if found is None else sorted(r[SHARED_INSTANT] for r in found.collect())

    ticks = reaches(Position.tick(30), Position.tick(40), Position.tick(40), Position.tick(50))
    assert shared(ticks, {ON_TIME: 5, "pending": 2}) == [40]
    assert shared(ticks, {ON_TIME: 5, LATE: 1}) is None
    # on-event watermarks: two records of one millisecond are one instant
    records = reaches(Position.record(30, "t", 0, 4), Position.record(30, "t", 1, 9))
    assert shared(records, {ON_TIME: 5}) == [30]
    assert shared(reaches(Position.tick(30), Position.tick(40)), {ON_TIME: 5}) == []
    assert shared_instants(spark, None, {ON_TIME: 5}).count() == 0
    assert shared_instants(spark, None, {PER_RECORD: 3}) is None
