"""The combined watermark's replay: hand-computed rises, the numpy path for batches of rises
against the event-at-a-time loop on random event streams (idleness, ties at one position,
batches cut anywhere, groups spanning batches), and the replay cut into time ranges (Spark)
against the one-task replay."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill.columns import EVENT_AT, EVENT_KIND, EVENT_VALUE, RISE_FROM, RISE_TO
from feast_stream_backfill.processing_order import FIELDS, LONG_MIN, RECORD, TICK, tick_position
from feast_stream_backfill.watermark_replay import (
    ACTIVE,
    IDLE,
    REACH,
    combined_rises,
    replay,
    replay_in_ranges,
)

NAMES = [name for name, _ in FIELDS]


def _events(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """``(time, partition, kind, value)`` rows, each at the tick of ``time``."""
    return pd.DataFrame(
        [(t, TICK, "", 0, 0, p, kind, value) for t, p, kind, value in rows],
        columns=[*NAMES, "_index", EVENT_KIND, EVENT_VALUE],
    )


def _rises(batches, partitions=2, combine="min", vectorised=True) -> list[tuple]:
    out = combined_rises(batches, partitions, LONG_MIN, combine, vectorised)
    return [(r["time"], r[RISE_FROM], r[RISE_TO]) for frame in out for _, r in frame.iterrows()]


def test_min_over_partitions_rises_when_the_slowest_does():
    events = _events([(1, 0, REACH, 10), (2, 1, REACH, 5), (3, 1, REACH, 12), (4, 0, REACH, 20)])
    # p1 unseen until 2: nothing; then min(10, 5) = 5; min(10, 12) = 10; min(20, 12) = 12
    expected = [(2, LONG_MIN, 5), (3, 5, 10), (4, 10, 12)]
    assert _rises([events]) == expected
    assert _rises([events], vectorised=False) == expected
    assert _rises([events.iloc[:1], events.iloc[1:3], events.iloc[3:]]) == expected


def test_events_at_one_position_apply_together_and_never_lower_it():
    events = _events([(1, 0, REACH, 10), (1, 1, REACH, 4), (2, 1, REACH, 3), (5, 0, REACH, 7)])
    # at 1: min(10, 4) = 4 at once; 3 and 7 lower no partition (each keeps its highest)
    assert _rises([events.iloc[:1], events.iloc[1:]]) == [(1, LONG_MIN, 4)]


def test_max_follows_the_fastest_partition():
    events = _events([(1, 0, REACH, 10), (2, 1, REACH, 5), (3, 1, REACH, 12)])
    assert _rises([events], combine="max") == [(1, LONG_MIN, 10), (3, 10, 12)]


def test_an_idle_partition_stops_holding_the_watermark_back():
    events = _events([(1, 0, REACH, 10), (1, 1, REACH, 2), (2, 1, IDLE, 0), (3, 1, ACTIVE, 0)])
    # p1 idle at 2: min over p0 alone = 10; back at 3 with 2, but the watermark never drops
    assert _rises([events]) == [(1, LONG_MIN, 2), (2, 2, 10)]


event = st.tuples(
    st.integers(0, 12),  # time
    st.integers(0, 3),  # partition
    st.sampled_from([REACH] * 6 + [IDLE, ACTIVE]),
    st.integers(-5, 40),  # value
)


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(event, min_size=1, max_size=40),
    records=st.booleans(),
    combine=st.sampled_from(["min", "max"]),
    cuts=st.lists(st.integers(1, 39), max_size=5),
)
def test_numpy_batches_equal_the_event_loop(rows, records, combine, cuts):
    """Any stream, cut into batches anywhere: the same rises either way. ``records``: events
    at record positions too (several per time), as the on-event timeline has."""
    if combine == "max":
        rows = [r for r in rows if r[2] == REACH]  # MAX mode has no idleness
        if not rows:
            return
    events = _events(sorted(rows, key=lambda r: r[0]))
    if records:  # the partition as the record's offset: positions differ within one time
        events["phase"] = RECORD
        events["offset"] = events["_index"]
        events = events.sort_values(NAMES, kind="stable", ignore_index=True)
    bounds = sorted({c for c in cuts if c < len(events)})
    batches = [events.iloc[a:b] for a, b in zip([0, *bounds], [*bounds, len(events)], strict=True)]
    partitions = 4
    expected = _rises([events], partitions, combine, vectorised=False)
    assert _rises(batches, partitions, combine) == expected


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 3), st.integers(-5, 40)), max_size=40
    ),
    combine=st.sampled_from(["min", "max"]),
    cut=st.integers(0, 13),
)
def test_a_range_started_from_the_maxima_before_it_continues_the_replay(rows, combine, cut):
    """What :func:`replay_in_ranges` relies on: without idleness, replaying the events from
    time ``cut`` on, each partition starting at its highest value before ``cut``, gives the
    whole replay's rises from ``cut`` on."""
    events = _events(sorted((t, p, REACH, v) for t, p, v in rows))
    partitions = 4
    whole = _rises([events], partitions, combine)
    before = events[events["time"] < cut]
    start = [max([LONG_MIN, *before.loc[before["_index"] == p, EVENT_VALUE]]) for p in range(4)]
    after = combined_rises(
        [events[events["time"] >= cut]], partitions, LONG_MIN, combine, True, start
    )
    rest = [(r["time"], r[RISE_FROM], r[RISE_TO]) for frame in after for _, r in frame.iterrows()]
    assert rest == [rise for rise in whole if rise[0] >= cut]


def test_the_ranges_replay_equals_the_one_task_replay(spark):
    """Random rises of 5 partitions over 100 ticks, cut into 4 x cores ranges (the events'
    span, or a narrower one): the same rises as the replay in one task, with MIN and MAX, and
    a partition that never rises holding MIN back."""
    rng = np.random.default_rng(7)
    n = 200
    ticks = rng.integers(0, 100, n)
    rows = [
        (int(t) * 200, f"t{int(p) % 2}", int(p), int(t) * 10 + int(noise))
        for t, p, noise in zip(ticks, rng.integers(0, 5, n), rng.integers(0, 600, n), strict=True)
    ]
    events = spark.createDataFrame(
        rows, "t long, _topic string, _partition int, _value long"
    ).select(
        tick_position(F.col("t")).alias(EVENT_AT),
        "_topic",
        "_partition",
        "_value",
        F.lit(REACH).alias(EVENT_KIND),
    )
    partitions = [(f"t{p % 2}", p) for p in range(5)]
    order = [*NAMES, RISE_FROM, RISE_TO]
    for combine, known, rises in (
        ("min", partitions, range(10, 101)),
        ("max", partitions, range(10, 101)),
        ("min", [*partitions, ("t0", 9)], [0]),  # held back by the partition never seen
    ):
        one = replay(events, known, LONG_MIN, combine).orderBy(*NAMES).collect()
        for span in ((0, 19_800), (5_000, 10_000)):  # the second: end ranges take the rest
            ranged = replay_in_ranges(events, known, LONG_MIN, combine, span)
            ranged = ranged.orderBy(*NAMES).collect()
            assert [tuple(r[c] for c in order) for r in ranged] == [
                tuple(r[c] for c in order) for r in one
            ]
        assert len(one) in rises
