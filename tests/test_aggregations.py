"""Aggregations on every path (a timer's groupBy, a per-record running aggregate, the
session accumulator): nulls skipped, NaN propagated as Java's +, Math.min and Math.max do."""

from __future__ import annotations

import math

import pytest

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    PerRecordTrigger,
    SessionWindows,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.planner import plan

FUNCTIONS = ("sum", "count", "mean", "min", "max")


def _values(make_archive, amounts, window, trigger=None, times=None, watermark=None):
    spark = make_archive([]).sparkSession
    times = times or range(len(amounts))
    rows = [(0, i, t, "a", v) for i, (t, v) in enumerate(zip(times, amounts, strict=True))]
    job = StreamJob(
        topics=[ArchivedTopic("t", dataframe=make_archive([*rows, (0, 99, 1000, "b", 1.0)]))],
        keys=["user"],
        window=window,
        aggregations=[Aggregation("amount", f, f) for f in FUNCTIONS],
        watermark=watermark or WatermarkStrategy(0, 0, "on_event"),
        **({"trigger": trigger} if trigger else {}),
    )
    assert (plan(job).strategy.name == "aligned-unsorted") == (watermark is not None)
    emitted = (
        backfill(spark, job).emissions.where("user = 'a'").orderBy("emit_time", "emit_sequence")
    )
    return [tuple(r) for r in emitted.select(*FUNCTIONS).collect()]


def _same(a: tuple, b: tuple) -> bool:
    return all(
        (x is None and y is None) or x == y or math.isnan(x) and math.isnan(y)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("window", [TumblingWindows(100), SessionWindows(100)], ids=str)
def test_nulls_are_skipped_and_nan_propagates(make_archive, window):
    # One window holding 1, null, 4, NaN, fired once by b's record (W = 999).
    # sum 1 + 4 + NaN = NaN; count of non-null values 3; mean NaN; Math.min/max: NaN.
    (fired,) = _values(make_archive, [1.0, None, 4.0, math.nan], window)
    assert _same(fired, (math.nan, 3, math.nan, math.nan, math.nan))
    (no_nan,) = _values(make_archive, [1.0, None, 4.0], window)
    assert no_nan == (5.0, 2, 2.5, 1.0, 4.0)


def test_panes_merge_partial_aggregates(make_archive):
    # Sliding windows of 100 ms by 50 on the path without the sort aggregate panes of 50 ms,
    # then merge them. Values at 10, 20 (first pane) and 60, 70 (second): [-50, 50) holds the
    # first pane, [0, 100) both, [50, 150) the second; b's record at 1000 fires all three.
    window, ticks = SlidingWindows(100, 50), WatermarkStrategy(0, 50)
    times = [10, 20, 60, 70]
    fired = _values(make_archive, [1.0, None, 4.0, math.nan], window, None, times, ticks)
    expected = [
        (1.0, 1, 1.0, 1.0, 1.0),
        (math.nan, 3, math.nan, math.nan, math.nan),
        (math.nan, 2, math.nan, math.nan, math.nan),
    ]
    assert len(fired) == len(expected)
    assert all(_same(a, b) for a, b in zip(fired, expected, strict=True))
    fired = _values(make_archive, [1.0, None, 4.0, 2.0], window, None, times, ticks)
    assert fired == [(1.0, 1, 1.0, 1.0, 1.0), (7.0, 3, 7.0 / 3, 1.0, 4.0), (6.0, 2, 3.0, 2.0, 4.0)]


@pytest.mark.parametrize("window", [TumblingWindows(100), SessionWindows(100)], ids=str)
def test_running_aggregates_per_record(make_archive, window):
    # Each record fires with everything so far: null first (no value: SQL nulls, count 0),
    # then 3, then NaN for sum/mean/min/max from the third record on.
    fired = _values(make_archive, [None, 3.0, math.nan, 1.0], window, PerRecordTrigger())
    expected = [
        (None, 0, None, None, None),
        (3.0, 1, 3.0, 3.0, 3.0),
        (math.nan, 2, math.nan, math.nan, math.nan),
        (math.nan, 3, math.nan, math.nan, math.nan),
    ]
    assert len(fired) == len(expected)
    assert all(_same(a, b) for a, b in zip(fired, expected, strict=True))


@pytest.mark.parametrize("column_type", ["int", "bigint", "double", "decimal(10,2)"])
def test_a_copy_counts_at_half_weight(spark, column_type):
    # Values 1 and 2 once; 5 and a null archived twice (both copies aggregated, flagged
    # copied). Each record once: sum 8, count 3, mean 8/3, min 1, max 5, in Spark's own
    # types. In one part, or merged from two parts (each copy in its twin's part).
    from pyspark.sql import functions as F

    rows = [(1, 1, False), (1, 5, True), (1, 5, True), (2, 2, False)]
    rows += [(2, None, True), (2, None, True)]
    df = spark.createDataFrame(rows, "part int, v int, copied boolean")
    df = df.withColumn("v", F.col("v").cast(column_type))
    column = df.schema["v"].dataType
    aggregations = [Aggregation("v", f, f) for f in FUNCTIONS]
    parts = [p for a in aggregations for p in a.partials(F.col("v"), F.col("copied"), column)]
    whole = df.agg(*parts).select(*[a.finished(column) for a in aggregations])
    merged = (
        df.groupBy("part").agg(*parts).agg(*[a.merged(F.lit(True), column) for a in aggregations])
    )
    plain = df.where("copied").dropDuplicates(["v"]).unionByName(df.where("not copied"))
    spark_own = plain.agg(*[a.expr().alias(a.name) for a in aggregations if a.function != "mean"])
    for result in (whole, merged):
        row = result.first()
        assert (row["sum"], row["count"], row["min"], row["max"]) == (8, 3, 1, 5)
        assert row["mean"] == 8 / 3
        for field in spark_own.schema:
            assert result.schema[field.name].dataType == field.dataType
