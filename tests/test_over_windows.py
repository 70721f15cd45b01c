"""OVER windows (Flink SQL's ``OVER (... {RANGE | ROWS} BETWEEN {p | UNBOUNDED} PRECEDING AND
CURRENT ROW)``, ordered by event time, and the bounded frames by processing time),
hand-computed: the backfill and the reference simulator against the same figures.

Both archives are one partition read in order (D1 = D2 = 0: a record is read at the highest
event time so far), ticks every ``I`` ms from the first multiple at or after the first record,
the watermark ``highest - B - 1``.
"""

from __future__ import annotations

import pytest

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    OverWindows,
    PerRecordTrigger,
    ProcessingTimeTrigger,
    StreamJob,
    WatermarkStrategy,
    backfill,
    rules,
)
from tests.conftest import archive, collect_log
from tests.reference_simulator import Job, Record, simulate

#: RANGE 100 PRECEDING, B = 9, I = 50. (offset, event time, amount), key "a":
#: read at 1000, 1100, 1100, 1150, 1200, 1200, 1200, 1300, 1300.
WAITING_ROWS = [
    (0, 1000, 1.0),
    (1, 1100, 2.0),
    (2, 1000, 4.0),  # the time of offset 0: both are written when 1000 fires
    (3, 1150, 16.0),
    (4, 1200, 64.0),
    (5, 1050, 32.0),  # at or before 1100, the key's last timer: dropped
    (6, 1120, 128.0),  # behind the watermark (1140) but after 1100: written at the next rise
    (7, 1300, 256.0),  # its timer never fires: pending
    (8, 1151, 512.0),  # dropped: a stale cleanup timer at 1151 moved lastTriggeringTs
]
#: (start, end, emit time, sequence, firing, count, sum, min, max) of key "a".
WAITING_LOG = [
    # tick 1100, W = 1090: the two rows at 1000, each written with both
    (900, 1001, 1100, 0, "on_time", 2, 5.0, 1.0, 4.0),
    (900, 1001, 1100, 1, "on_time", 2, 5.0, 1.0, 4.0),
    # tick 1150, W = 1140: 1100 with 1000 (exactly 100 before: in range)
    (1000, 1101, 1150, 0, "on_time", 3, 7.0, 1.0, 4.0),
    # tick 1200, W = 1190: 1120 (the rows at 1000 retracted: 1120 - 1000 > 100), then 1150;
    # then the cleanup timer 1000 + 150 + 1 = 1151 left behind when 1100 renewed it: no rows,
    # but lastTriggeringTs = 1151
    (1020, 1121, 1200, 0, "on_time", 2, 130.0, 2.0, 128.0),
    (1050, 1151, 1200, 1, "on_time", 3, 146.0, 2.0, 128.0),
    # tick 1300, W = 1290: 1200 with 1100, 1120, 1150
    (1100, 1201, 1300, 0, "on_time", 4, 210.0, 2.0, 128.0),
]
WAITING_DROPPED = {("a", 950): 1, ("a", 1051): 1}

#: RANGE 10 PRECEDING, B = 0, I = 10. (offset, event time, key, amount): read at 100, 105, 112,
#: 200, 210, 210.
CLEARED_ROWS = [
    (0, 100, "a", 0.1),
    (1, 105, "a", 0.2),
    (2, 112, "a", 0.7),
    (3, 200, "b", 1.0),
    (4, 210, "b", 1.0),
    # a's state was cleared at 128 (tick 200): lastTriggeringTs is 0 again, so 120 is taken
    # (it was 128: dropped otherwise) and aggregated alone (112 would be in range)
    (5, 120, "a", 2.0),
]
CLEARED_LOG = [
    ("a", 90, 101, 110, 0, "on_time", 1, 0.1, 0.1, 0.1),
    ("a", 95, 106, 120, 0, "on_time", 2, 0.1 + 0.2, 0.1, 0.2),
    # 100 retracted from the running sum, then 112 added, in Flink's order: 0.9, where the
    # sum of 0.2 and 0.7 afresh is 0.8999999999999999. Then the cleanup timer: 112 + 16 = 128
    ("a", 102, 113, 200, 0, "on_time", 2, 0.1 + 0.2 - 0.1 + 0.7, 0.2, 0.7),
    ("a", 110, 121, 210, 0, "on_time", 1, 2.0, 2.0, 2.0),
    ("b", 190, 201, 210, 0, "on_time", 1, 1.0, 1.0, 1.0),
]


