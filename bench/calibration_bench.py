"""Calibration against a live job made by real Flink, with known delays, and how sure the
training values are, checked on the values the live job served.

The live run (``tests.conformance.live``): a synthetic topic read by real Flink 2.3 at true
processing times that are not the backfill's (D2, a random consumer lag per record, optionally
a slow partition and a restart from a checkpoint), its writes (firing time + D3 + sink jitter)
and the values its Redis served at random request times. The bench then, in one run:

1. backfills the job as a user declares it (D2 = D3 = 0: the assumption calibration tests);
2. calibrates it against the writes, and prints the fit beside the truth;
3. joins the served requests as a training set with probabilities, and compares each value
   with the one the live job served: a reliability table (predicted probability in tenths
   against the share of requests served exactly that value) and Brier scores against the
   point backfill (probability 1) and a naive event-time join (a window visible at its end);
4. times one backfill, the calibration, and the training join with and without
   probabilities.

The served requests are held out: by default calibration reads the writes alone. With
``--calibrate-from requests`` (or ``both``) it reads half the requests (split by request id)
as Feast's feature logging keeps them, and the other half is held out.

    .venv/bin/python -m bench.calibration_bench --requests-per-key-hour 70 \\
        --slow-partition 3 --restart-at 5460 --trigger per_record
    .venv/bin/python -m bench.calibration_bench --requests-per-key-hour 140 \\
        --calibrate-from requests
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import pandas as pd
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.calibration import ObservedServes, ObservedWrites, calibrate
from feast_stream_backfill.calibration.matching import same_value
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.training_join import as_of_join
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger
from tests.conformance.live import VIEW, LiveLog, LiveParams, live_log

FEATURE = "spend_5m"
AGGREGATIONS = [
    Aggregation("amount", "sum", "spend_5m"),
    Aggregation("amount", "count", "transactions_5m"),
    Aggregation("amount", "max", "max_amount_5m"),
]


def _timestamps(df: DataFrame, *columns: str) -> DataFrame:
    return df.withColumns({c: F.timestamp_millis(F.col(c)) for c in columns})


def declared_job(spark: SparkSession, live: LiveLog) -> StreamJob:
    """The job as a user declares it: the live job's window, bound and trigger, with the
    default delays (D2 = D3 = 0)."""
    p = live.params
    archive = spark.createDataFrame(live.archive)
    archive = archive.withColumn("event_time", F.timestamp_millis("event_time"))
    trigger = PerRecordTrigger() if p.trigger == "per_record" else EventTimeTrigger()
    return StreamJob(
        topics=[ArchivedTopic("transactions", dataframe=archive)],
        keys=["user_id"],
        window=TumblingWindows(size_ms=p.window_ms),
        aggregations=AGGREGATIONS,
        trigger=trigger,
        watermark=WatermarkStrategy(out_of_orderness_ms=p.bound_ms, interval_ms=p.interval_ms),
    )


def timed(what: str, action):
    started = time.monotonic()
    result = action()
    seconds = time.monotonic() - started
    print(f"{what}: {seconds:.1f} s")
    return result, seconds


def split_requests(served: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Half the requests for calibration, half held out, by a hash of the request id."""
    half = pd.util.hash_pandas_object(served["__request_id"], index=False) % 2 == 0
    return served[half.to_numpy()], served[~half.to_numpy()]


def served_points(spark: SparkSession, served: pd.DataFrame) -> DataFrame:
    served = served[["user_id", "__log_timestamp", f"{VIEW}__{FEATURE}"]]
    served = served.rename(columns={"__log_timestamp": "at", f"{VIEW}__{FEATURE}": "served"})
    return _timestamps(spark.createDataFrame(served), "at")


def naive_log(emissions: DataFrame) -> DataFrame:
    """What an event-time join sees: each window's last value, visible at the window's end."""
    last = Window.partitionBy("user_id", "window_start").orderBy(
        F.col("emit_time").desc(), F.col("emit_sequence").desc()
    )
    final = emissions.withColumn("_n", F.row_number().over(last)).filter("_n = 1")
    return final.select(
        "user_id", F.col("window_end").alias("emit_time"), F.lit(0).alias("emit_sequence"), FEATURE
    )


