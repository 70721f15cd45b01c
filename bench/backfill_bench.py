"""Backfill throughput against the plain-Spark floor, in one run on the same data.

The floor is the least any backfill must do: read the archive, take the running max of event
time per partition (the processing time), group by key and window. The floor groups by 5-minute
tumbling windows for every job; the "kind floor" is plain Spark's shape of the job's own
windows (sliding windows expanded by ``window``, sessions by ``session_window``, processing-
time windows over ``pt``, per-record firings as a running aggregate, OVER windows as a range
window), which no exact backfill can beat either. Both write to Spark's ``noop`` sink, so only
computing is timed, warm: every job and its floor first run once on a small archive
(:func:`warm_up`), and the floor once on each archive. The plugin's time includes its
validation pass, duplicate handling, watermark timeline and dropped-record accounting, and is
broken down by stage (:mod:`feast_stream_backfill.stages`): validation, processing time,
watermark, windows and triggers (with the status counts), emission log, dropped records. Peak
memory (JVM heap, and the Python workers' resident memory) of the driver and of each executor
comes from Spark's own executor metrics. ``--flink`` also times a throughput-tuned replay of
each job through real Apache Flink on the same cores (:mod:`bench.flink_replay`), what a team
runs without the plugin, and prints the plugin's ratio to it.

    .venv/bin/python -m bench.backfill_bench --sizes 4000000 16000000 32000000 --repeat 1
    .venv/bin/python -m bench.backfill_bench --sizes 16000000 --partitions 16 2
    .venv/bin/python -m bench.backfill_bench --master "$(scripts/spark_cluster.sh url)"
    .venv/bin/python -m bench.backfill_bench --sizes 16000000 --kinds all --repeat 1 --flink
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import urllib.request
from pathlib import Path

from pyspark.sql import Window
from pyspark.sql import functions as F

from bench import flink_replay
from examples.generate import generate_archive
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    OverWindows,
    PerRecordTrigger,
    ProcessingTimeTrigger,
    SessionWindows,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.stages import stage, timings

AGGREGATIONS = [Aggregation("amount", f, f"amount_{f}") for f in ("sum", "count", "mean", "max")]


def best_of(repeat: int, run, *args) -> tuple[float, dict[str, float]]:
    """The fastest of ``repeat`` runs: seconds, and its stages' seconds."""
    runs = []
    for _ in range(repeat):
        started = time.perf_counter()
        with timings() as stages:
            run(*args)
        runs.append((time.perf_counter() - started, stages))
    return min(runs, key=lambda r: r[0])


