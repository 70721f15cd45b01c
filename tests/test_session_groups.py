"""The simple-session rules in numpy (no Spark): hand-computed classifications, the stretches a
key splits into, the aggregates' Java rules, the timeline's column lookup against its
one-position one, and the whole numpy path against the replay of every record on random
archives (values chosen to break a careless sum: fractions, 1e16, -0.0, NaN, infinities,
integers past 2^53).

Rows are one key's records in processing order; ``W`` the watermark each sees; gap 10, no
lateness, a timer unless a test says otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from feast_stream_backfill.aggregations import FUNCTIONS, Aggregation
from feast_stream_backfill.columns import WINDOW_END, WINDOW_START
from feast_stream_backfill.merging_window_set import ProcessingClock, WatermarkTimeline
from feast_stream_backfill.processing_order import CLOCK, LONG_MIN, RECORD, TICK, Position
from feast_stream_backfill.session_groups import (
    SHORT_RUN,
    Column,
    aggregate,
    classify,
    running,
    stretches,
)
from feast_stream_backfill.session_replay import SessionReplay
from feast_stream_backfill.triggers import (
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)

GAP = 10


def _classify(times: list[int], watermarks: list[int], lateness: int = 0):
    starts = np.zeros(len(times), dtype=bool)
    starts[0] = True
    t, w = np.array(times), np.array(watermarks)
    return classify(starts, t, w, GAP, lateness, timer=True)


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


def test_running_aggregates_follow_each_run_in_row_order_short_or_long():
    # runs of 1, 3, SHORT_RUN and longer: the short ones go a row at a time together, the
    # long ones by accumulate; sums where the order of additions shows (1e16 + 1 == 1e16)
    lengths = [1, 3, SHORT_RUN, SHORT_RUN + 1, 3 * SHORT_RUN]
    segment = np.repeat(np.arange(len(lengths)) * 7, lengths)  # numbered with gaps
    terms = np.resize([1e16, 1.0, 1.0, -1e16, -0.0, 3.5], len(segment))
    times = np.resize([5, LONG_MIN, 9, 2, 9, (1 << 63) - 1, -3], len(segment)).astype(np.int64)
    expected = {"cumsum": [], "cummax": [], "cummin": [], "count": []}
    for run in np.split(np.arange(len(segment)), np.cumsum(lengths)[:-1]):
        total, high, low = None, None, None
        for i in run:
            total = terms[i] if total is None else total + terms[i]
            high = times[i] if high is None else max(high, times[i])
            low = times[i] if low is None else min(low, times[i])
            expected["cumsum"].append(total)
            expected["cummax"].append(high)
            expected["cummin"].append(low)
        expected["count"] += list(range(1, len(run) + 1))
    sums = running("cumsum", terms, segment)
    assert sums.view(np.int64).tolist() == np.array(expected["cumsum"]).view(np.int64).tolist()
    assert running("cummax", times, segment).tolist() == expected["cummax"]
    assert running("cummin", times, segment).tolist() == expected["cummin"]
    ones = np.ones(len(segment), dtype=np.int64)
    assert running("cumsum", ones, segment).tolist() == expected["count"]
    assert running("cumsum", np.zeros(0), np.zeros(0, dtype=np.int64)).size == 0


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


AWKWARD_FLOATS = [0.0, -0.0, 0.1, 1.5, 1e16, -1e16, 1.0, math.nan, math.inf, -math.inf]


@st.composite
def archives(draw):
    """One to three keys' records (event time, processing time, partition, value), the
    watermark's changes on ticks (rising), a trigger and the rows per chunk."""
    n = draw(st.integers(1, 40))
    integer = draw(st.booleans())
    values = st.one_of(
        st.none(),
        st.integers(-(2**58), 2**58) | st.integers(-3, 3)
        if integer
        else st.sampled_from(AWKWARD_FLOATS) | st.floats(-100, 100),
    )
    records = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "c"]),
                st.integers(0, 60),
                st.integers(0, 80),
                st.integers(0, 1),
                values,
            ),
            min_size=n,
            max_size=n,
        )
    )
    ticks = sorted(draw(st.sets(st.integers(0, 90), max_size=12)))
    rises = draw(st.lists(st.integers(1, 15), min_size=len(ticks), max_size=len(ticks)))
    changes = list(zip(ticks, np.cumsum(rises).tolist() - np.int64(20), strict=True))
    trigger = draw(
        st.sampled_from(
            [
                EventTimeTrigger(),
                EventTimeTrigger(15),
                PerRecordTrigger(),
                PerRecordTrigger(15),
                ProcessingTimeTrigger(),
            ]
        )
    )
    return records, integer, changes, trigger, draw(st.integers(1, 8))


def _outputs(batches) -> tuple[list, dict]:
    """Rows comparable across both paths: floats by their bits (NaN as one), dropped counts
    summed per key and window (a key's stretches may be counted apart), statuses summed."""

    def same(value):
        if isinstance(value, float):
            return "nan" if math.isnan(value) else float.hex(value)
        return value

    firings, dropped, statuses = [], {}, {}
    for batch in batches:
        for row in batch.to_pylist():
            kind = row.pop("_kind_of_row")
            if kind == "status":
                statuses[row["firing"]] = statuses.get(row["firing"], 0) + row["_n"]
            elif kind == "dropped":
                window = (row["k"], row[WINDOW_START], row[WINDOW_END])
                dropped[window] = dropped.get(window, 0) + row["_n"]
            else:
                firings.append(tuple(same(v) for v in row.values()))
    return sorted(firings, key=repr), dropped | statuses


@settings(max_examples=300, deadline=None)
@given(archives())
def test_the_numpy_path_equals_the_replay_of_every_record(archive):
    records, integer, changes, trigger, chunk_rows = archive
    event_time = not isinstance(trigger, ProcessingTimeTrigger)
    offsets = {}
    rows = []
    for key, time, pt, partition, value in records:
        offsets[partition] = offsets.get(partition, -1) + 1
        rows.append(
            (key, time if event_time else pt, pt, "t", partition, offsets[partition], value)
        )
    rows.sort(key=lambda r: (r[0], r[2], r[3], r[4], r[5]))
    value_type = LongType() if integer else DoubleType()
    table = pa.table(
        [list(column) for column in zip(*rows, strict=True)],
        schema=pa.schema(
            [
                ("k", pa.string()),
                ("_time", pa.int64()),
                ("_pt", pa.int64()),
                ("_topic", pa.string()),
                ("_partition", pa.int32()),
                ("_offset", pa.int64()),
                ("v", pa.int64() if integer else pa.float64()),
            ]
        ),
    )
    types = StructType([StructField("k", StringType()), StructField("v", value_type)])
    aggregations = [Aggregation("v", f, f) for f in FUNCTIONS]
    lateness = trigger.allowed_lateness_ms if event_time else 0
    clock = (
        WatermarkTimeline([Position.tick(t) for t, _ in changes], [w for _, w in changes])
        if event_time
        else ProcessingClock()
    )
    results = []
    for vectorised in (True, False):
        replay = SessionReplay(
            1, ["v"], aggregations, GAP, trigger, lateness, types, vectorised, chunk_rows
        )
        try:
            results.append(_outputs(replay(iter(table.to_batches(3)), clock)))
        except ArithmeticError as error:  # a long's overflow: raised on both paths
            results.append(type(error))
    assert results[0] == results[1]