def _job(spark, rows: list[tuple], window: OverWindows, bound: int, interval: int) -> StreamJob:
    by_clock = window.domain == "processing"
    return StreamJob(
        topics=[ArchivedTopic("clicks", dataframe=archive(spark, rows))],
        keys=["user"],
        window=window,
        aggregations=[Aggregation("amount", f, f) for f in ("sum", "min", "max")],
        watermark=WatermarkStrategy(out_of_orderness_ms=bound, interval_ms=interval),
        trigger=ProcessingTimeTrigger() if by_clock else EventTimeTrigger(),
    )


def _simulated(rows: list[tuple], window: OverWindows, bound: int, interval: int) -> tuple:
    records = [Record("clicks", p, o, et, key, v) for p, o, et, key, v in rows]
    counts: dict[str, int] = {}
    frame = Job(
        size=1,
        over=window.preceding_ms if window.frame == "range" and not window.unbounded else None,
        over_rows=window.preceding_rows,
        over_unbounded=window.frame if window.unbounded else "",
        domain=window.domain,
        over_ttl=window.state_ttl_ms or 0,
        bound=bound,
        interval=interval,
    )
    emissions, dropped = simulate(records, frame, counts)
    return sorted(emissions, key=_as_written), dropped, counts


def _backfilled(spark, rows: list[tuple], window: OverWindows, bound: int, interval: int) -> tuple:
    result = backfill(spark, _job(spark, rows, window, bound, interval))
    try:
        emissions, dropped = collect_log(result)
        counts = {k.removeprefix("records_"): v for k, v in result.stats.items()}
    finally:
        result.release()
    return sorted(emissions, key=_as_written), dropped, counts


def _as_written(emission: tuple) -> tuple:
    """Per key, by (emit time, sequence): the order the job wrote its rows in."""
    return emission[0], emission[3], emission[4]


RUNS = {"backfill": _backfilled, "simulator": lambda spark, *args: _simulated(*args)}


@pytest.mark.parametrize("run", list(RUNS))
def test_a_row_waits_for_the_watermark_to_rise_to_it_and_is_dropped_behind_its_keys_last_timer(
    spark, run
):
    rows = [(0, o, et, "a", v) for o, et, v in WAITING_ROWS]
    emissions, dropped, counts = RUNS[run](spark, rows, OverWindows(100), 9, 50)
    assert sorted(emissions) == [("a", *e) for e in WAITING_LOG]
    assert dropped == WAITING_DROPPED
    assert (counts["on_time"], counts["dropped"], counts["pending"]) == (6, 2, 1)


@pytest.mark.parametrize("run", list(RUNS))
def test_a_sum_is_retracted_row_by_row_and_a_cleared_key_starts_afresh(spark, run):
    rows = [(0, o, et, key, v) for o, et, key, v in CLEARED_ROWS]
    emissions, dropped, counts = RUNS[run](spark, rows, OverWindows(10), 0, 10)
    assert sorted(emissions) == CLEARED_LOG
    assert CLEARED_LOG[2][7] != 0.2 + 0.7  # the figure shows the order of the operations
    assert dropped == {}
    assert (counts["on_time"], counts["dropped"], counts["pending"]) == (5, 0, 1)


