"""What a 5 x 5 grid of the advisor costs, as a ratio to one backfill, on the same archive.

One backfill: :func:`feast_stream_backfill.backfill` with the emission log and dropped records
written to Spark's ``noop`` sink. The grid: :func:`explain.prepared.prepare` and
:func:`explain.advisor.advise` over 5 bounds B x 5 lateness values L (the 25 cells' drops,
pending records and delays), then again with prediction points (the wrong-point counts too).

    .venv/bin/python -m bench.advisor_bench --records 4000000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from examples.generate import generate_archive, generate_predictions
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.explain.advisor import advise, grid
from feast_stream_backfill.explain.prepared import prepare
from feast_stream_backfill.spark import get_spark

BOUNDS_MS = [0, 2_000, 5_000, 30_000, 120_000]
LATENESS_MS = [0, 10_000, 60_000, 300_000, 900_000]


def timed(run) -> tuple[float, object]:
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--predictions", type=int, default=100_000)
    parser.add_argument("--master", help="spark.master (default: local[*])")
    args = parser.parse_args()
    spark = get_spark({"spark.master": args.master} if args.master else None)
    with tempfile.TemporaryDirectory() as tmp:
        archive, predictions = str(Path(tmp) / "archive"), str(Path(tmp) / "predictions")
        generate_archive(spark, archive, n_records=args.records)
        generate_predictions(spark, predictions, archive, n_rows=args.predictions)
        job = StreamJob(
            topics=[ArchivedTopic("transactions", path=archive)],
            keys=["user_id"],
            window=TumblingWindows(300_000),
            aggregations=[Aggregation("amount", f, f"amount_{f}") for f in ("sum", "count")],
            watermark=WatermarkStrategy(out_of_orderness_ms=5_000),
        )

        def one_backfill() -> None:
            result = backfill(spark, job)
            result.emissions.write.format("noop").mode("overwrite").save()
            result.dropped.write.format("noop").mode("overwrite").save()
            result.release()

        def the_grid(with_points: bool):
            prepared = prepare(spark, job)
            points = spark.read.format("delta").load(predictions) if with_points else None
            table = advise(prepared, grid(BOUNDS_MS, LATENESS_MS), points)
            prepared.release()
            return table

        single, _ = timed(one_backfill)
        cells, table = timed(lambda: the_grid(False))
        with_points, _ = timed(lambda: the_grid(True))
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.3f}", na_rep="-"))
    print(f"records {args.records:,}; one backfill {single:.1f} s")
    print(f"5 x 5 grid: {cells:.1f} s = {cells / single:.2f} backfills")
    print(
        f"5 x 5 grid with {args.predictions:,} prediction points: {with_points:.1f} s = "
        f"{with_points / single:.2f} backfills (25 separate backfills would be 25)"
    )


if __name__ == "__main__":
    main()
