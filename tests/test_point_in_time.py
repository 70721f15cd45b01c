"""The online store at T and the training join, hand-computed."""

from datetime import datetime, timedelta, timezone

from feast_stream_backfill.online_state import state_at
from feast_stream_backfill.training_join import as_of_join

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=timezone.utc)


def at(seconds: float) -> datetime:
    return (T0 + timedelta(seconds=seconds)).replace(tzinfo=None)


def emissions(spark):
    # user a: window [10:00, 10:05) fires at 10:05:30 (watermark), [10:05, 10:10) and a late
    # firing of [10:00, 10:05) both at 10:10:30, the late one second (emit_sequence 1).
    rows = [
        ("a", at(0), at(300), at(330), 0, "on_time", 2, 5.0),
        ("a", at(300), at(600), at(630), 0, "on_time", 1, 7.0),
        ("a", at(0), at(300), at(630), 1, "late", 3, 9.0),
        ("b", at(0), at(300), at(330), 0, "on_time", 1, 1.0),
    ]
    schema = (
        "user string, window_start timestamp, window_end timestamp, emit_time timestamp, "
        "emit_sequence int, firing string, record_count long, amount_sum double"
    )
    return spark.createDataFrame(rows, schema)


def join(spark, points, ttl=None):
    preds = spark.createDataFrame(
        [(i, u, at(s)) for i, (u, s) in enumerate(points)], "row int, user string, ts timestamp"
    )
    out = as_of_join(preds, emissions(spark), ["user"], "ts", ["amount_sum"], ttl_seconds=ttl)
    return [r.amount_sum for r in out.orderBy("row").collect()]


def test_window_is_not_visible_at_its_end_but_when_it_fires(spark):
    # At 10:05 (window end) event-time joins would show 5.0; the job had not written it yet.
    assert join(spark, [("a", 300), ("a", 329.999), ("a", 330), ("a", 400)]) == [
        None,
        None,
        5.0,
        5.0,
    ]


def test_late_firing_of_older_window_overwrites_newer_value(spark):
    # Both written at 10:10:30; the late firing comes second, so it is what Redis holds.
    assert join(spark, [("a", 630), ("b", 630), ("c", 630)]) == [9.0, 1.0, None]


def test_ttl_is_inclusive_at_its_boundary(spark):
    # b's value was written at 10:05:30; ttl 60 s: visible until 10:06:30 inclusive.
    assert join(spark, [("b", 390), ("b", 390.001)], ttl=60) == [1.0, None]


def test_prediction_rows_keep_duplicates_and_extra_columns(spark):
    preds = spark.createDataFrame(
        [(1, "a", at(400), "x"), (2, "a", at(400), "y")],
        "row int, user string, ts timestamp, tag string",
    )
    out = as_of_join(preds, emissions(spark), ["user"], "ts", ["amount_sum"], output_names=["v"])
    assert [(r.row, r.tag, r.v) for r in out.orderBy("row").collect()] == [
        (1, "x", 5.0),
        (2, "y", 5.0),
    ]


def test_null_keys_and_times_get_nothing_as_in_a_join(spark):
    # The sort puts a null-user prediction with the null user's emission (4.0, at 10:00:10);
    # a join matches no null, and neither does the as-of join.
    nobody = spark.createDataFrame(
        [(None, at(0), at(300), at(10), 0, "on_time", 1, 4.0)], emissions(spark).schema
    )
    preds = spark.createDataFrame(
        [(0, None, at(400)), (1, "a", None), (2, "a", at(400))],
        "row int, user string, ts timestamp",
    )
    out = as_of_join(preds, emissions(spark).union(nobody), ["user"], "ts", ["amount_sum"])
    assert [(r.row, r.amount_sum) for r in out.orderBy("row").collect()] == [
        (0, None),
        (1, None),
        (2, 5.0),
    ]


def test_rows_keep_their_key_type_and_column_order(spark):
    # int users against long ones: matched on value, the predictions' int column kept, and the
    # columns in a join's order (keys and time, the others, the features).
    log = spark.createDataFrame(
        [(7, at(330), 0, 5.0)],
        "user long, emit_time timestamp, emit_sequence int, amount_sum double",
    )
    preds = spark.createDataFrame(
        [("x", 7, at(400)), ("y", 8, at(400))], "tag string, user int, ts timestamp"
    )
    out = as_of_join(preds, log, ["user"], "ts", ["amount_sum"])
    assert out.dtypes == [
        ("user", "int"),
        ("ts", "timestamp"),
        ("tag", "string"),
        ("amount_sum", "double"),
    ]
    assert sorted(out.collect()) == [(7, at(400), "x", 5.0), (8, at(400), "y", None)]


def test_online_state_is_the_last_emission_at_or_before_end(spark):
    def state(end, start=None):
        rows = state_at(
            emissions(spark),
            ["user"],
            T0 + timedelta(seconds=end),
            None if start is None else T0 + timedelta(seconds=start),
        )
        return sorted((r.user, r.amount_sum, r.emit_time) for r in rows.collect())

    assert state(329) == []
    assert state(330) == [("a", 5.0, at(330)), ("b", 1.0, at(330))]
    assert state(700) == [("a", 9.0, at(630)), ("b", 1.0, at(330))]
    # Only keys that emitted in [start, end] are written by `feast materialize start end`.
    assert state(700, start=600) == [("a", 9.0, at(630))]


def test_as_of_join_does_not_pair_every_prediction_with_every_emission(spark):
    preds = spark.createDataFrame([("a", at(1000)), ("b", at(5))], "user string, ts timestamp")
    plan = as_of_join(preds, emissions(spark), ["user"], "ts", ["amount_sum"])._jdf.queryExecution()
    physical = plan.executedPlan().toString()
    assert "Window" in physical and "CartesianProduct" not in physical
    assert "BroadcastNestedLoopJoin" not in physical