def reliability(joined: DataFrame) -> pd.DataFrame:
    """Per tenth of predicted probability: rows, mean prediction, share served that value."""
    matched = same_value(F.col(FEATURE), F.col("served")).cast("double")
    tenth = F.least(F.floor(F.col("visible_probability") * 10), F.lit(9)).cast("int")
    return (
        joined.select(tenth.alias("bin"), "visible_probability", matched.alias("match"))
        .groupBy("bin")
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.avg("visible_probability").alias("predicted"),
            F.avg("match").alias("observed"),
        )
        .orderBy("bin")
        .toPandas()
    )


def brier(joined: DataFrame, probability) -> float:
    matched = same_value(F.col(FEATURE), F.col("served")).cast("double")
    return joined.select(F.avg((probability - matched) ** 2)).first()[0]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.calibration_bench")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--hours", type=float, default=3.0)
    parser.add_argument("--requests-per-key-hour", type=float, default=70.0)
    parser.add_argument("--trigger", default="default", choices=["default", "per_record"])
    parser.add_argument("--slow-partition", type=int)
    parser.add_argument("--slow-extra-ms", type=int, default=30_000)
    parser.add_argument("--restart-at", type=float, help="seconds after the start")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--calibrate-from",
        default="writes",
        choices=["writes", "requests", "both"],
        help="what calibration reads (requests: half of them; the rest are held out)",
    )
    args = parser.parse_args()
    params = replace(
        LiveParams(),
        records=args.records,
        keys=args.keys,
        hours=args.hours,
        requests_per_key_hour=args.requests_per_key_hour,
        trigger=args.trigger,
        slow_partition=args.slow_partition,
        slow_extra_ms=args.slow_extra_ms,
        restart_at_s=args.restart_at,
        seed=args.seed,
    )
    live, _ = timed("live run on real Flink (not timed against anything)", lambda: live_log(params))
    truth = live.truth
    print(
        f"live run: {len(live.archive):,} records, {len(live.writes):,} writes, "
        f"{len(live.served):,} served requests; D2 {params.d2_ms} ms + lag (exponential, mean "
        f"{params.lag_mean_ms:.0f} ms), D3 {params.d3_ms} ms + jitter (mean "
        f"{params.jitter_mean_ms:.0f} ms); slow partition {truth['slow_partition']}; restart "
        f"{truth['restart']}"
    )
    spark = get_spark()
    job = declared_job(spark, live)
    result, backfill_s = timed(
        "one backfill", lambda: backfill(spark, job).emissions.localCheckpoint()
    )
    emissions = result
    writes = _timestamps(
        spark.createDataFrame(live.writes),
        "window_start",
        "window_end",
        "processing_time",
        "write_time",
    )
    observed = ObservedWrites(dataframe=writes, processing_time="processing_time")
    held_out, serves = live.served, None
    if args.calibrate_from != "writes":
        logged, held_out = split_requests(live.served)
        requests = _timestamps(spark.createDataFrame(logged), "__log_timestamp").localCheckpoint()
        serves = ObservedServes(view=VIEW, dataframe=requests)
        print(f"calibrating from {len(logged):,} requests; {len(held_out):,} held out")
    if args.calibrate_from == "requests":
        observed = None
    calibration, calibrate_s = timed(
        f"calibrate from {args.calibrate_from}",
        lambda: calibrate(spark, job, observed, emissions, serves),
    )
    print("\n".join(calibration.summary()))
    print(f"calibrate / one backfill: {calibrate_s / backfill_s:.2f}")

    points = served_points(spark, held_out).localCheckpoint()
    quantiles = calibration.delays.quantiles

    def join(probabilities: bool) -> DataFrame:
        return as_of_join(
            points,
            emissions,
            ["user_id"],
            "at",
            [FEATURE],
            residual_quantiles=quantiles if probabilities else None,
        )

    _, plain_s = timed(
        "training join", lambda: join(False).write.format("noop").mode("overwrite").save()
    )
    _, with_s = timed(
        "training join with probabilities",
        lambda: join(True).write.format("noop").mode("overwrite").save(),
    )
    print(f"with probabilities / plain: {with_s / plain_s:.2f}")
    joined = join(True).localCheckpoint()
    table = reliability(joined)
    table["gap"] = (table["observed"] - table["predicted"]).abs()
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    naive = as_of_join(points, naive_log(emissions), ["user_id"], "at", [FEATURE])
    print(
        f"Brier: with probabilities {brier(joined, F.col('visible_probability')):.5f}, "
        f"point backfill {brier(joined, F.lit(1.0)):.5f}, "
        f"naive event-time join {brier(naive, F.lit(1.0)):.5f} "
        f"({joined.count():,} served requests)"
    )


if __name__ == "__main__":
    main()