def test_over_windows_fire_by_the_watermark_alone(spark):
    topic = ArchivedTopic("clicks", dataframe=archive(spark, [(0, 0, 1, "a", 1.0)]))
    with pytest.raises(ValueError, match=r"OVER windows .* EventTimeTrigger\(0\)"):
        StreamJob(
            topics=[topic],
            keys=["user"],
            window=OverWindows(100),
            aggregations=[Aggregation("amount", "sum", "sum")],
            trigger=EventTimeTrigger(50),
        )
    with pytest.raises(ValueError, match="preceding_ms must be >= 0"):
        OverWindows(-1)
    with pytest.raises(ValueError, match="preceding_rows must be >= 0"):
        OverWindows(frame="rows", preceding_rows=-1)
    with pytest.raises(ValueError, match="a ROWS frame is bounded by preceding_rows"):
        OverWindows(100, frame="rows")
    with pytest.raises(ValueError, match="a RANGE frame is bounded by preceding_ms"):
        OverWindows(preceding_rows=3)


def test_the_replay_takes_the_range_from_the_rules_in_sparks_workers(spark, monkeypatch):
    """``rules.over_start`` varied in the driver (the range reaching 50 ms further back) is
    followed where the replay runs: the waiting archive's rows keep the rows at 1000 longer."""
    monkeypatch.setattr(rules, "over_start", lambda time, preceding: time - (preceding + 50))
    rows = [(0, o, et, "a", v) for o, et, v in WAITING_ROWS]
    emissions, dropped, _ = _backfilled(spark, rows, OverWindows(100), 9, 50)
    assert sorted(emissions) == [
        ("a", 850, 1001, 1100, 0, "on_time", 2, 5.0, 1.0, 4.0),
        ("a", 850, 1001, 1100, 1, "on_time", 2, 5.0, 1.0, 4.0),
        ("a", 950, 1101, 1150, 0, "on_time", 3, 7.0, 1.0, 4.0),
        ("a", 970, 1121, 1200, 0, "on_time", 4, 135.0, 1.0, 128.0),
        ("a", 1000, 1151, 1200, 1, "on_time", 5, 151.0, 1.0, 128.0),
        ("a", 1050, 1201, 1300, 0, "on_time", 4, 210.0, 2.0, 128.0),
    ]
    assert dropped == {("a", 900): 1, ("a", 1001): 1}


#: ROWS 1 PRECEDING over the waiting archive (B = 9, I = 50): each row written with the one
#: kept before it, in time and then arrival order; the same drop rule as RANGE, no cleanup.
ROWS_LOG = [
    # tick 1100, W = 1090: the rows at 1000 one by one, the second with the first
    (1000, 1001, 1100, 0, "on_time", 1, 1.0, 1.0, 1.0),
    (1000, 1001, 1100, 1, "on_time", 2, 5.0, 1.0, 4.0),
    # tick 1150, W = 1140: 1100, the frame full: 1.0 retracted before 2.0 is added
    (1000, 1101, 1150, 0, "on_time", 2, 6.0, 2.0, 4.0),
    # tick 1200, W = 1190: 1120 (behind W, after 1100: kept), then 1150
    (1100, 1121, 1200, 0, "on_time", 2, 130.0, 2.0, 128.0),
    (1120, 1151, 1200, 1, "on_time", 2, 144.0, 16.0, 128.0),
    # tick 1300, W = 1290: 1151 (after 1150, the last timer: no cleanup timer moved it), 1200
    (1150, 1152, 1300, 0, "on_time", 2, 528.0, 16.0, 512.0),
    (1151, 1201, 1300, 1, "on_time", 2, 576.0, 64.0, 512.0),
]


@pytest.mark.parametrize("run", list(RUNS))
def test_a_rows_frame_writes_each_row_with_the_rows_kept_before_it(spark, run):
    rows = [(0, o, et, "a", v) for o, et, v in WAITING_ROWS]
    window = OverWindows(frame="rows", preceding_rows=1)
    emissions, dropped, counts = RUNS[run](spark, rows, window, 9, 50)
    assert emissions == [("a", *e) for e in ROWS_LOG]  # in the order written
    assert dropped == {("a", 1050): 1}
    assert (counts["on_time"], counts["dropped"], counts["pending"]) == (7, 1, 1)


