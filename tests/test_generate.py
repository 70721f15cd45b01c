"""The synthetic archive and predictions of ``examples.generate`` have the promised shape."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from examples.generate import (
    TIERS,
    archive_frame,
    generate_archive,
    generate_predictions,
    predictions_frame,
    user_tiers_frame,
)

N_RECORDS = 20_000
N_PARTITIONS = 8
N_USERS = 50_000
SEED = 7
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
RATE = 200.0
N_PREDICTIONS = 5_000
ARCHIVE_ARGS = dict(
    n_records=N_RECORDS,
    n_partitions=N_PARTITIONS,
    n_users=N_USERS,
    seed=SEED,
    start=START,
    records_per_second=RATE,
)


def by_offset():
    return Window.partitionBy("partition").orderBy("offset")


@pytest.fixture(scope="module")
def paths(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("generate")
    archive, predictions = str(root / "archive"), str(root / "predictions")
    generate_archive(spark, archive, **ARCHIVE_ARGS)
    generate_predictions(spark, predictions, archive, n_rows=N_PREDICTIONS, seed=11)
    return {"archive": archive, "predictions": predictions}


@pytest.fixture(scope="module")
def archive(spark, paths) -> DataFrame:
    return spark.read.format("delta").load(paths["archive"]).cache()


@pytest.fixture(scope="module")
def records(archive) -> DataFrame:
    """Distinct records with event time in ms, the previous one's and the running max before."""
    return (
        archive.distinct()
        .withColumn("ms", F.unix_millis("event_time"))
        .withColumn("prev_ms", F.lag("ms").over(by_offset()))
        .withColumn(
            "max_before",
            F.max("ms").over(by_offset().rowsBetween(Window.unboundedPreceding, -1)),
        )
        .cache()
    )


def test_schema(archive):
    assert archive.schema == StructType(
        [
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("event_time", TimestampType()),
            StructField("user_id", StringType()),
            StructField("amount", DoubleType()),
        ]
    )


def test_values(archive):
    row = archive.agg(
        F.sum(F.col("event_time").isNull().cast("int")).alias("null_times"),
        F.sum((F.unix_micros("event_time") % 1000 != 0).cast("int")).alias("sub_ms"),
        F.sum((~F.col("user_id").rlike(r"^u[0-9]{6}$")).cast("int")).alias("bad_users"),
        F.min("amount").alias("min_amount"),
        F.sum(
            (F.abs(F.col("amount") * 100 - F.round(F.col("amount") * 100)) > 1e-6).cast("int")
        ).alias("not_cents"),
        F.expr("percentile(amount, 0.5)").alias("median"),
    ).first()
    assert row["null_times"] == 0
    assert row["sub_ms"] == 0, "event times have millisecond resolution"
    assert row["bad_users"] == 0
    assert row["min_amount"] > 0
    assert row["not_cents"] == 0
    assert 5 < row["median"] < 200


def test_partitions_and_contiguous_offsets(archive):
    per_partition = (
        archive.groupBy("partition")
        .agg(
            F.countDistinct("offset").alias("n"),
            F.min("offset").alias("lo"),
            F.max("offset").alias("hi"),
        )
        .collect()
    )
    assert sorted(r["partition"] for r in per_partition) == list(range(N_PARTITIONS))
    for r in per_partition:
        assert r["lo"] == 0 and r["hi"] == r["n"] - 1, f"offsets not contiguous: {r}"
    counts = [r["n"] for r in per_partition]
    assert sum(counts) == N_RECORDS
    assert max(counts) - min(counts) <= 1, "records spread evenly over partitions"


def test_distinct_records_and_exact_duplicates(archive):
    total = archive.count()
    assert archive.select("partition", "offset").distinct().count() == N_RECORDS
    # Every (partition, offset) is one row, repeated at most twice, and repeats are identical.
    assert archive.distinct().count() == N_RECORDS
    copies = archive.groupBy(*archive.columns).count()
    assert copies.agg(F.max("count")).first()[0] == 2
    n_duplicates = total - N_RECORDS
    assert copies.where("count = 2").count() == n_duplicates
    assert 0.0003 * N_RECORDS <= n_duplicates <= 0.003 * N_RECORDS  # ~0.1%


