"""A job declared in Flink SQL against the same job declared in the core API, in one run.

Both backfill the same archive (``examples.generate``, 16 partitions) with 5-minute tumbling
windows of SUM, COUNT, AVG and MAX per user. The SQL script's watermark is emitted on every
record (the archive's event times go back within partitions, which SQL's periodic watermark
is refused on); the declared job is what ``job_from_sql`` maps it to, B = 4,999 ms. The SQL
time includes reading the script with Flink's parser (its JVM started once, before timing,
as a process that maps a second script would find it). The periodic script's check of the
archive's order, which refuses this archive, is timed on its own: it is what a periodic SQL
job adds to its backfill. Warm, the three interleaved, best of ``--repeat``; both logs
written to Spark's ``noop`` sink.

    .venv/bin/python -m bench.flink_sql_bench --records 16000000 --repeat 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.backfill_bench import WARM_UP_RECORDS
from examples.generate import generate_archive
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.errors import UnsupportedSqlError
from feast_stream_backfill.flink_sql import job_from_sql
from feast_stream_backfill.spark import get_spark

SCRIPT = """
CREATE TABLE transactions (
  user_id STRING, amount DOUBLE, event_time TIMESTAMP(3),
  WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json'%s);
INSERT INTO user_spend_5m
SELECT user_id, window_start, window_end, SUM(amount) AS amount_sum,
       COUNT(amount) AS amount_count, AVG(amount) AS amount_mean, MAX(amount) AS amount_max
FROM TABLE(TUMBLE(TABLE transactions, DESCRIPTOR(event_time), INTERVAL '5' MINUTE))
GROUP BY user_id, window_start, window_end;
"""
ON_EVENT = SCRIPT % ", 'scan.watermark.emit.strategy' = 'on-event'"
PERIODIC = SCRIPT % ""


def declared(path: str) -> StreamJob:
    """The job ``ON_EVENT`` maps to, declared by hand."""
    return StreamJob(
        topics=[ArchivedTopic("transactions", path=path)],
        keys=["user_id"],
        window=TumblingWindows(size_ms=300_000),
        aggregations=[
            Aggregation("amount", f, f"amount_{f}") for f in ("sum", "count", "mean", "max")
        ],
        trigger=EventTimeTrigger(),
        watermark=WatermarkStrategy(out_of_orderness_ms=4_999, emission="on_event"),
    )


def run(spark, job: StreamJob) -> None:
    result = backfill(spark, job)
    result.emissions.write.format("noop").mode("overwrite").save()
    result.dropped.write.format("noop").mode("overwrite").save()
    result.release()


def from_sql(spark, path: str) -> None:
    run(spark, job_from_sql(spark, ON_EVENT, {"transactions": path}))


def by_hand(spark, path: str) -> None:
    run(spark, declared(path))


def order_check(spark, path: str) -> None:
    try:
        job_from_sql(spark, PERIODIC, {"transactions": path})
    except UnsupportedSqlError:
        return
    raise AssertionError("the archive's event times go back: the periodic job is refused")


def timed(step, *args) -> float:
    started = time.perf_counter()
    step(*args)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--repeat", type=int, default=2, help="best of N runs")
    args = parser.parse_args()
    spark = get_spark()
    with tempfile.TemporaryDirectory() as tmp:
        warm, path = str(Path(tmp) / "warm_up"), str(Path(tmp) / "archive")
        generate_archive(spark, warm, n_records=WARM_UP_RECORDS, n_partitions=4)
        for step in (by_hand, from_sql, order_check):
            step(spark, warm)
        generate_archive(spark, path, n_records=args.records, n_partitions=16)
        assert job_from_sql(spark, ON_EVENT, {"transactions": path}) == declared(path)
        # Interleaved, so that neither side alone gets the archive's first (cold) read.
        runs = [
            [timed(step, spark, path) for step in (by_hand, from_sql, order_check)]
            for _ in range(args.repeat)
        ]
        hand, sql, check = (min(column) for column in zip(*runs, strict=True))
    print(f"{args.records:,} records, 16 partitions, tumbling 5 min, best of {args.repeat}")
    print(f"declared in the core API      {hand:7.1f} s")
    print(f"declared in Flink SQL         {sql:7.1f} s   {sql / hand:.3f}x")
    print(f"periodic SQL's order check    {check:7.1f} s   {check / hand:.3f}x of the backfill")


if __name__ == "__main__":
    main()
