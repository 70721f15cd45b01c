"""The cost of enrichment: the same backfill with and without a processing-time lookup join.

Generates an archive (``examples.generate.generate_archive``, 4M records by default) and an
SCD type II fee-tier table over its users (``generate_user_tiers``, 1M versions by default,
~20 per user), then times, on the same data in one run:

- the plain backfill (sum, count, mean, max of ``amount`` per user and 5 minutes);
- the same with every record enriched by the fee rate valid at its processing time and a
  derived ``fee = amount * fee_rate``, summed too.

Both write to Spark's ``noop`` sink, so only computing is timed; cached data are released
between runs.

    .venv/bin/python -m bench.enrichment_bench --records 4000000 --versions 1000000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from examples.generate import generate_archive, generate_user_tiers
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.enrichment import Lookup, ScdTable
from feast_stream_backfill.spark import get_spark

AGGREGATIONS = [Aggregation("amount", f, f"amount_{f}") for f in ("sum", "count", "mean", "max")]


def job(archive: str, tiers: str | None) -> StreamJob:
    plain = StreamJob(
        topics=[ArchivedTopic("transactions", path=archive)],
        keys=["user_id"],
        window=TumblingWindows(size_ms=5 * 60_000),
        aggregations=AGGREGATIONS,
        watermark=WatermarkStrategy(out_of_orderness_ms=5_000),
    )
    if tiers is None:
        return plain
    state = ScdTable("user_tiers", ["user_id"], tiers, valid_to="valid_to")
    return StreamJob(
        topics=plain.topics,
        keys=plain.keys,
        window=plain.window,
        aggregations=[*AGGREGATIONS, Aggregation("fee", "sum", "fees")],
        watermark=plain.watermark,
        lookups=[Lookup(state, ["fee_rate"], time="processing")],
        derived={"fee": "amount * fee_rate"},
    )


def run(spark, spec: StreamJob) -> tuple[float, dict[str, int]]:
    started = time.perf_counter()
    result = backfill(spark, spec)
    result.emissions.write.format("noop").mode("overwrite").save()
    result.dropped.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - started
    result.release()  # or the next run would reuse this one's cached data
    return elapsed, result.stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--versions", type=int, default=1_000_000, help="state table rows")
    parser.add_argument("--repeat", type=int, default=1, help="best of N runs")
    args = parser.parse_args()
    spark = get_spark()
    print(
        f"spark {spark.version}, master {spark.sparkContext.master}, "
        f"{spark.sparkContext.defaultParallelism} cores"
    )
    with tempfile.TemporaryDirectory() as tmp:
        archive, tiers = str(Path(tmp) / "archive"), str(Path(tmp) / "user_tiers")
        generate_archive(spark, archive, n_records=args.records)
        generate_user_tiers(spark, tiers, archive, n_versions=args.versions)
        run(spark, job(archive, None))  # warm-up: JIT, file listing
        plain = min(run(spark, job(archive, None))[0] for _ in range(args.repeat))
        timed = [run(spark, job(archive, tiers)) for _ in range(args.repeat)]
        enriched, stats = min(timed, key=lambda t: t[0])
        print(f"{'records':>10} {'versions':>10} {'plain s':>8} {'enriched s':>10} {'ratio':>6}")
        print(
            f"{args.records:>10,} {args.versions:>10,} {plain:>8.1f} {enriched:>10.1f} "
            f"{enriched / plain:>6.2f}"
        )
        print(f"enriched run stats: {stats}")


if __name__ == "__main__":
    main()