def test_event_time_goes_backwards(records):
    backwards = records.where("ms < prev_ms").count()
    assert backwards > 0.05 * N_RECORDS, "producer jitter: event time often goes backwards"
    # ... but only by a little, except for the few severely late records.
    behind = records.select((F.col("max_before") - F.col("ms")).alias("behind"))
    assert behind.where("behind > 2000 AND behind < 110000").count() <= 0.001 * N_RECORDS


def test_severely_late_records(records):
    late = records.where(F.col("max_before") - F.col("ms") >= 120_000).count()
    assert 1 <= late <= 0.002 * N_RECORDS  # ~0.05%
    latest = records.agg(F.max(F.col("max_before") - F.col("ms"))).first()[0]
    assert latest <= 20 * 60_000 + 5_000


def test_partition_3_goes_quiet(records):
    # The running max of event time (a per-partition watermark) tracks arrivals without being
    # thrown about by late records: its largest step is the longest silence of the partition.
    watermark = F.greatest(F.coalesce("max_before", "ms"), F.col("ms"))
    steps = (
        records.withColumn("wm", watermark)
        .withColumn("step", F.col("wm") - F.lag("wm").over(by_offset()))
        .groupBy("partition")
        .agg(F.max("step").alias("gap"))
        .collect()
    )
    gaps = {r["partition"]: r["gap"] for r in steps}
    span_ms = N_RECORDS / RATE * 1000
    assert gaps[3] >= 0.07 * span_ms, gaps
    assert gaps[3] > 8 * max(g for p, g in gaps.items() if p != 3), gaps
    # The quiet stretch is in the middle of the partition's time span.
    row = (
        records.where("partition = 3")
        .withColumn("wm", watermark)
        .withColumn("step", F.col("wm") - F.lag("wm").over(by_offset()))
        .orderBy(F.desc("step"))
        .select("offset")
        .first()
    )
    assert 0.3 * N_RECORDS / N_PARTITIONS < row["offset"] < 0.7 * N_RECORDS / N_PARTITIONS


def test_event_times_cover_the_expected_span(records):
    start_ms = int(START.timestamp() * 1000)
    span_ms = N_RECORDS / RATE * 1000
    bulk = records.where(F.col("ms") >= start_ms - 2_000)
    row = bulk.agg(
        F.min("ms").alias("lo"), F.max("ms").alias("hi"), F.count("*").alias("n")
    ).first()
    assert row["n"] >= 0.998 * N_RECORDS
    assert row["lo"] < start_ms + 1_000
    assert abs(row["hi"] - (start_ms + span_ms)) < 2_000


def test_zipf_skew(archive):
    counts = archive.distinct().groupBy("user_id").count().orderBy(F.desc("count"))
    top = counts.limit(10).collect()
    top_share = top[0]["count"] / N_RECORDS
    assert top_share > 0.02, f"hottest user has {top_share:.2%}"
    assert top_share > 500 / N_USERS  # far above uniform
    assert top[0]["count"] > top[1]["count"] > top[9]["count"]  # a long head, decreasing
    assert counts.count() < 0.6 * N_RECORDS  # repeated keys


def test_same_seed_same_data(spark, archive):
    # Generated again (the same code as generate_archive, without the Delta write), the data
    # are the same rows, read back from the table or not.
    again = archive_frame(spark, **ARCHIVE_ARGS)
    assert again.count() == archive.count()
    assert again.exceptAll(archive).isEmpty()
    assert archive.exceptAll(again).isEmpty()


def test_other_seed_other_data(spark, tmp_path, archive):
    path = str(tmp_path / "other")
    generate_archive(spark, path, n_records=2_000, seed=SEED + 1)
    other = spark.read.format("delta").load(path)
    assert other.select("partition", "offset").distinct().count() == 2_000
    # A record's user depends on the seed and its (partition, offset) only, not on the size.
    columns = ["partition", "offset", "user_id"]
    other_users = other.select(columns)
    same_users = archive_frame(spark, n_records=2_000, seed=SEED).select(columns)
    assert same_users.exceptAll(archive.select(columns)).isEmpty()
    assert other_users.exceptAll(archive.select(columns)).count() > 1_000


