"""The combined watermark sampled over the archive, with the partition holding the MIN.

At ``n`` evenly spaced moments ``t`` of processing time, each partition's watermark is its
highest event time read at or before ``t`` minus ``B + 1 ms``; the MIN over partitions (idle
ones left out, with idleness: no record for ``T``) is the job's watermark, and the partition
with the lowest is the one holding it back. Computed per (partition, moment) in Spark, so the
driver gets ``n`` rows. Sampled, not replayed: a periodic watermark lags these values by up to
one interval, and idleness is read as "no record for T" rather than Flink's tick rule
(:mod:`feast_stream_backfill.idleness` has the exact one).

The span ends at the last processing time, or earlier when a few records claim absurd times
(a producer clock in year 9999 places its partition's later records there, as processing
time is inferred from event times): at the 99.9th percentile of event times plus a tenth of
the span.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from feast_stream_backfill.columns import EVENT_TIME, PARTITION, PROCESSING_TIME, TOPIC
from feast_stream_backfill.explain.prepared import Prepared

_K = "_sample"


@dataclass
class WatermarkSamples:
    """``frame``: one row per moment: ``t`` (epoch ms), ``watermark`` (ms; None while a
    partition has read nothing), ``holder`` ("topic/partition" with the lowest watermark),
    ``runner_up`` (the next lowest watermark, None with one partition); ``step_ms``; and
    ``beyond``: records read after the span (absurd times)."""

    frame: pd.DataFrame
    step_ms: int
    beyond: int


def span(distinct: DataFrame) -> tuple[int, int, int]:
    """``(first pt, end of the span, records after it)``."""
    row = distinct.agg(
        F.min(PROCESSING_TIME).alias("lo"),
        F.max(PROCESSING_TIME).alias("hi"),
        F.percentile_approx(EVENT_TIME, [0.001, 0.999], 10_000).alias("q"),
    ).first()
    low_q, high_q = row["q"]
    end = min(row["hi"], high_q + max((high_q - low_q) // 10, 60_000))
    beyond = distinct.where(F.col(PROCESSING_TIME) > end).count() if end < row["hi"] else 0
    return row["lo"], end, beyond


def watermark_samples(prepared: Prepared, n: int = 800) -> WatermarkSamples:
    strategy = prepared.job.watermark
    start, end, beyond = span(prepared.distinct)
    interval = strategy.interval_ms or 1
    step = max(interval, -(-(end - start) // n // interval) * interval)
    n = (end - start) // step + 1
    bound = strategy.out_of_orderness_ms
    records = prepared.distinct.where(F.col(PROCESSING_TIME) <= end)
    bucket = F.ceil((F.col(PROCESSING_TIME) - start) / F.lit(step)).cast("long")
    per_bucket = records.groupBy(TOPIC, PARTITION, bucket.alias(_K)).agg(
        F.max(EVENT_TIME).alias("_max_et"), F.max(PROCESSING_TIME).alias("_last_pt")
    )
    spark = prepared.distinct.sparkSession
    moments = spark.range(n).select(F.col("id").alias(_K))
    partitions = records.select(TOPIC, PARTITION).distinct()
    filled = moments.crossJoin(F.broadcast(partitions)).join(
        per_bucket, [TOPIC, PARTITION, _K], "left"
    )
    so_far = (
        Window.partitionBy(TOPIC, PARTITION).orderBy(_K).rowsBetween(Window.unboundedPreceding, 0)
    )
    t = F.lit(start) + F.col(_K) * step
    level = filled.select(
        _K,
        F.concat_ws("/", F.col(TOPIC), F.col(PARTITION).cast("string")).alias("_p"),
        (F.max("_max_et").over(so_far) - bound - 1).alias("_sample_w"),
        F.max("_last_pt").over(so_far).alias("_seen"),
        t.alias("t"),
    )
    if strategy.detects_idleness:
        active = F.col("_seen") > F.col("t") - strategy.idle_timeout_ms
        level = level.where(active | F.col("_sample_w").isNull())
    # Nulls first in an ascending sort: a partition that has read nothing holds the MIN.
    ranked = level.groupBy(_K, "t").agg(
        F.sort_array(F.collect_list(F.struct(F.col("_sample_w"), F.col("_p")))).alias("_by_w")
    )
    rows = ranked.select(
        "t",
        F.col("_by_w")[0]["_sample_w"].alias("watermark"),
        F.col("_by_w")[0]["_p"].alias("holder"),
        F.col("_by_w")[1]["_sample_w"].alias("runner_up"),
    ).orderBy("t")
    return WatermarkSamples(rows.toPandas(), step, beyond)
