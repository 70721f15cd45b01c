"""Read cost of each archive layout relative to Delta, and a sink listing of many files.

The same generated topic (``--records``, with offset holes and restart duplicates as
``examples.layouts`` writes them, flushes of ``--flush`` records) is written in every layout,
then read the way a backfill reads it: ``read_records`` (its validation pass) and one pass
over the normalized records (partition, offset, event time and payload, to Spark's ``noop``
sink), best of ``--repeat``. ``--backfill`` also times the whole backfill per layout.

``--listing N`` writes N one-record JSON files (one sink flush each) and times the archive's
listing digest (the emission log's fingerprint) and the read's plan (Spark's listing and the
file name check); ``--listing-scan`` also reads them (Spark opens each file: slow).

    .venv/bin/python -m bench.archive_layouts_bench --records 4000000 --listing 100000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from bench.backfill_bench import AGGREGATIONS
from examples.generate import archive_frame
from examples.layouts import LAYOUTS, archived_topic, with_offset_holes, write_layout
from feast_stream_backfill import (
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.archives import SinkConnectorArchive
from feast_stream_backfill.files import file_listing_digest
from feast_stream_backfill.records import read_records
from feast_stream_backfill.spark import get_spark


def timed(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def job(topic: ArchivedTopic) -> StreamJob:
    return StreamJob(
        topics=[topic],
        keys=["user_id"],
        window=TumblingWindows(300_000),
        aggregations=AGGREGATIONS,
        watermark=WatermarkStrategy(out_of_orderness_ms=5_000),
    )


def read(spark: SparkSession, topic: ArchivedTopic) -> None:
    records = read_records(spark, topic, ["user_id", "amount"], keys=["user_id"])
    records.write.format("noop").mode("overwrite").save()


def run_backfill(spark: SparkSession, topic: ArchivedTopic) -> None:
    result = backfill(spark, job(topic))
    result.emissions.write.format("noop").mode("overwrite").save()
    result.release()


def layouts(spark: SparkSession, root: Path, args: argparse.Namespace) -> None:
    records = with_offset_holes(archive_frame(spark, args.records), fraction=args.holes).persist()
    started = time.perf_counter()
    topics = {}
    for layout in LAYOUTS:
        folder = str(root / layout)
        write_layout(spark, records, layout, folder, flush_records=args.flush)
        topics[layout] = archived_topic(layout, folder)
        files = sum(1 for p in Path(folder).rglob("*") if p.is_file() and p.name[0] not in "._")
        print(f"wrote {layout}: {files:,} files ({time.perf_counter() - started:.0f}s so far)")
    records.unpersist()
    base: dict[str, float] = {}
    for layout, topic in topics.items():
        figures = {"read": timed(args.repeat, lambda t=topic: read(spark, t))}
        if args.backfill:
            figures["backfill"] = timed(args.repeat, lambda t=topic: run_backfill(spark, t))
        base = base or figures
        shown = ", ".join(f"{k} {v:6.1f}s ({v / base[k]:.2f}x Delta)" for k, v in figures.items())
        print(f"{layout:14s} {shown}", flush=True)


def listing(spark: SparkSession, root: Path, n_files: int, scan: bool) -> None:
    per_partition = -(-n_files // 10)
    for i in range(n_files):
        p, start = i % 10, i // 10
        folder = root / "topics" / "t" / f"partition={p}"
        if start == 0:
            folder.mkdir(parents=True, exist_ok=True)
        record = f'{{"event_time":{1_767_225_600_000 + i},"user_id":"u{i % 97}","amount":1.5}}\n'
        (folder / f"t+{p}+{start:010d}.json").write_text(record)
    print(f"wrote {n_files:,} one-record files ({per_partition:,} per partition folder)")
    archive = SinkConnectorArchive(
        str(root),
        "t",
        "json",
        timestamp_field="event_time",
        schema="event_time long, user_id string, amount double",
    )
    digest = timed(2, lambda: file_listing_digest(spark, archive.folder, "t+*+*"))
    plan = timed(2, lambda: archive.read(spark))
    print(
        f"{n_files:,} files: listing digest (the log's fingerprint) {digest:.1f}s, "
        f"read plan (Spark's listing, the file name check) {plan:.1f}s"
    )
    if scan:
        topic = ArchivedTopic("t", archive=archive)
        seconds = timed(1, lambda: read(spark, topic))
        print(f"read_records and one pass over the records {seconds:.1f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--flush", type=int, default=10_000, help="records per sink file")
    parser.add_argument("--holes", type=float, default=0.0001, help="share of missing offsets")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--backfill", action="store_true", help="also time whole backfills")
    parser.add_argument("--listing", type=int, default=0, help="files for the listing test")
    parser.add_argument(
        "--listing-scan", action="store_true", help="also read those files (slow: one open each)"
    )
    args = parser.parse_args()
    spark = get_spark()
    with tempfile.TemporaryDirectory(prefix="layouts-bench-") as tmp:
        if args.records:
            layouts(spark, Path(tmp) / "layouts", args)
        if args.listing:
            listing(spark, Path(tmp) / "listing", args.listing, args.listing_scan)


if __name__ == "__main__":
    main()
