"""The combined watermark's replay (no Spark): hand-computed rises, and the numpy path for
batches of rises against the event-at-a-time loop on random event streams (idleness, ties at
one position, batches cut anywhere, groups spanning batches)."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from feast_stream_backfill.columns import (
    EVENT_KIND,
    EVENT_VALUE,
    PARTITION,
    RISE_FROM,
    RISE_TO,
    TOPIC,
)
from feast_stream_backfill.processing_order import FIELDS, LONG_MIN, RECORD, TICK
from feast_stream_backfill.watermark_replay import ACTIVE, IDLE, REACH, combined_rises

NAMES = [name for name, _ in FIELDS]


def _events(rows: list[tuple[int, int, int, int]]) -> pd.DataFrame:
    """``(time, partition, kind, value)`` rows, each at the tick of ``time``."""
    return pd.DataFrame(
        [(t, TICK, "", 0, 0, "t", p, kind, value) for t, p, kind, value in rows],
        columns=[*NAMES, TOPIC, PARTITION, EVENT_KIND, EVENT_VALUE],
    )


def _rises(batches, partitions=2, combine="min", vectorised=True) -> list[tuple]:
    index = {("t", p): p for p in range(partitions)}
    out = combined_rises(batches, index, LONG_MIN, combine, vectorised)
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
        events["offset"] = events[PARTITION]
        events = events.sort_values(NAMES, kind="stable", ignore_index=True)
    bounds = sorted({c for c in cuts if c < len(events)})
    batches = [events.iloc[a:b] for a, b in zip([0, *bounds], [*bounds, len(events)], strict=True)]
    partitions = 4
    expected = _rises([events], partitions, combine, vectorised=False)
    assert _rises(batches, partitions, combine) == expected
