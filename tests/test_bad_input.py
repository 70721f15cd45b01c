"""Bad archives are refused with a message naming the table and the column."""

from dataclasses import replace

import pytest
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    BadArchiveError,
    StreamJob,
    TumblingWindows,
    backfill,
)

GOOD = [(0, 0, 1000, "a", 1.0), (0, 1, 2000, "a", 2.0)]


def job_on(topic: ArchivedTopic) -> StreamJob:
    return StreamJob(
        topics=[topic],
        keys=["user"],
        window=TumblingWindows(size_ms=1000),
        aggregations=[Aggregation("amount", "sum", "amount_sum")],
    )


def refused(spark, df_or_path, match: str) -> None:
    if isinstance(df_or_path, str):
        topic = ArchivedTopic("payments", path=df_or_path)
    else:
        topic = ArchivedTopic("payments", dataframe=df_or_path)
    with pytest.raises(BadArchiveError, match=match):
        backfill(spark, job_on(topic))


@pytest.mark.parametrize("column", ["partition", "offset", "event_time"])
def test_missing_kafka_column_is_named_with_the_table(spark, make_archive, tmp_path, column):
    path = str(tmp_path / "payments")
    make_archive(GOOD).drop(column).write.format("delta").save(path)
    refused(
        spark, path, rf"archived topic 'payments' \({path}\): missing column\(s\) \['{column}'\]"
    )


def test_missing_key_or_aggregated_column_is_named(spark, make_archive):
    refused(spark, make_archive(GOOD).drop("amount"), r"missing column\(s\) \['amount'\]")


def test_null_timestamps_are_counted_and_named(spark, make_archive):
    df = make_archive(GOOD).withColumn(
        "event_time", F.when(F.col("offset") == 1, None).otherwise(F.col("event_time"))
    )
    refused(spark, df, r"1 null value\(s\) in column 'event_time' \(of 2 records\)")


def test_null_offsets_are_named(spark, make_archive):
    df = make_archive(GOOD).withColumn("offset", F.lit(None).cast("long"))
    refused(spark, df, r"2 null value\(s\) in column 'offset'")


def test_naive_timestamps_are_refused(spark, make_archive):
    df = make_archive(GOOD).withColumn("event_time", F.col("event_time").cast("timestamp_ntz"))
    refused(spark, df, r"column 'event_time' is a naive TIMESTAMP_NTZ")


def test_empty_archive_is_refused(spark, make_archive, tmp_path):
    path = str(tmp_path / "empty")
    make_archive(GOOD).limit(0).write.format("delta").save(path)
    refused(spark, path, r"the archive is empty")


def test_not_a_delta_table_is_refused(spark, tmp_path):
    refused(spark, str(tmp_path / "nowhere"), r"cannot read it as a Delta table")


@pytest.mark.parametrize(
    "copy",
    [
        (0, 1, 2000, "a", 99.0),  # another amount
        (0, 1, 3000, "a", 2.0),  # the same payload stamped 1 s later: whose time is it?
    ],
    ids=["payload", "event_time"],
)
def test_same_offset_with_different_content_is_refused(spark, make_archive, copy):
    refused(
        spark,
        make_archive([*GOOD, copy]),
        r"1 record\(s\) archived twice with different content, e\.g\. partition 0 offset 1",
    )


@pytest.mark.parametrize("strategy", ["aligned-unsorted", "aligned-in-order"])
def test_every_problem_is_counted_and_named_on_both_paths(spark, make_archive, strategy):
    # The path without the sort reads the signs of a problem from its aggregates (a null key
    # from the windows, the others from the offsets) and then counts them in a pass of its
    # own; the sorted path observes them on its sort. Same message.
    rows = [
        *GOOD,
        (0, 2, 3000, None, 1.0),
        (0, 3, 3000, None, 1.0),
        (0, -4, 3000, "a", 1.0),
        (1, 5, None, "a", 1.0),
    ]
    topic = ArchivedTopic("payments", dataframe=make_archive(rows))
    with pytest.raises(BadArchiveError) as refusal:
        backfill(spark, job_on(topic), strategy=strategy)
    assert str(refusal.value) == (
        "archived topic 'payments' (DataFrame): 1 null value(s) in column 'event_time' (of 6 "
        "records), e.g. partition 1 offset 5; 2 null value(s) in key column 'user' (Flink's "
        "keyBy fails the job on a null key; null_keys='drop' drops such records, as a filter "
        "before keyBy would) (of 6 records), e.g. partition 0 offset 2; 1 negative value(s) in "
        "column 'offset' (of 6 records), e.g. partition 0 offset -4"
    )


@pytest.mark.parametrize("bad", ["null key", "empty"])
@pytest.mark.parametrize("strategy", ["aligned-unsorted", "aligned-in-order"])
def test_the_topic_with_the_problem_is_named(spark, make_archive, strategy, bad):
    good = ArchivedTopic("payments", dataframe=make_archive(GOOD))
    rows = [(0, 0, 1000, None, 1.0)] if bad == "null key" else []
    other = ArchivedTopic("refunds", dataframe=make_archive(rows))
    job = replace(job_on(good), topics=[good, other])
    expected = {
        "null key": r"archived topic 'refunds' \(DataFrame\): 1 null value\(s\) in key column",
        "empty": r"archived topic 'refunds' \(DataFrame\): the archive is empty",
    }[bad]
    with pytest.raises(BadArchiveError, match=expected):
        backfill(spark, job, strategy=strategy)
