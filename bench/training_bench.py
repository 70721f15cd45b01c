"""Training-set joins, in one run on the same data: the plugin's as-of join against Feast's own
Spark offline store and the plain-Spark floor.

Data: an emission log of ``--emissions`` rows (Delta, written by Spark), Zipf-skewed users
(``examples.generate``'s skew: the hottest of 50k users has ~6%), emit times over 7 days at
second resolution, so the hot keys have several emissions at the same instant (told apart by
``emit_sequence``, as in a real log); prediction events with the same skew, uniform in time.

* plugin: ``training_join.as_of_join`` (what the offline store runs per view), ttl 1 h;
* Feast: the same log as an ordinary ``FeatureView`` over a ``SparkSource``, through
  ``FeatureStore.get_historical_features`` with Feast's ``SparkOfflineStore`` (its SQL template
  joins every prediction with every emission of its key within the ttl, then ranks them);
* floor: the union + carry-forward join in plain Spark (:func:`floor`): read both tables, one
  shuffle by key, one sort by time, one pass carrying the last emission, the ttl, the rows
  written: the least a correct sort-based join does;
* sort only: the floor of earlier runs, both tables' keys and times sorted per key to Spark's
  ``noop`` sink: no value carried, nothing written, so below what any join can do.

The plugin, the floor and Feast write their result as Parquet (timed), after a warm-up read of
both tables. Feast runs under a time limit (its Spark jobs are cancelled when it is reached) and is
reported as "did not finish" then: by default the limit is
``--feast-ratio`` (60) times the plugin's time, so a cancelled run still shows the ratio's lower
bound. Rows Feast returns beyond the prediction count are its
duplicates on emit-time ties.

    .venv/bin/python -m bench.training_bench --emissions 4000000 --predictions 100000 1000000

``--probabilities`` also times the plugin's join with each row's probability that the live job
had its values visible (:func:`as_of_join` with ``residual_quantiles``), written as Parquet.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import threading
import time
from datetime import timedelta
from functools import partial
from pathlib import Path

from feast import Entity, FeatureStore, FeatureView, Field, RepoConfig, ValueType
from feast.infra.offline_stores.contrib.spark_offline_store.spark import SparkOfflineStoreConfig
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.types import Float64, Int64, String
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from examples.generate import _uniform, _user_id, _zipf_index
from feast_stream_backfill.calibration.fit import LEVELS
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.training_join import as_of_join

USERS = 50_000
SPAN_MS = 7 * 24 * 3600 * 1000
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
TTL = timedelta(hours=1)
FEATURES = ["spend_5m", "transactions_5m"]


def write_emissions(spark: SparkSession, path: str, n: int, seed: int = 5) -> None:
    """An emission log: one row per firing, ties on (user, emit_time) numbered by sequence."""
    ids = spark.range(0, n, 1, max(8, n // 250_000))
    emit_ms = F.lit(START_MS) + F.floor(_uniform(seed, 1) * SPAN_MS / 1000).cast("long") * 1000
    rows = ids.select(
        _user_id(_zipf_index(_uniform(seed, 0), USERS), USERS).alias("user_id"),
        F.timestamp_millis(emit_ms).alias("emit_time"),
        F.round(_uniform(seed, 2) * 500, 2).alias("spend_5m"),
        (F.floor(_uniform(seed, 3) * 20) + 1).cast("long").alias("transactions_5m"),
        "id",
    )
    tie = Window.partitionBy("user_id", "emit_time").orderBy("id")
    rows.withColumn("emit_sequence", F.row_number().over(tie) - 1).drop("id").write.format(
        "delta"
    ).mode("overwrite").save(path)


def write_predictions(spark: SparkSession, path: str, n: int, seed: int = 7) -> None:
    ids = spark.range(0, n, 1, max(4, n // 250_000))
    ts = F.lit(START_MS) + F.floor(_uniform(seed, 1) * SPAN_MS).cast("long")
    ids.select(
        _user_id(_zipf_index(_uniform(seed, 0), USERS), USERS).alias("user_id"),
        F.timestamp_millis(ts).alias("event_timestamp"),
        F.col("id").alias("label"),
    ).write.format("delta").mode("overwrite").save(path)


#: A calibrated residual distribution for ``--probabilities``: 1 s, then exponential with a
#: mean of 500 ms, as a live job's read delay and consumer lag give (quantiles at LEVELS).
RESIDUALS = [1000 - 500 * math.log(max(1 - level, 1e-4)) for level in LEVELS]


def plugin(
    spark: SparkSession, emissions: str, predictions: str, quantiles: list[float] | None = None
) -> DataFrame:
    return as_of_join(
        spark.read.format("delta").load(predictions),
        spark.read.format("delta").load(emissions),
        ["user_id"],
        "event_timestamp",
        FEATURES,
        ttl_seconds=TTL.total_seconds(),
        residual_quantiles=quantiles,
    )


def floor(spark: SparkSession, emissions: str, predictions: str) -> DataFrame:
    """The least a correct as-of join does, in plain Spark: read both tables, one shuffle by
    key, one sort by time (emissions first at equal times, then by sequence), one running pass
    carrying the last emission (its time and features as one value, so a null feature is carried
    as null), the ttl, and the prediction rows with their features (written like the plugin's)."""
    preds = spark.read.format("delta").load(predictions)
    emitted = (
        spark.read.format("delta")
        .load(emissions)
        .select(
            "user_id",
            F.col("emit_time").alias("event_timestamp"),
            F.lit(0).alias("side"),
            "emit_sequence",
            F.struct("emit_time", *FEATURES).alias("v"),
        )
    )
    both = emitted.unionByName(preds.withColumn("side", F.lit(1)), allowMissingColumns=True)
    so_far = (
        Window.partitionBy("user_id")
        .orderBy("event_timestamp", "side", "emit_sequence")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    carried = both.withColumn("v", F.last("v", ignorenulls=True).over(so_far)).where("side = 1")
    fresh = F.col("v.emit_time") >= F.col("event_timestamp") - F.expr("INTERVAL 1 HOUR")
    return carried.select(
        *preds.columns, *[F.when(fresh, F.col("v")[f]).alias(f) for f in FEATURES]
    )


def sort_only(spark: SparkSession, emissions: str, predictions: str) -> DataFrame:
    """The floor of earlier runs (kept for comparison): both tables' keys and times, partitioned
    by key and sorted by time, to the ``noop`` sink. Not a join: it carries no value and writes
    nothing."""
    left = spark.read.format("delta").load(predictions).select("user_id", "event_timestamp")
    right = (
        spark.read.format("delta")
        .load(emissions)
        .select("user_id", F.col("emit_time").alias("event_timestamp"))
    )
    both = left.unionByName(right)
    return both.repartition("user_id").sortWithinPartitions("user_id", "event_timestamp")


def pairs(spark: SparkSession, emissions: str, predictions: str) -> int:
    """Row pairs Feast's point-in-time join evaluates: its join is on the key alone (the time
    conditions filter the pairs afterwards), so every prediction meets every emission of its key.
    """
    counts = [
        spark.read.format("delta").load(path).groupBy("user_id").count()
        for path in (predictions, emissions)
    ]
    product = counts[0].join(counts[1].withColumnRenamed("count", "n"), "user_id")
    return product.select(F.sum(F.col("count") * F.col("n"))).first()[0]


def feast_store(workdir: Path, emissions: str) -> FeatureStore:
    """Feast's Spark offline store, the emission log as an ordinary feature view."""
    config = RepoConfig(
        project="bench",
        provider="local",
        registry=str(workdir / "registry.db"),
        offline_store=SparkOfflineStoreConfig(type="spark"),
        online_store={"type": "sqlite", "path": str(workdir / "online.db")},
        entity_key_serialization_version=3,
        repo_path=str(workdir),
    )
    store = FeatureStore(config=config)
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    view = FeatureView(
        name="spend",
        entities=[user],
        ttl=TTL,
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend_5m", dtype=Float64),
            Field(name="transactions_5m", dtype=Int64),
        ],
        source=SparkSource(  # Feast's SparkSource reads Delta through a query
            name="emission_log",
            query=f"SELECT * FROM delta.`{emissions}`",
            timestamp_field="emit_time",
        ),
    )
    store.apply([user, view])
    return store


def feast(store: FeatureStore, spark: SparkSession, predictions: str) -> DataFrame:
    entity_df = spark.read.format("delta").load(predictions)
    refs = [f"spend:{f}" for f in FEATURES]
    return store.get_historical_features(entity_df=entity_df, features=refs).to_spark_df()


def timed_write(
    spark: SparkSession, make, path: str | None, limit: float | None = None
) -> float | None:
    """Seconds to build and write ``make()``'s result (to Spark's ``noop`` sink without a path);
    None when over ``limit`` (then cancelled)."""
    outcome: dict = {}

    def run() -> None:
        spark.sparkContext.setJobGroup("bench", "bench", interruptOnCancel=True)
        try:
            writer = make().write.mode("overwrite")
            writer.parquet(path) if path else writer.format("noop").save()
            outcome["done"] = True
        except Exception as exc:  # reported, not raised: the other cases still run
            outcome["error"] = exc

    started = time.perf_counter()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(limit)
    elapsed = time.perf_counter() - started
    if worker.is_alive():
        spark.sparkContext.cancelJobGroup("bench")
        worker.join(120)
        return None
    if "error" in outcome:
        print(f"    failed after {elapsed:.1f} s: {str(outcome['error']).splitlines()[0][:300]}")
        return None
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emissions", type=int, default=4_000_000)
    parser.add_argument("--predictions", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument(
        "--feast-limit",
        type=float,
        default=None,
        help="seconds Feast may run; default: --feast-ratio times the plugin's time; 0: skip",
    )
    parser.add_argument("--feast-ratio", type=float, default=60.0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--repeat", type=int, default=1, help="plugin and floor runs; best kept")
    parser.add_argument(
        "--probabilities",
        action="store_true",
        help="also the plugin's join with each row's probability (with_probabilities)",
    )
    args = parser.parse_args()

    spark = get_spark({"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "16"})
    work = Path(args.workdir or tempfile.mkdtemp(prefix="training_bench_"))
    emissions = str(work / "emissions")
    started = time.perf_counter()
    if (work / "emissions" / "_delta_log").exists():  # --workdir of an earlier run: same data
        print(f"emissions reused from {emissions}")
    else:
        write_emissions(spark, emissions, args.emissions)
    print(f"{args.emissions:,} emissions ready in {time.perf_counter() - started:.1f} s ({work})")
    store = feast_store(work / "feast", emissions)

    print(f"{'predictions':>12} {'floor':>8} {'plugin':>8} {'Feast':>10} {'Feast/plugin':>13}")
    for n in args.predictions:
        predictions = str(work / f"predictions_{n}")
        if not (Path(predictions) / "_delta_log").exists():
            write_predictions(spark, predictions, n)
        for table in (emissions, predictions):  # warm-up: JIT, Delta log, OS cache
            spark.read.format("delta").load(table).write.format("noop").mode("overwrite").save()
        runs: dict[str, list[float]] = {"plugin": [], "floor": [], "sort": []}
        cases = [
            ("plugin", plugin, str(work / "o2")),
            ("floor", floor, str(work / "o1")),
            ("sort", sort_only, None),
        ]
        if args.probabilities:
            runs["probabilities"] = []
            cases.append(("probabilities", partial(plugin, quantiles=RESIDUALS), str(work / "o4")))
        for _ in range(args.repeat):  # alternated, so that a busy moment hits both
            for name, make, out in cases:
                runs[name].append(
                    timed_write(spark, partial(make, spark, emissions, predictions), out)
                )
        t_plugin, t_floor, t_sort = (min(runs[name]) for name in ("plugin", "floor", "sort"))
        if args.probabilities:
            t_odds = min(runs["probabilities"])
            print(
                f"    with probabilities {t_odds:.1f} s: {t_odds / t_plugin:.2f}x the plugin's "
                f"join, {t_odds / t_floor:.2f}x the floor"
            )
        if args.repeat > 1:
            print(
                "    "
                + "; ".join(f"{k}: {', '.join(f'{t:.1f}' for t in v)} s" for k, v in runs.items())
            )
        limit = args.feast_limit if args.feast_limit is not None else args.feast_ratio * t_plugin
        t_feast = limit > 0 and timed_write(
            spark, partial(feast, store, spark, predictions), str(work / "o3"), limit
        )
        if not limit:
            feast_cell, ratio = "skipped", "-"
        elif t_feast:
            feast_cell, ratio = f"{t_feast:>9.1f}s", f"{t_feast / t_plugin:>12.1f}x"
        else:
            feast_cell, ratio = f"> {limit:.0f} s", f"> {limit / t_plugin:.0f}x"
        print(f"{n:>12,} {t_floor:>7.1f}s {t_plugin:>7.1f}s {feast_cell:>10} {ratio:>13}")
        if t_feast:
            out = spark.read.parquet(str(work / "o3")).count()
            print(f"    Feast returned {out:,} rows for {n:,} predictions: {out - n:,} duplicates")
        elif limit:
            print(f"    Feast did not finish in {limit:.0f} s (cancelled)")
        print(f"    Feast's join compares {pairs(spark, emissions, predictions):,} row pairs")
        mine = spark.read.parquet(str(work / "o2"))
        differ = mine.exceptAll(spark.read.parquet(str(work / "o1"))).count()
        print(f"    rows of the plugin's result not in the floor's: {differ}")
        print(
            f"    plugin returned {mine.count():,} rows; plugin/floor = {t_plugin / t_floor:.2f}; "
            f"sort only (the earlier floor) {t_sort:.1f} s, plugin/sort only = "
            f"{t_plugin / t_sort:.2f}"
        )


if __name__ == "__main__":
    main()
