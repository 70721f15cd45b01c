"""The simple-session rules in numpy (no Spark): hand-computed classifications, the stretches a
key splits into, the aggregates' Java rules, and the timeline's column lookup against its
one-position one.

Rows are one key's records in processing order; ``W`` the watermark each sees; gap 10, no
lateness, a timer (``live_until`` 0) unless a test says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from feast_stream_backfill.merging_window_set import LONG_MIN, WatermarkTimeline
from feast_stream_backfill.processing_order import CLOCK, RECORD, TICK, Position
from feast_stream_backfill.session_groups import Column, aggregate, classify, stretches

GAP = 10


def _classify(times: list[int], watermarks: list[int], lateness: int = 0):
    starts = np.zeros(len(times), dtype=bool)
    starts[0] = True
    t, w = np.array(times), np.array(watermarks)
    return classify(starts, t, w, GAP, lateness, 0)


def test_records_in_order_join_then_open_a_session_a_gap_away():
    found = _classify([0, 5, 30], [-100, -100, -100])
    assert found.simple.all()
    assert not found.dropped.any()
    assert found.session.tolist() == [0, 0, 1]


def test_a_record_whose_window_and_key_are_gone_is_dropped():
    # W 200 >= 50 + 9 (its window closed) and >= 100 + 9 (the session holding 100 gone)
    found = _classify([100, 50], [0, 200])
    assert found.simple.all()
    assert found.dropped.tolist() == [False, True]


def test_records_behind_the_open_session_are_dropped_even_near_an_earlier_drop():
    # 1000 opens a session over 100's (gone at W 109); 20 and then 25 are closed and more than
    # a gap behind 1000. 25 lies within a gap of 20, dropped before it: only the accepted
    # records count, so 25 is dropped too (the replay agrees: dropped records hold no state).
    found = _classify([100, 1000, 20, 25], [0, 50, 900, 900])
    assert found.simple.all()
    assert found.dropped.tolist() == [False, False, True, True]
    assert found.session.tolist() == [0, 1, 1, 1]


def test_a_record_bridging_two_sessions_is_not_simple():
    # 8 touches both [0, 10) and [15, 25): the sessions merge, which the replay computes
    found = _classify([0, 15, 8], [-100, -100, -100])
    assert not found.simple.any()


def test_a_record_opening_a_session_that_is_already_late_is_not_simple():
    # 40 > 0 + gap opens a session, but W 60 >= 40 + 9: its timer fired at once (late)
    found = _classify([0, 40], [-100, 60], lateness=30)
    assert not found.simple.any()


def test_a_key_splits_where_it_holds_no_state():
    starts = np.array([True, False, False, True, False])
    t = np.array([0, 5, 100, 0, 5])
    w = np.array([-100, 12, 13, -100, 8])  # 12 >= 0 + 9: the state before it is gone
    assert stretches(starts, t, w, GAP, 0).tolist() == [True, True, False, True, False]
    # with lateness 5, the state of 0's session lives until W 14
    assert stretches(starts, t, w, GAP, 5).tolist() == [True, False, False, True, False]


def _column(values: list[float | None]) -> Column:
    return Column.from_arrow(pa.array(values, pa.float64()))


def _aggregate(function: str, values: list, sessions: list[int], cumulative: bool):
    rows = np.arange(len(values))
    result, null = aggregate(function, _column(values), rows, np.array(sessions), cumulative)
    return [None if n else float(v) for v, n in zip(result, null, strict=True)]


def test_aggregates_skip_nulls_and_propagate_nan_per_session():
    values, sessions = [1.0, None, 4.0, math.nan, None, 2.0], [0, 0, 0, 0, 1, 1]
    assert _aggregate("sum", values, sessions, cumulative=True)[:3] == [1.0, 1.0, 5.0]
    assert math.isnan(_aggregate("sum", values, sessions, cumulative=True)[3])
    assert _aggregate("sum", values, sessions, cumulative=True)[4:] == [None, 2.0]
    last = _aggregate("mean", values, sessions, cumulative=False)
    assert math.isnan(last[0]) and last[1] == 2.0
    assert _aggregate("count", values, sessions, cumulative=False) == [3.0, 1.0]
    assert _aggregate("max", [None, None], [0, 0], cumulative=False) == [None]


def test_aggregates_keep_javas_signed_zeros_and_add_in_order():
    sums = _aggregate("sum", [-0.0, -0.0, 0.0], [0, 0, 0], cumulative=True)
    assert [math.copysign(1, s) for s in sums] == [-1, -1, 1]  # -0.0 + -0.0 stays -0.0
    (first_kept,) = _aggregate("min", [0.0, -0.0], [0, 0], cumulative=False)
    assert math.copysign(1, first_kept) == 1  # Math.min-like accumulators keep the first tie
    terms = [1e16, 1.0, 1.0, -1e16] * 40
    (total,) = _aggregate("sum", terms, [0] * len(terms), cumulative=False)
    expected = 0.0
    for term in terms:
        expected += term
    assert total == expected


positions = st.builds(
    Position,
    st.integers(0, 4),
    st.sampled_from([CLOCK, RECORD, TICK]),
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 2),
    st.integers(0, 3),
)


@given(
    changes=st.lists(positions, max_size=12, unique=True),
    records=st.lists(positions.map(lambda p: p._replace(phase=RECORD)), min_size=1, max_size=12),
)
def test_the_column_lookup_agrees_with_the_one_position_lookup(changes, records):
    changes.sort()
    timeline = WatermarkTimeline(changes, list(range(len(changes))))
    found = timeline.before_each(
        np.array([r.time for r in records]),
        pa.array([r.topic for r in records]),
        np.array([r.partition for r in records]),
        np.array([r.offset for r in records]),
    )
    expected = [timeline.before(r) for r in records]
    assert found.tolist() == [LONG_MIN if e == -math.inf else e for e in expected]
