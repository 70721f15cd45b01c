"""The advisor: hand-computed cells, and every cell equal to its own backfill on random
archives."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    BadArchiveError,
    EventTimeTrigger,
    OverWindows,
    PerRecordTrigger,
    SessionWindows,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.explain.advisor import advise, delay_stats, grid, wrong_points
from feast_stream_backfill.explain.prepared import prepare, with_settings
from tests.conftest import archive

AGGREGATIONS = [Aggregation("amount", "sum", "sum"), Aggregation("amount", "count", "n")]


def job_of(df, window=None, **watermark) -> StreamJob:
    return StreamJob(
        topics=[ArchivedTopic("t", dataframe=df)],
        keys=["user"],
        window=window or TumblingWindows(10_000),
        aggregations=AGGREGATIONS,
        watermark=WatermarkStrategy(**{"emission": "on_event", **watermark}),
    )


def predictions(spark, rows):
    return spark.createDataFrame(rows, "user string, t long").select(
        "user", F.timestamp_millis("t").alias("event_timestamp")
    )


def test_hand_computed_grid(spark):
    # One partition: pt = running max of et. B = 0: the record at 12 s fires [0, 10) with the
    # record at 1 s (2 s late); the one at 5 s is then late: dropped (L = 0) or a late firing at
    # 12 s (L = 5 s). [10, 20) fires at 25 s; [20, 30) is pending. B = 3 s: the watermark is
    # 8.999 s until 25 s, so [0, 10) waits and fires at 25 s with both records, nothing drops.
    df = archive(
        spark,
        [
            (0, 0, 1_000, "u1", 1.0),
            (0, 1, 12_000, "u1", 2.0),
            (0, 2, 5_000, "u1", 4.0),
            (0, 3, 25_000, "u1", 8.0),
        ],
    )
    prepared = prepare(spark, job_of(df))
    # At 13 s the naive join sees [0, 10) = 5.0 (both records), at 26 s [10, 20) = 2.0.
    points = predictions(spark, [("u1", 13_000), ("u1", 26_000)])
    table = advise(prepared, grid([0, 3_000], [0, 5_000]), points)
    prepared.release()
    rows = table.to_dict("records")
    assert [(r["B_s"], r["L_s"], r["dropped"], r["pending"], r["emissions"]) for r in rows] == [
        (0.0, 0.0, 1, 1, 2),
        (0.0, 5.0, 0, 1, 3),
        (3.0, 0.0, 0, 1, 2),
        (3.0, 5.0, 0, 1, 2),
    ]
    delays = [(r["delay_median_s"], r["delay_p99_s"], r["delay_max_s"]) for r in rows]
    expected = [(3.5, 4.97, 5.0), (2.0, 4.94, 5.0), (10.0, 14.9, 15.0), (10.0, 14.9, 15.0)]
    for got, want in zip(delays, expected, strict=True):
        assert got == pytest.approx(want)
    # Wrong at 13 s: B = 0, L = 0 holds 1.0 (the late record dropped); B = 3 s holds nothing.
    assert [(r["points"], r["wrong"]) for r in rows] == [(2, 1), (2, 0), (2, 1), (2, 1)]


def test_refuses_sessions_per_topic_bounds_and_conflicts(spark):
    df = archive(spark, [(0, 0, 1_000, "u1", 1.0)])
    with pytest.raises(ValueError, match="session windows are not supported"):
        prepare(spark, job_of(df, SessionWindows(1_000)))
    with pytest.raises(ValueError, match="OVER windows are not supported"):
        prepare(spark, job_of(df, OverWindows(1_000)))
    topic = ArchivedTopic("t", dataframe=df, out_of_orderness_ms=5)
    job = StreamJob([topic], ["user"], TumblingWindows(10), AGGREGATIONS)
    with pytest.raises(ValueError, match="own out-of-orderness bound"):
        prepare(spark, job)
    with pytest.raises(ValueError, match="B and L must be >= 0"):
        grid([-1], [0])
    twice = archive(spark, [(0, 0, 1_000, "u1", 1.0), (0, 0, 1_000, "u1", 2.0)])
    with pytest.raises(BadArchiveError, match="1 record\\(s\\) archived twice with different"):
        prepare(spark, job_of(twice))


REALISTIC = 1_767_571_200_000

records = st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 40_000), st.sampled_from(["u1", "u2"])),
    min_size=1,
    max_size=14,
)


@settings(max_examples=2, deadline=None, derandomize=True)
@given(
    rows=records,
    base=st.sampled_from([0, REALISTIC]),
    window=st.sampled_from([TumblingWindows(10_000), SlidingWindows(10_000, 5_000)]),
    emission=st.sampled_from(["on_event", "periodic"]),
    per_record=st.booleans(),
    bound=st.integers(1, 8_000),
    lateness=st.integers(0, 15_000),
    idle=st.sampled_from([None, 3_000]),
)
def test_each_cell_equals_its_own_backfill(
    spark, rows, base, window, emission, per_record, bound, lateness, idle
):
    offsets = {0: 0, 1: 0}
    archived = []
    for i, (partition, et, user) in enumerate(rows):
        archived.append((partition, offsets[partition], base + et, user, float(i % 7)))
        offsets[partition] += 1
    df = archive(spark, archived)
    job = job_of(df, window, emission=emission, interval_ms=1_000, idle_timeout_ms=idle)
    if per_record:
        job = with_settings(job, 0, 0, idle)
        job = StreamJob(
            job.topics,
            job.keys,
            job.window,
            job.aggregations,
            trigger=PerRecordTrigger(),
            watermark=job.watermark,
        )
    else:
        job = StreamJob(
            job.topics,
            job.keys,
            job.window,
            job.aggregations,
            trigger=EventTimeTrigger(),
            watermark=job.watermark,
        )
    points = predictions(spark, [(u, base + et) for _, et, u in rows[:6]] + [("u1", base + 60_000)])
    cells = grid([0, bound], [lateness], [idle])  # 2 cells: 2 backfills to compare with
    prepared = prepare(spark, job)
    table = advise(prepared, cells, points).to_dict("records")
    for cell, row in zip(cells, table, strict=True):
        alone = backfill(spark, with_settings(job, cell.bound_ms, cell.lateness_ms, idle))
        assert (row["dropped"], row["pending"]) == (
            alone.stats["records_dropped"],
            alone.stats["records_pending"],
        ), cell
        stats = delay_stats(alone.emissions).first()
        for name in ("emissions", "delay_median_s", "delay_p99_s", "delay_max_s"):
            want = stats[name]
            assert (row[name] is None and want is None) or math.isclose(row[name], want), (
                cell,
                name,
                row[name],
                want,
            )
        wrong = wrong_points(prepared, alone.emissions, points, "event_timestamp", None).first()
        assert (row["points"], row["wrong"]) == (wrong["points"], wrong["wrong"]), cell
        alone.release()
    prepared.release()
