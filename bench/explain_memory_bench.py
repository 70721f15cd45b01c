"""The advisor's grid and the driver's heap: time, collections and peak heap per setting.

Generates an archive (``examples.generate``; ``--rate`` records per second sets its span),
then runs :func:`explain.prepared.prepare` and :func:`explain.advisor.advise` over a
``--bounds`` x ``--lateness`` grid in a driver of ``--heap``, in passes of
:func:`explain.memory.cells_per_pass` cells (``--one-pass``: the whole grid at once), under
:func:`explain.memory.heap_guard`. Prints the elapsed time, the JVM's full collections and
share of time collecting, and the peak heap used (sampled every second).

    .venv/bin/python -m bench.explain_memory_bench --records 98000 --rate 0.0126 --heap 3g
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

from examples.generate import generate_archive
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
)
from feast_stream_backfill.explain.advisor import advise, grid
from feast_stream_backfill.explain.memory import (
    DriverMemoryError,
    cells_per_pass,
    gc_sample,
    heap_guard,
    heap_mib,
)
from feast_stream_backfill.explain.prepared import prepare
from feast_stream_backfill.spark import get_spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=98_000)
    parser.add_argument("--rate", type=float, default=200.0, help="records per second")
    parser.add_argument("--heap", default="3g", help="spark.driver.memory")
    parser.add_argument("--bounds", default="0,2000,5000,30000,120000", help="B values, ms")
    parser.add_argument("--lateness", default="0,10000,60000,300000,900000", help="L, ms")
    parser.add_argument("--one-pass", action="store_true")
    args = parser.parse_args()
    spark = get_spark({"spark.driver.memory": args.heap})
    cells = grid(
        [int(b) for b in args.bounds.split(",")], [int(v) for v in args.lateness.split(",")]
    )
    per_pass = len(cells) if args.one_pass else cells_per_pass(spark)
    with tempfile.TemporaryDirectory() as tmp:
        archive = str(Path(tmp) / "archive")
        generate_archive(spark, archive, n_records=args.records, records_per_second=args.rate)
        job = StreamJob(
            topics=[ArchivedTopic("transactions", path=archive)],
            keys=["user_id"],
            window=TumblingWindows(300_000),
            aggregations=[Aggregation("amount", f, f"amount_{f}") for f in ("sum", "count")],
            watermark=WatermarkStrategy(out_of_orderness_ms=5_000),
        )
        first, peak, done = gc_sample(spark), [0], threading.Event()

        def sample() -> None:
            while not done.wait(1.0):
                peak[0] = max(peak[0], gc_sample(spark).used)

        threading.Thread(target=sample, daemon=True).start()
        started = time.monotonic()
        outcome = "completed"
        try:
            with heap_guard(spark, "advise"):
                prepared = prepare(spark, job)
                advise(prepared, cells, cells_per_pass=per_pass)
                prepared.release()
        except DriverMemoryError as exc:
            outcome = f"stopped: {exc}"
        elapsed = time.monotonic() - started
        done.set()
        last = gc_sample(spark)
    print(f"records {args.records:,} at {args.rate} /s; {len(cells)} cells, {per_pass} a pass")
    print(f"heap {heap_mib(spark):,} MiB; {outcome} in {elapsed:.1f} s")
    print(
        f"full collections {last.full_gcs - first.full_gcs}; collecting "
        f"{(last.gc_ms - first.gc_ms) / 1000 / elapsed:.0%} of the time; "
        f"peak heap used {peak[0] / 2**20:,.0f} MiB"
    )


if __name__ == "__main__":
    main()