#: UNBOUNDED PRECEDING over the waiting archive: every row of the key so far; a row the
#: watermark has reached is dropped (1050 and 1120 at W = 1140, 1151 at W = 1190).
UNBOUNDED_LOG = {
    "range": [
        (1000, 1001, 1100, 0, "on_time", 2, 5.0, 1.0, 4.0),  # both rows at 1000, each with both
        (1000, 1001, 1100, 1, "on_time", 2, 5.0, 1.0, 4.0),
        (1000, 1101, 1150, 0, "on_time", 3, 7.0, 1.0, 4.0),
        (1000, 1151, 1200, 0, "on_time", 4, 23.0, 1.0, 16.0),
        (1000, 1201, 1300, 0, "on_time", 5, 87.0, 1.0, 64.0),
    ],
    "rows": [
        (1000, 1001, 1100, 0, "on_time", 1, 1.0, 1.0, 1.0),  # one by one
        (1000, 1001, 1100, 1, "on_time", 2, 5.0, 1.0, 4.0),
        (1000, 1101, 1150, 0, "on_time", 3, 7.0, 1.0, 4.0),
        (1000, 1151, 1200, 0, "on_time", 4, 23.0, 1.0, 16.0),
        (1000, 1201, 1300, 0, "on_time", 5, 87.0, 1.0, 64.0),
    ],
}


@pytest.mark.parametrize("frame", ["range", "rows"])
@pytest.mark.parametrize("run", list(RUNS))
def test_an_unbounded_frame_drops_the_rows_the_watermark_has_reached(spark, run, frame):
    rows = [(0, o, et, "a", v) for o, et, v in WAITING_ROWS]
    emissions, dropped, counts = RUNS[run](spark, rows, OverWindows(frame=frame), 9, 50)
    assert emissions == [("a", *e) for e in UNBOUNDED_LOG[frame]]
    assert dropped == {("a", 1050): 1, ("a", 1120): 1, ("a", 1151): 1}
    assert (counts["on_time"], counts["dropped"], counts["pending"]) == (5, 3, 1)


#: Ordered by processing time, one partition, key "a". (offset, event time, amount): read at
#: 1000, 1000, 1001, 1050, 1050 (event time 990: behind the watermark, which nothing reads),
#: 1101, 1200, 1500.
CLOCK_ROWS = [
    (0, 1000, 1.0),
    (1, 1000, 2.0),
    (2, 1001, 4.0),
    (3, 1050, 8.0),
    (4, 990, 16.0),
    (5, 1101, 32.0),
    (6, 1200, 128.0),
    (7, 1500, 64.0),
]
#: RANGE 100: a millisecond's rows wait for a timer set for the next (fired 1 ms after it, so
#: after the next millisecond's records), each written with the rows read in [t - 100, t].
CLOCK_RANGE_LOG = [
    # the rows read at 1000, at 1002: the row read at 1001 has come, and is not in them
    (900, 1001, 1002, 0, "on_time", 2, 3.0, 1.0, 2.0),
    (900, 1001, 1002, 1, "on_time", 2, 3.0, 1.0, 2.0),
    (901, 1002, 1003, 0, "on_time", 3, 7.0, 1.0, 4.0),
    (950, 1051, 1052, 0, "on_time", 5, 31.0, 1.0, 16.0),
    (950, 1051, 1052, 1, "on_time", 5, 31.0, 1.0, 16.0),
    # the rows read at 1000 retracted (before 1101 - 100), the one read at 1001 kept
    (1001, 1102, 1103, 0, "on_time", 4, 60.0, 4.0, 32.0),
    (1100, 1201, 1202, 0, "on_time", 2, 160.0, 32.0, 128.0),
    # the key's state was cleared at 1352 (cleanup 1200 + 151, fired 1 ms after it)
    (1400, 1501, 1502, 0, "on_time", 1, 64.0, 64.0, 64.0),
]
#: ROWS 1 with a state TTL of 100: each row written as it is read, with the one before it;
#: the cleanup timer, at 1.5 TTL after the row that set it, moves when a row comes within the
#: TTL of it (1050: 1150 + 0 is not within; 1101 moves it to 1251, 1200 to 1350, deleting the
#: one before), and clears the key 1 ms after it.
CLOCK_ROWS_LOG = [
    (1000, 1001, 1000, 0, "on_time", 1, 1.0, 1.0, 1.0),
    (1000, 1001, 1000, 1, "on_time", 2, 3.0, 1.0, 2.0),
    (1000, 1002, 1001, 0, "on_time", 2, 6.0, 2.0, 4.0),
    (1001, 1051, 1050, 0, "on_time", 2, 12.0, 4.0, 8.0),
    (1050, 1051, 1050, 1, "on_time", 2, 24.0, 8.0, 16.0),
    (1050, 1102, 1101, 0, "on_time", 2, 48.0, 16.0, 32.0),
    # not cleared at 1252: that timer was deleted when 1200 moved it to 1350
    (1101, 1201, 1200, 0, "on_time", 2, 160.0, 32.0, 128.0),
    (1500, 1501, 1500, 0, "on_time", 1, 64.0, 64.0, 64.0),
]


