"""Flink's MergingWindowSet rules, in pure Python (no Spark): hand-computed expectations.

Positions are records at their processing time in partition 0 (offset = the time), ticks
where the watermark changes.
"""

from __future__ import annotations

import math

from feast_stream_backfill.aggregations import FUNCTION
from feast_stream_backfill.merging_window_set import (
    MergingWindowSet,
    ProcessingClock,
    WatermarkTimeline,
)
from feast_stream_backfill.processing_order import Position
from feast_stream_backfill.rules import DROPPED, WAITING
from feast_stream_backfill.triggers import (
    LATE,
    ON_TIME,
    PENDING,
    PER_RECORD,
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)

SUM_MAX = [FUNCTION["sum"], FUNCTION["max"]]


def at(time: int) -> Position:
    return Position.record(time, "t", 0, time)


def timeline(*changes: tuple[int, int]) -> WatermarkTimeline:
    """Watermark changes on ticks: ``(tick time, watermark from then on)``."""
    return WatermarkTimeline([Position.tick(t) for t, _ in changes], [w for _, w in changes])


def test_touching_sessions_merge_and_fire_once_on_time():
    # gap 10: [0, 10) and [10, 20) touch (TimeWindow.intersects), [25, 35) does not.
    # W reaches 19 (maxTs of [0, 20)) at tick 40, 34 at tick 50.
    sessions = MergingWindowSet(10, EventTimeTrigger(), 0, SUM_MAX, timeline((40, 19), (50, 34)))
    assert sessions.add(0, [1.0, 1.0], at(1)) == WAITING
    assert sessions.add(10, [2.0, 2.0], at(2)) == WAITING
    assert sessions.add(25, [4.0, 4.0], at(3)) == WAITING
    sessions.finish()
    assert [
        (f.start, f.end, f.at, f.label, f.record_count, f.values) for f in sessions.firings
    ] == [
        (0, 20, Position.tick(40), ON_TIME, 2, (3.0, 2.0)),
        (25, 35, Position.tick(50), ON_TIME, 1, (4.0, 4.0)),
    ]
    assert sessions.counts[ON_TIME] == 3 and sessions.counts[PENDING] == 0


def test_late_record_joins_a_live_session_then_a_lone_one_is_dropped():
    # L = 0. W = 20 from tick 30. A session [15, 25) is live (maxTs 24 > 20).
    # A record at et 8 alone ([8, 18), maxTs 17 <= 20) would be dropped, but it touches
    # [15, 25): merged [8, 25) is not late, so it joins and waits; so does et 0 ([0, 10)
    # touches [8, 25)). A record at et -20 ([-20, -10)) touches nothing: dropped, counted in
    # its own window.
    sessions = MergingWindowSet(10, EventTimeTrigger(), 0, SUM_MAX, timeline((30, 20)))
    assert sessions.add(15, [1.0, 1.0], at(16)) == WAITING
    assert sessions.add(8, [2.0, 2.0], at(31)) == WAITING
    assert sessions.add(0, [4.0, 4.0], at(32)) == WAITING
    assert sessions.add(-20, [8.0, 8.0], at(33)) == DROPPED
    sessions.finish()
    assert sessions.firings == []  # the watermark never reaches 24: nothing fires
    assert sessions.dropped == {-20: 1}
    assert sessions.counts[PENDING] == 3 and sessions.counts[DROPPED] == 1


def test_allowed_lateness_fires_late_with_everything_held_and_expires():
    # L = 10. [0, 10) fires on time at tick 20 (W = 9); another record at et 0 (W = 9 >= maxTs
    # 9, < 9 + 10) is late: it fires at once with both records; from tick 40 (W = 19 >= 9 + 10)
    # the session's state is gone and a third record at et 0 is dropped.
    sessions = MergingWindowSet(10, EventTimeTrigger(10), 10, SUM_MAX, timeline((20, 9), (40, 19)))
    assert sessions.add(0, [1.0, 1.0], at(1)) == WAITING
    assert sessions.add(0, [2.0, 2.0], at(21)) == LATE
    assert sessions.add(0, [4.0, 4.0], at(41)) == DROPPED
    sessions.finish()
    assert [(f.start, f.end, f.at, f.by_record, f.label, f.values) for f in sessions.firings] == [
        (0, 10, Position.tick(20), False, ON_TIME, (1.0, 1.0)),
        (0, 10, at(21), True, LATE, (3.0, 2.0)),
    ]
    assert (sessions.counts[ON_TIME], sessions.counts[LATE], sessions.counts[DROPPED]) == (1, 1, 1)


def test_per_record_and_processing_time_sessions():
    per_record = MergingWindowSet(10, PerRecordTrigger(), 0, SUM_MAX, ProcessingClock())
    assert per_record.add(100, [1.0, 1.0], at(100)) == PER_RECORD
    assert per_record.add(105, [2.0, 2.0], at(105)) == PER_RECORD
    assert [(f.start, f.end, f.at, f.values) for f in per_record.firings] == [
        (100, 110, at(100), (1.0, 1.0)),
        (100, 115, at(105), (3.0, 2.0)),
    ]
    # Processing time: [100, 115) fires when the clock passes maxTs 114, at 115, before the
    # record read at 115 (which opens a new session: the old one's state is gone).
    clock = MergingWindowSet(10, ProcessingTimeTrigger(), 0, SUM_MAX, ProcessingClock())
    clock.add(100, [1.0, 1.0], at(100))
    clock.add(105, [2.0, 2.0], at(105))
    clock.add(115, [4.0, 4.0], at(115))
    clock.finish()
    assert [(f.start, f.end, f.at, f.values) for f in clock.firings] == [
        (100, 115, Position.clock(114), (3.0, 2.0)),
        (115, 125, Position.clock(124), (4.0, 4.0)),
    ]


def test_accumulators_skip_nulls_and_propagate_nan_as_java_does():
    functions = [FUNCTION[f] for f in ("sum", "count", "mean", "min", "max")]
    sessions = MergingWindowSet(10, PerRecordTrigger(), 0, functions, ProcessingClock())
    sessions.add(0, [None] * 5, at(0))
    sessions.add(1, [2.0] * 5, at(1))
    sessions.add(2, [math.nan] * 5, at(2))
    first, second, third = (f.values for f in sessions.firings)
    assert first == (None, 0, None, None, None)  # no value yet: SQL's nulls, count 0
    assert second == (2.0, 1, 2.0, 2.0, 2.0)
    assert third[1] == 2 and all(math.isnan(v) for v in third[:1] + third[2:])
