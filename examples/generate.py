"""Synthetic data for the examples and benchmarks: an archived Kafka topic and prediction events.

``generate_archive`` writes the Delta table of an archived topic ``transactions`` with columns
``partition int, offset long, event_time timestamp, user_id string, amount double``, shaped like
real traffic, with the awkward parts a backfill has to get right:

* ``n_partitions`` Kafka partitions, offsets ``0..k-1`` contiguous in each, records spread evenly
  (record ``i`` goes to partition ``i % n_partitions`` with offset ``i // n_partitions``);
* arrival (broker) time non-decreasing with the offset, about ``records_per_second`` in all;
  event time = arrival minus a producer delay that is usually small (exponential, mean 0.5 s,
  at most 2 s) so event times often go *backwards* within a partition, and for about 0.05% of
  the records severely late (2-20 minutes);
* Zipf-skewed keys: user index ``floor(n_users ** u) - 1`` for ``u`` uniform in ``[0, 1)``, so
  ``P(k) = log((k + 2) / (k + 1)) / log(n_users)`` (the hottest user has ~6% at 50k users);
* partition 3 goes quiet for ~10% of the time span in the middle: its offsets stay contiguous,
  its arrival times jump over the gap (its records come 10% faster, so it ends with the others);
* ~0.1% of the records archived twice: exact duplicate rows, on top of the ``n_records``.

Everything is computed by Spark from ``spark.range``: every pseudo-random number is a function of
``(seed, record number, stream)`` through ``xxhash64``, so the data depend only on the seed and
the sizes (not on the number of Spark partitions or executors), and nothing is built on the
driver, whatever the size.

``generate_faulty_archive`` writes a small second topic with what the explain report must name:
a record stamped year 9999 (a broken producer clock) and a partition silent for hours.

``generate_user_tiers`` writes a state table for enrichment: an SCD type II table
``user_id, valid_from, valid_to, tier, fee_rate`` over the archive's users, every user with a
tier from a day before the archive on and its later changes spread over the archive's span.

Run ``python -m examples.generate --archive data/transactions --predictions data/predictions``
(``--user-tiers data/user_tiers`` for the state table too; ``--layouts data/layouts`` for the
archive, with offset holes and connector restarts, in every layout of :mod:`examples.layouts`).
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import datetime, timezone

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

TOPIC = "transactions"

#: Producer delay: exponential with this mean (ms), capped at ``MAX_DELAY_MS``.
MEAN_DELAY_MS = 500.0
MAX_DELAY_MS = 2_000
#: Severely late records: their share, and how late (ms) they are relative to their arrival.
LATE_FRACTION = 0.0005
LATE_MIN_MS, LATE_MAX_MS = 2 * 60_000, 20 * 60_000
#: Share of the records archived twice.
DUPLICATE_FRACTION = 0.001
#: The partition that goes quiet, and for which share of the time span.
QUIET_PARTITION = 3
QUIET_FRACTION = 0.10
#: Lognormal amounts: median and sigma.
AMOUNT_MEDIAN, AMOUNT_SIGMA = 30.0, 1.0

# Independent pseudo-random streams, one per use.
_JITTER, _DELAY, _LATE, _LATE_BY, _USER, _AMOUNT_1, _AMOUNT_2, _DUP = range(8)
_PRED_USER, _PRED_TIME = 100, 101
_TIER_TIME, _TIER = 200, 201

#: Fee tiers of the state table: (tier, fee rate, share of the versions).
TIERS = (("basic", 0.029, 0.6), ("plus", 0.019, 0.3), ("premium", 0.009, 0.1))

_TWO_53 = float(1 << 53)


def _uniform(seed: int, stream: int, id_col: str = "id") -> Column:
    """A pseudo-random double in ``(0, 1)`` determined by ``(seed, stream, id)`` alone."""
    h = F.xxhash64(F.lit(seed).cast("long"), F.lit(stream).cast("long"), F.col(id_col))
    return (F.shiftrightunsigned(h, 11).cast("double") + F.lit(0.5)) / F.lit(_TWO_53)


def _zipf_index(u: Column, n_users: int) -> Column:
    """A user index in ``[0, n_users)`` with ``P(k) = log((k + 2) / (k + 1)) / log(n_users)``."""
    idx = F.floor(F.pow(F.lit(float(n_users)), u)).cast("long") - F.lit(1)
    return F.least(F.greatest(idx, F.lit(0)), F.lit(n_users - 1))


def _user_id(index: Column, n_users: int) -> Column:
    width = max(6, len(str(max(n_users - 1, 0))))
    return F.concat(F.lit("u"), F.lpad(index.cast("string"), width, "0"))


def _epoch_ms(start: datetime) -> int:
    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    return int(round(start.timestamp() * 1000))


def _slices(spark: SparkSession, n: int, rows_per_slice: int = 250_000) -> int:
    """Spark partitions for ``n`` generated rows (the data do not depend on it)."""
    parallelism = spark.sparkContext.defaultParallelism
    return max(1, min(max(parallelism, 1) * 4, math.ceil(n / rows_per_slice)))


def archive_frame(
    spark: SparkSession,
    n_records: int = 1_000_000,
    n_partitions: int = 8,
    n_users: int = 50_000,
    seed: int = 7,
    start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc),
    records_per_second: float = 200.0,
    quiet_fraction: float = QUIET_FRACTION,
) -> DataFrame:
    """The archive as a lazy DataFrame (see the module docstring), unwritten; partition 3 is
    quiet for ``quiet_fraction`` of the span."""
    if n_records < 1 or n_partitions < 1 or n_users < 1 or records_per_second <= 0:
        raise ValueError("n_records, n_partitions, n_users and records_per_second must be > 0")
    start_ms = _epoch_ms(start)
    # Milliseconds between successive arrivals in one partition, and the whole time span.
    step_ms = n_partitions * 1000.0 / records_per_second
    per_partition = math.ceil(n_records / n_partitions)
    span_ms = per_partition * step_ms
    # The quiet partition: its records come faster, with a gap of QUIET_FRACTION of the span in
    # the middle, so that it covers the same span as the others.
    quiet_records = n_records // n_partitions + (
        1 if QUIET_PARTITION < n_records % n_partitions else 0
    )
    quiet_step_ms = step_ms * (1.0 - quiet_fraction)
    quiet_gap_ms = span_ms * quiet_fraction
    quiet_from = quiet_records // 2

    df = spark.range(0, n_records, 1, _slices(spark, n_records))
    partition = (F.col("id") % F.lit(n_partitions)).cast("int")
    offset = F.floor(F.col("id") / F.lit(n_partitions)).cast("long")
    df = df.select("id", partition.alias("partition"), offset.alias("offset"))

    is_quiet = F.col("partition") == F.lit(QUIET_PARTITION)
    step = F.when(is_quiet, F.lit(quiet_step_ms)).otherwise(F.lit(step_ms))
    gap = F.when(is_quiet & (F.col("offset") >= F.lit(quiet_from)), F.lit(quiet_gap_ms))
    # Arrival in [offset * step, (offset + 1) * step): non-decreasing with the offset.
    arrival_ms = F.floor(
        F.lit(float(start_ms))
        + (F.col("offset").cast("double") + _uniform(seed, _JITTER)) * step
        + F.coalesce(gap, F.lit(0.0))
    ).cast("long")

    small_delay = F.least(
        F.floor(-F.log(_uniform(seed, _DELAY)) * F.lit(MEAN_DELAY_MS)), F.lit(float(MAX_DELAY_MS))
    )
    late_delay = F.floor(
        F.lit(float(LATE_MIN_MS))
        + _uniform(seed, _LATE_BY) * F.lit(float(LATE_MAX_MS - LATE_MIN_MS))
    )
    delay_ms = (
        F.when(_uniform(seed, _LATE) < F.lit(LATE_FRACTION), late_delay)
        .otherwise(small_delay)
        .cast("long")
    )

    user = _user_id(_zipf_index(_uniform(seed, _USER), n_users), n_users)
    # Box-Muller normal, then a lognormal amount rounded to cents.
    normal = F.sqrt(F.lit(-2.0) * F.log(_uniform(seed, _AMOUNT_1))) * F.cos(
        F.lit(2 * math.pi) * _uniform(seed, _AMOUNT_2)
    )
    amount = F.greatest(
        F.round(F.lit(AMOUNT_MEDIAN) * F.exp(F.lit(AMOUNT_SIGMA) * normal), 2), F.lit(0.01)
    )

    # A duplicated record is exploded into two identical rows (all columns are functions of id).
    copies = F.when(_uniform(seed, _DUP) < F.lit(DUPLICATE_FRACTION), 2).otherwise(1)
    return df.select(
        "partition",
        "offset",
        F.timestamp_millis(arrival_ms - delay_ms).alias("event_time"),
        user.alias("user_id"),
        amount.cast("double").alias("amount"),
        F.explode(F.sequence(F.lit(1), copies)).alias("_copy"),
    ).drop("_copy")


def generate_archive(
    spark: SparkSession,
    path: str,
    n_records: int = 1_000_000,
    n_partitions: int = 8,
    n_users: int = 50_000,
    seed: int = 7,
    start: datetime = datetime(2026, 1, 1, tzinfo=timezone.utc),
    records_per_second: float = 200.0,
) -> None:
    """Write the archived topic ``transactions`` to the Delta table at ``path`` (overwrite)."""
    df = archive_frame(spark, n_records, n_partitions, n_users, seed, start, records_per_second)
    _write(df, path)


#: The faulty topic: a producer clock in year 9999 on this partition, at this share of its
#: offsets, and partition 3 silent for this share of the span (hours, at 1 record/s).
BROKEN_CLOCK_PARTITION, BROKEN_CLOCK_AT = 1, 0.85
FAULTY_QUIET_FRACTION = 0.5
YEAR_9999 = datetime(9999, 1, 1, tzinfo=timezone.utc)


def faulty_archive_frame(spark: SparkSession, n_records: int = 20_000, seed: int = 17) -> DataFrame:
    """A small topic with what a person should be told about: 4 partitions at 1 record/s in
    all (about 5.6 hours), partition 3 silent for half of it, and one record of partition
    :data:`BROKEN_CLOCK_PARTITION` stamped 9999-01-01 (a broken producer clock)."""
    df = archive_frame(
        spark,
        n_records,
        n_partitions=4,
        n_users=500,
        seed=seed,
        records_per_second=1.0,
        quiet_fraction=FAULTY_QUIET_FRACTION,
    )
    broken = (F.col("partition") == BROKEN_CLOCK_PARTITION) & (
        F.col("offset") == int(n_records // 4 * BROKEN_CLOCK_AT)
    )
    return df.withColumn(
        "event_time", F.when(broken, F.lit(YEAR_9999)).otherwise(F.col("event_time"))
    )


def generate_faulty_archive(spark: SparkSession, path: str, n_records: int = 20_000) -> None:
    """Write :func:`faulty_archive_frame` to the Delta table at ``path`` (overwrite)."""
    _write(faulty_archive_frame(spark, n_records), path)


def generate_predictions(
    spark: SparkSession, path: str, archive_path: str, n_rows: int = 100_000, seed: int = 11
) -> None:
    """Write ``n_rows`` prediction events ``(user_id, event_timestamp)`` to ``path`` (overwrite).

    Users follow the archive's Zipf skew (over the archive's user-id range, so they overlap its
    users); timestamps are uniform over the archive's event-time span, read with one aggregate.
    """
    _write(predictions_frame(spark, archive_path, n_rows, seed), path)


def predictions_frame(
    spark: SparkSession, archive_path: str, n_rows: int = 100_000, seed: int = 11
) -> DataFrame:
    """The prediction events as a DataFrame, unwritten (after one aggregate over the archive)."""
    if n_rows < 1:
        raise ValueError("n_rows must be > 0")
    lo, hi, top_user = _archive_bounds(spark, archive_path)
    # User ids are "u" + a zero-padded index: the largest one bounds the archive's users.
    n_users = int(top_user[1:]) + 1
    width = len(top_user) - 1

    df = spark.range(0, n_rows, 1, _slices(spark, n_rows))
    index = _zipf_index(_uniform(seed, _PRED_USER), n_users)
    ts_ms = F.lit(lo) + F.floor(_uniform(seed, _PRED_TIME) * F.lit(float(hi - lo + 1))).cast("long")
    return df.select(
        F.concat(F.lit("u"), F.lpad(index.cast("string"), width, "0")).alias("user_id"),
        F.timestamp_millis(F.least(ts_ms, F.lit(hi))).alias("event_timestamp"),
    )


def _archive_bounds(spark: SparkSession, archive_path: str) -> tuple[int, int, str]:
    """``(first event time ms, last event time ms, largest user id)`` of an archive."""
    bounds = (
        spark.read.format("delta")
        .load(archive_path)
        .agg(
            F.unix_millis(F.min("event_time")).alias("lo"),
            F.unix_millis(F.max("event_time")).alias("hi"),
            F.max("user_id").alias("top_user"),
        )
        .first()
    )
    if bounds is None or bounds["lo"] is None:
        raise ValueError(f"archive {archive_path!r} is empty")
    return bounds["lo"], bounds["hi"], bounds["top_user"]


def user_tiers_frame(
    spark: SparkSession, archive_path: str, n_versions: int = 200_000, seed: int = 13
) -> DataFrame:
    """The SCD type II fee-tier table as a DataFrame, unwritten (after one aggregate over the
    archive for its time span and users).

    Version ``i`` belongs to user ``i % n_users``, as its ``j = i // n_users``-th version:
    ``j = 0`` is valid from a day before the archive's first event, ``j >= 1`` from a random
    instant in the ``j``-th of ``K - 1`` equal slots of the archive's span (``K`` versions for
    the busiest user), so a user's versions are strictly ordered; ``valid_to`` is the next
    version's ``valid_from`` (null for the last). Tiers: :data:`TIERS`.
    """
    if n_versions < 1:
        raise ValueError("n_versions must be > 0")
    lo, hi, top_user = _archive_bounds(spark, archive_path)
    n_users = int(top_user[1:]) + 1
    width = len(top_user) - 1
    per_user = math.ceil(n_versions / n_users)
    slot = (hi - lo + 1) / max(per_user - 1, 1)

    def valid_from(j: Column, id_col: str) -> Column:
        later = F.lit(float(lo)) + (j - 1 + _uniform(seed, _TIER_TIME, id_col)) * F.lit(slot)
        return F.when(j == 0, F.lit(lo - 86_400_000)).otherwise(F.floor(later).cast("long"))

    df = spark.range(0, n_versions, 1, _slices(spark, n_versions)).select(
        "id", (F.col("id") + n_users).alias("next_id")
    )
    j = F.floor(F.col("id") / F.lit(n_users)).cast("long")
    u = _uniform(seed, _TIER)
    (basic, basic_rate, basic_share), (plus, plus_rate, plus_share), (top, top_rate, _) = TIERS
    is_basic, is_plus = u < F.lit(basic_share), u < F.lit(basic_share + plus_share)
    tier = F.when(is_basic, basic).when(is_plus, plus).otherwise(top)
    fee_rate = F.when(is_basic, basic_rate).when(is_plus, plus_rate).otherwise(top_rate)
    has_next = F.col("next_id") < F.lit(n_versions)
    return df.select(
        F.concat(
            F.lit("u"), F.lpad((F.col("id") % F.lit(n_users)).cast("string"), width, "0")
        ).alias("user_id"),
        F.timestamp_millis(valid_from(j, "id")).alias("valid_from"),
        F.when(has_next, F.timestamp_millis(valid_from(j + 1, "next_id"))).alias("valid_to"),
        tier.alias("tier"),
        fee_rate.cast("double").alias("fee_rate"),
    )


def generate_user_tiers(
    spark: SparkSession, path: str, archive_path: str, n_versions: int = 200_000, seed: int = 13
) -> None:
    """Write the fee-tier state table (SCD type II) to ``path`` (overwrite)."""
    _write(user_tiers_frame(spark, archive_path, n_versions, seed), path)


def _write(df: DataFrame, path: str) -> None:
    df.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.generate",
        description="Generate a synthetic archived Kafka topic and prediction events (Delta).",
    )
    parser.add_argument("--archive", default="data/transactions", help="archive Delta path")
    parser.add_argument("--predictions", default="data/predictions", help="predictions path")
    parser.add_argument("--records", type=int, default=1_000_000, help="distinct Kafka records")
    parser.add_argument("--predictions-rows", type=int, default=100_000, help="prediction rows")
    parser.add_argument("--seed", type=int, default=7, help="seed of the archive")
    parser.add_argument("--user-tiers", help="also write the fee-tier state table here")
    parser.add_argument("--tier-versions", type=int, default=200_000, help="its row count")
    parser.add_argument(
        "--layouts",
        help="also write the archive, with offset holes and connector restarts, in every "
        "layout of examples.layouts under this folder (one subfolder per layout)",
    )
    args = parser.parse_args(argv)

    from feast_stream_backfill.spark import get_spark

    spark = get_spark()
    t0 = time.perf_counter()
    generate_archive(spark, args.archive, n_records=args.records, seed=args.seed)
    t1 = time.perf_counter()
    print(f"archive: {args.records:,} records -> {args.archive} in {t1 - t0:.1f}s")
    generate_predictions(
        spark, args.predictions, args.archive, n_rows=args.predictions_rows, seed=args.seed + 4
    )
    t2 = time.perf_counter()
    print(f"predictions: {args.predictions_rows:,} rows -> {args.predictions} in {t2 - t1:.1f}s")
    if args.user_tiers:
        generate_user_tiers(spark, args.user_tiers, args.archive, n_versions=args.tier_versions)
        print(f"user tiers: {args.tier_versions:,} versions -> {args.user_tiers}")
    if args.layouts:
        from examples.layouts import LAYOUTS, with_offset_holes, write_layout

        records = with_offset_holes(spark.read.format("delta").load(args.archive)).persist()
        for layout in LAYOUTS:
            write_layout(spark, records, layout, f"{args.layouts}/{layout}")
            print(f"layout {layout}: -> {args.layouts}/{layout}")
        records.unpersist()


if __name__ == "__main__":
    main()