#: ROWS 0 without a TTL: Flink's function loses track of its oldest row when a retraction
#: leaves none (its smallest time becomes Long.MAX_VALUE), so the third row retracts nothing
#: and from then on the frame holds each row with the one before it.
CLOCK_ROWS_0_LOG = [
    (1000, 1001, 1000, 0, "on_time", 1, 1.0, 1.0, 1.0),
    (1000, 1001, 1000, 1, "on_time", 1, 2.0, 2.0, 2.0),
    (1000, 1002, 1001, 0, "on_time", 2, 6.0, 2.0, 4.0),
    (1001, 1051, 1050, 0, "on_time", 2, 12.0, 4.0, 8.0),
    (1050, 1051, 1050, 1, "on_time", 2, 24.0, 8.0, 16.0),
    (1050, 1102, 1101, 0, "on_time", 2, 48.0, 16.0, 32.0),
    (1101, 1201, 1200, 0, "on_time", 2, 160.0, 32.0, 128.0),
    (1200, 1501, 1500, 0, "on_time", 2, 192.0, 64.0, 128.0),
]


@pytest.mark.parametrize("run", list(RUNS))
@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (OverWindows(100, "processing"), CLOCK_RANGE_LOG),
        (OverWindows(None, "processing", "rows", 1, 100), CLOCK_ROWS_LOG),
        (OverWindows(None, "processing", "rows", 0), CLOCK_ROWS_0_LOG),
    ],
    ids=["range", "rows", "rows-0"],
)
def test_a_processing_time_frame_is_placed_and_fired_by_the_clock(spark, run, window, expected):
    rows = [(0, o, et, "a", v) for o, et, v in CLOCK_ROWS]
    emissions, dropped, counts = RUNS[run](spark, rows, window, 0, 50)
    assert emissions == [("a", *e) for e in expected]
    assert dropped == {}
    assert (counts["on_time"], counts["dropped"], counts["pending"]) == (8, 0, 0)


def test_a_processing_time_over_window_is_bounded_and_fired_by_the_clock(spark):
    topic = ArchivedTopic("clicks", dataframe=archive(spark, [(0, 0, 1, "a", 1.0)]))
    with pytest.raises(ValueError, match="fires event-time windows, not processing-time ones"):
        StreamJob(
            topics=[topic],
            keys=["user"],
            window=OverWindows(100, "processing"),
            aggregations=[Aggregation("amount", "sum", "sum")],
        )
    with pytest.raises(ValueError, match=r"ProcessingTimeTrigger\(\), not PerRecordTrigger"):
        StreamJob(
            topics=[topic],
            keys=["user"],
            window=OverWindows(100, "processing"),
            aggregations=[Aggregation("amount", "sum", "sum")],
            trigger=PerRecordTrigger(),
        )
    with pytest.raises(ValueError, match="needs a bounded frame"):
        OverWindows(domain="processing")
    with pytest.raises(ValueError, match="processing-time ROWS frame only"):
        OverWindows(None, "event", "rows", 1, 100)
    with pytest.raises(ValueError, match="processing-time ROWS frame only"):
        OverWindows(100, "processing", state_ttl_ms=100)