def floor(spark, path: str, kind: str = "tumbling") -> None:
    """The floor (``kind`` tumbling), or the same plain-Spark shape for ``kind``'s
    windows: sliding windows expanded by Spark's ``window``, sessions by ``session_window``,
    processing-time windows over ``pt``, per-record firings as a running aggregate (an
    unbounded aggregation's per key, its TTL left out: less than the job must do), an OVER
    window as Spark's range window over event time (without the watermark's waits and drops)."""
    records = spark.read.format("delta").load(path)
    by_offset = (
        Window.partitionBy("partition")
        .orderBy("offset")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    timed_records = records.withColumn("pt", F.max("event_time").over(by_offset))
    values = [F.expr(f"{a.function.replace('mean', 'avg')}(amount)") for a in AGGREGATIONS]
    window = {
        "sliding 5m/1m": F.window("event_time", "5 minutes", "1 minute"),
        "processing-time": F.window("pt", "5 minutes"),
        "session gap 5m": F.session_window("event_time", "5 minutes"),
        "session+lateness": F.session_window("event_time", "5 minutes"),
    }.get(kind, F.window("event_time", "5 minutes"))
    if kind == "over 10m":
        in_range = (
            Window.partitionBy("user_id")
            .orderBy(F.unix_millis("event_time"))
            .rangeBetween(-10 * MINUTE, Window.currentRow)
        )
        aggregated = timed_records.select(
            "user_id", "event_time", *[v.over(in_range) for v in values]
        )
    elif kind.startswith("unbounded"):
        so_far = Window.partitionBy("user_id").orderBy("pt", "partition", "offset")
        aggregated = timed_records.select("user_id", "pt", *[v.over(so_far) for v in values])
    elif kind == "per-record":
        so_far = Window.partitionBy("user_id", "window").orderBy("pt", "partition", "offset")
        aggregated = timed_records.withColumn("window", window).select(
            "user_id", "window", "pt", *[v.over(so_far) for v in values]
        )
    else:
        aggregated = timed_records.groupBy("user_id", window).agg(F.max("pt").alias("pt"), *values)
    aggregated.write.format("noop").mode("overwrite").save()


MINUTE = 60_000
KINDS = {
    "tumbling": {},
    "tumbling+lateness": {"trigger": EventTimeTrigger(allowed_lateness_ms=5 * MINUTE)},
    "sliding 5m/1m": {"window": SlidingWindows(5 * MINUTE, MINUTE)},
    "processing-time": {
        "window": TumblingWindows(5 * MINUTE, domain="processing"),
        "trigger": ProcessingTimeTrigger(),
    },
    "per-record": {"trigger": PerRecordTrigger()},
    "idleness 30s": {
        "watermark": WatermarkStrategy(out_of_orderness_ms=5_000, idle_timeout_ms=30_000)
    },
    "session gap 5m": {"window": SessionWindows(5 * MINUTE)},
    "session+lateness": {
        "window": SessionWindows(5 * MINUTE),
        "trigger": EventTimeTrigger(allowed_lateness_ms=5 * MINUTE),
    },
    # Flink SQL's OVER (PARTITION BY user_id ORDER BY ts RANGE BETWEEN INTERVAL '10' MINUTE
    # PRECEDING AND CURRENT ROW)
    "over 10m": {"window": OverWindows(10 * MINUTE)},
    # Flink SQL's GROUP BY user_id with 'table.exec.state.ttl' = '30 min' (job_from_sql)
    "unbounded ttl 30m": {
        "window": SessionWindows(30 * MINUTE, domain="processing"),
        "trigger": PerRecordTrigger(),
    },
    # the same without a state TTL: the state kept, an update equal to the previous not written
    "unbounded no ttl": {
        "window": SessionWindows(NEVER_EXPIRES, domain="processing"),
        "trigger": PerRecordTrigger(skip_unchanged=True),
    },
}


#: Kinds whose plain-Spark shape is the floor: tumbling windows by event time.
SAME_FLOOR = {"tumbling", "tumbling+lateness", "idleness 30s"}


def bench_job(path: str, kind: str = "tumbling") -> StreamJob:
    """The job timed for ``kind``: 5-minute windows and B = 5 s unless the kind says else."""
    return StreamJob(
        topics=[ArchivedTopic("transactions", path=path)],
        keys=["user_id"],
        aggregations=AGGREGATIONS,
        **{
            "window": TumblingWindows(size_ms=5 * MINUTE),
            "watermark": WatermarkStrategy(out_of_orderness_ms=5_000),
            **KINDS[kind],
        },
    )


def plugin(spark, path: str, kind: str = "tumbling") -> None:
    result = backfill(spark, bench_job(path, kind))
    with stage("emission log"):
        result.emissions.write.format("noop").mode("overwrite").save()
    with stage("dropped"):
        result.dropped.write.format("noop").mode("overwrite").save()
    result.release()  # or the next run would read this one's cached processing times


#: Spark's executor metrics, polled often enough to see a stage's peak.
METRICS_CONF = {
    "spark.ui.enabled": "true",
    "spark.ui.port": "0",
    "spark.executor.metrics.pollingInterval": "500ms",
    "spark.executor.processTreeMetrics.enabled": "true",
}


def peak_memory(spark) -> str:
    """Each JVM's peak heap and its Python workers' peak resident memory so far (driver,
    and executors on a cluster), from Spark's REST API."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/allexecutors"
    with urllib.request.urlopen(url) as response:
        executors = json.load(response)
    parts = []
    for executor in executors:
        peak = executor.get("peakMemoryMetrics") or {}
        heap = peak.get("JVMHeapMemory", 0) / 2**20
        python = peak.get("ProcessTreePythonRSSMemory", 0) / 2**20
        parts.append(f"{executor['id']}: heap {heap:,.0f} MiB, python {python:,.0f} MiB")
    return "; ".join(parts)


#: Records of the archive every timed job first runs on once (:func:`warm_up`).
WARM_UP_RECORDS = 200_000


def warm_up(spark, path: str, kinds: list[str]) -> None:
    """Each job and its kind floor once on a small archive, untimed: the JVM compiles the
    operators each one uses (a cold tumbling job at 16M took 28.8 s, then 22.4 and 20.8 s
    in the same process), so that no job is timed cold while the floor is timed warm."""
    generate_archive(spark, path, n_records=WARM_UP_RECORDS, n_partitions=4)
    for kind in kinds:
        floor(spark, path, kind)
        plugin(spark, path, kind)
    print(f"warmed up: each job and its floor once on {WARM_UP_RECORDS:,} records", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 4_000_000])
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs")
    parser.add_argument(
        "--kinds",
        nargs="+",
        default=["tumbling"],
        choices=[*KINDS, "all"],
        help="window kinds and triggers to time (all: every one)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        default=[16],
        help="Kafka partitions of the archive (several: one archive each, same records)",
    )
    parser.add_argument(
        "--master", help="Spark master, e.g. the URL scripts/spark_cluster.sh start prints"
    )
    parser.add_argument("--executor-memory", default="3g", help="with --master")
    parser.add_argument(
        "--flink",
        action="store_true",
        help="also replay each job through real Apache Flink (bench/flink_replay.py)",
    )
    parser.add_argument("--tmp", help="where the archives are written (default: a temp dir)")
    args = parser.parse_args()
    cluster = {"spark.master": args.master, "spark.executor.memory": args.executor_memory}
    conf = {**METRICS_CONF, **(cluster if args.master else {})}
    spark = get_spark(conf)
    print(
        f"spark {spark.version}, master {spark.sparkContext.master}, "
        f"{spark.sparkContext.defaultParallelism} cores"
    )
    kinds = list(KINDS) if "all" in args.kinds else args.kinds
    print(
        f"{'records':>10} {'parts':>5} {'job':<18} {'plugin s':>9} {'records/s':>10} "
        f"{'floor s':>8} {'ratio':>6} {'kind floor s':>12} {'ratio':>6} "
        f"{'flink s':>8} {'ratio':>6}  stages (s)"
    )
    classpath = flink_replay.build() if args.flink else None
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        warm_up(spark, str(Path(tmp) / "warm_up"), kinds)
        if classpath:
            flink_warm_up = flink_replay.export(
                spark, str(Path(tmp) / "warm_up"), str(Path(tmp) / "warm_up_flink")
            )
        for n in args.sizes:
            for partitions in args.partitions:
                path = str(Path(tmp) / f"archive_{n}_{partitions}")
                generate_archive(spark, path, n_records=n, n_partitions=partitions)
                floor(spark, path)  # warm-up: the archive's files listed and read once
                best_floor, _ = best_of(args.repeat, floor, spark, path)
                if classpath:
                    started = time.perf_counter()
                    exported = flink_replay.export(spark, path, f"{path}_flink")
                    print(
                        f"  the archive as Flink's replay reads it (a file per partition, "
                        f"offset order, no duplicates): {time.perf_counter() - started:.1f} s, "
                        "not in the Flink column",
                        flush=True,
                    )
                for kind in kinds:
                    best_plugin, stages = best_of(args.repeat, plugin, spark, path, kind)
                    same_shape = (
                        best_floor
                        if kind in SAME_FLOOR
                        else best_of(args.repeat, floor, spark, path, kind)[0]
                    )
                    breakdown = ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
                    flink = (
                        flink_replay.replay(
                            classpath, exported, kind, flink_warm_up, repeat=args.repeat
                        ).seconds
                        if classpath
                        else float("nan")
                    )
                    print(
                        f"{n:>10,} {partitions:>5} {kind:<18} {best_plugin:>9.1f} "
                        f"{n / best_plugin:>10,.0f} {best_floor:>8.1f} "
                        f"{best_plugin / best_floor:>6.2f} {same_shape:>12.1f} "
                        f"{best_plugin / same_shape:>6.2f} {flink:>8.1f} "
                        f"{best_plugin / flink:>6.2f}  {breakdown}",
                        flush=True,
                    )
                print(f"  peak memory so far: {peak_memory(spark)}", flush=True)


if __name__ == "__main__":
    main()