def test_predictions(spark, paths, archive):
    predictions = spark.read.format("delta").load(paths["predictions"])
    assert predictions.schema == StructType(
        [StructField("user_id", StringType()), StructField("event_timestamp", TimestampType())]
    )
    assert predictions.count() == N_PREDICTIONS
    lo, hi = archive.agg(F.min("event_time"), F.max("event_time")).first()
    p = predictions.agg(
        F.min("event_timestamp").alias("lo"),
        F.max("event_timestamp").alias("hi"),
        F.sum(F.col("event_timestamp").isNull().cast("int")).alias("nulls"),
    ).first()
    assert p["nulls"] == 0
    assert lo <= p["lo"] and p["hi"] <= hi
    span = (hi - lo).total_seconds()
    assert (p["hi"] - p["lo"]).total_seconds() > 0.95 * span, "uniform over the archive's span"
    # Same skew: the archive's hottest user is hot in the predictions too, and most prediction
    # rows are for users present in the archive.
    hottest = archive.groupBy("user_id").count().orderBy(F.desc("count")).first()["user_id"]
    top = predictions.groupBy("user_id").count().orderBy(F.desc("count")).first()
    assert top["user_id"] == hottest
    assert top["count"] > 0.02 * N_PREDICTIONS
    known = predictions.join(archive.select("user_id").distinct(), "user_id", "left_semi")
    assert known.count() > 0.6 * N_PREDICTIONS


def test_predictions_are_deterministic(spark, paths):
    written = spark.read.format("delta").load(paths["predictions"])
    again = predictions_frame(spark, paths["archive"], n_rows=N_PREDICTIONS, seed=11)
    assert written.exceptAll(again).isEmpty() and again.exceptAll(written).isEmpty()


def test_user_tiers_are_an_scd2_table_covering_the_archive(spark, paths, archive):
    n_versions = 120_000
    tiers = user_tiers_frame(spark, paths["archive"], n_versions=n_versions).cache()
    assert [f.name for f in tiers.schema] == [
        "user_id",
        "valid_from",
        "valid_to",
        "tier",
        "fee_rate",
    ]
    assert tiers.count() == n_versions
    lo, hi = archive.agg(F.min("event_time"), F.max("event_time")).first()
    by_user = Window.partitionBy("user_id").orderBy("valid_from")
    checked = (
        tiers.select(
            "*",
            F.row_number().over(by_user).alias("j"),
            F.lead("valid_from").over(by_user).alias("next_from"),
        )
        .agg(
            F.sum((F.col("valid_to").isNull() != F.col("next_from").isNull()).cast("int")).alias(
                "bad_end"
            ),
            F.sum((F.col("valid_to") != F.col("next_from")).cast("int")).alias("gaps"),
            F.sum((F.col("valid_to") <= F.col("valid_from")).cast("int")).alias("empty"),
            F.max(F.when(F.col("j") == 1, F.col("valid_from"))).alias("latest_first"),
            F.min(F.when(F.col("j") > 1, F.col("valid_from"))).alias("earliest_change"),
            F.max("valid_from").alias("latest_change"),
            F.countDistinct("user_id").alias("users"),
        )
        .first()
    )
    assert checked["bad_end"] == checked["gaps"] == checked["empty"] == 0
    assert checked["latest_first"] < lo, "every user has a tier before the archive starts"
    assert lo <= checked["earliest_change"] and checked["latest_change"] <= hi
    top_user = archive.agg(F.max("user_id")).first()[0]
    assert checked["users"] == int(top_user[1:]) + 1
    rates = {(r.tier, r.fee_rate) for r in tiers.select("tier", "fee_rate").distinct().collect()}
    assert rates == {(tier, rate) for tier, rate, _ in TIERS}
    again = user_tiers_frame(spark, paths["archive"], n_versions=n_versions)
    assert tiers.exceptAll(again).isEmpty(), "deterministic"
    tiers.unpersist()
