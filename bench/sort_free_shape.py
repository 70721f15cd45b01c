"""The work a sort-free event-time path would do, timed against the floor in one run.

Not the plugin and not its semantics: a measurement of the next design (README, issue 12's
"Not done" list). With D1 = 0 a record's processing time is ``D2 + max(et)`` over its
partition's offsets up to it, so the first record of a partition with ``et >= v`` is read at
``D2 + et``, and "was record ``o`` read before time ``t``?" is "is ``o`` before the first offset
with ``et >= t - D2``?". Both are first offsets per threshold, which hash aggregates find
without sorting the records by offset (the floor's and the plugin's costliest step):

1. counts: records and distinct offsets (64-offset words, set bits): no duplicates, no sort;
2. cells: per (partition, 1-second cell of event time) the first offset, then a suffix
   minimum over a partition's cells (a few rows per second of archive, not per record);
3. boundary: the records in the cells that hold a threshold (each window end + B + 1 ms),
   for exact first offsets there;
4. windows: assign, a broadcast join of each (partition, window end)'s first passing offset,
   a status from comparing offsets, group by key, window and status.

    .venv/bin/python -m bench.sort_free_shape /path/to/archive [--repeat 2]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from bench.backfill_bench import AGGREGATIONS, METRICS_CONF, floor
from feast_stream_backfill.spark import get_spark

WINDOW_MS, BOUND_MS, CELL_MS = 300_000, 5_000, 1_000


def timed(name: str, run: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - started
    print(f"  {name:<34} {seconds:6.1f} s", flush=True)
    return seconds, result


def noop(df: DataFrame) -> None:
    df.write.format("noop").mode("overwrite").save()


def shape(spark, path: str) -> float:
    """Seconds for the four passes over the archive at ``path``."""
    raw = spark.read.format("delta").load(path)
    raw = raw.withColumn("et", F.unix_millis("event_time"))
    cell = F.floor(F.col("et") / CELL_MS)
    bit = F.expr("shiftleft(1L, int(offset & 63))")
    words = raw.groupBy("partition", F.shiftright("offset", 6).alias("word")).agg(
        F.bit_or(bit).alias("bits"), F.count(F.lit(1)).alias("n")
    )
    counted = words.agg(F.sum(F.bit_count("bits")).alias("distinct"), F.sum("n").alias("n"))
    total, _ = timed("1 counts", lambda: counted.first())

    cells = raw.groupBy("partition", cell.alias("cell")).agg(F.min("offset").alias("first"))
    later = Window.partitionBy("partition").orderBy(F.desc("cell"))
    suffix = cells.withColumn("from_here", F.min("first").over(later))
    ends = raw.select((F.col("et") - F.pmod("et", F.lit(WINDOW_MS)) + WINDOW_MS).alias("end"))

    def cells_and_window_ends() -> list:
        noop(suffix)
        return ends.distinct().collect()  # one row per window end: small

    seconds, end_rows = timed("2 cells, suffix minimum", cells_and_window_ends)
    total += seconds

    # a window's watermark threshold: maxTs + B + 1 ms = end + B
    thresholds = spark.createDataFrame(
        [(row["end"] + BOUND_MS,) for row in end_rows], "v long"
    ).withColumn("cell", F.floor(F.col("v") / CELL_MS))
    boundary = (
        raw.withColumn("cell", cell)
        .join(F.broadcast(thresholds), "cell")
        .where(F.col("et") >= F.col("v"))
        .groupBy("partition", "v")
        .agg(F.min("offset").alias("first"))
    )
    seconds, first_rows = timed("3 boundary cells", lambda: boundary.collect())
    total += seconds

    passing = spark.createDataFrame(
        [(r["partition"], r["v"] - BOUND_MS, r["first"]) for r in first_rows],
        "partition int, end long, first long",
    )
    start = F.col("et") - F.pmod("et", F.lit(WINDOW_MS))
    windowed = raw.withColumn("start", start).withColumn("end", F.col("start") + WINDOW_MS)
    joined = windowed.join(F.broadcast(passing), ["partition", "end"], "left")
    late = F.col("first").isNotNull() & (F.col("offset") >= F.col("first"))
    grouped = (
        joined.withColumn("status", F.when(late, "dropped").otherwise("on_time"))
        .groupBy("user_id", "start", "end", "status")
        .agg(
            F.count(F.lit(1)).alias("n"),
            *[F.expr(f"{a.function.replace('mean', 'avg')}(amount)") for a in AGGREGATIONS],
        )
    )
    seconds, _ = timed("4 windows, group by", lambda: noop(grouped))
    return total + seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("archive")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    spark = get_spark(dict(METRICS_CONF))
    spark.sparkContext.setLogLevel("ERROR")
    floor(spark, args.archive)  # warm-up
    floor_s, _ = timed("floor", lambda: floor(spark, args.archive))
    for run in range(1, args.repeat + 1):
        seconds = shape(spark, args.archive)
        print(f"run {run}: {seconds:.1f} s, {seconds / floor_s:.2f}x the floor", flush=True)


if __name__ == "__main__":
    main()
