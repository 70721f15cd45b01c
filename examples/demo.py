"""The demo: a Flink job backfilled end to end through Feast, on the embedded defaults.

1. generate an archived Kafka topic (Delta) and prediction events;
2. ``feast apply``, ``feast materialize``, ``feast materialize-incremental`` (the real CLI),
   for the views of feature_repo/: three declared with Feast objects and one,
   ``user_spend_1h``, by the team's Flink SQL script (``user_spend_1h.sql``);
3. read Redis back with ``get_online_features`` and check it against the emission log;
4. build a training set with ``get_historical_features`` and count the rows a naive
   event-time join gets wrong: the leakage the plugin prevents;
5. explain the job (``feast-stream-backfill report`` and ``timeline``): one HTML page with the
   advisor's table, the anomalies and the pictures, and the hottest user's timeline. The page
   also covers ``user_spend_5m_faulty``, the same job over a small second topic with a year-9999
   record and a partition silent for hours (a separate topic: in the main one, the year-9999
   record would defer a partition to year 9999 and stall the watermark, which would wreck the
   other outputs above);
6. calibrate the view against its live job (``feast-stream-backfill calibrate``) and build the
   training set again with each row's probability. Production is played by real Flink 2.3, the
   conformance harness's replay (``tests.conformance.live``): the same job over the same
   archive, read at processing times the backfill does not assume (D2 = 1 s plus a random
   consumer lag, a restart from a checkpoint), its writes 50 ms plus jitter after each firing,
   archived as the view's observed writes.

Needs ``FSB_REDIS`` (host:port of a running Redis); ``scripts/demo.sh`` starts one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from feast import FeatureStore
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from examples.generate import (
    generate_archive,
    generate_faulty_archive,
    generate_predictions,
    generate_user_tiers,
)
from feast_stream_backfill import cli
from feast_stream_backfill.calibration.visibility import UNCERTAIN_BELOW
from feast_stream_backfill.emission_store import dropped_path, stored_metadata
from feast_stream_backfill.feast_plugin.consistency import compare
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.training_join import as_of_join

REPO = Path(__file__).resolve().parent.parent / "feature_repo"
VIEW = "user_spend_5m"
FAULTY_VIEW = "user_spend_5m_faulty"
FEATURES = ["spend_5m", "transactions_5m", "mean_amount_5m", "max_amount_5m"]
MIDDLE, END = "2026-01-01T01:00:00", "2026-01-01T02:00:00"


def feast(*args: str) -> None:
    print(f"$ feast {' '.join(args)}", flush=True)
    feast_cli = str(Path(sys.executable).parent / "feast")
    subprocess.run([feast_cli, *args], cwd=REPO, check=True)


def naive_event_time_features(spark, archive: str) -> DataFrame:
    """What an event-time join sees: every record, each 5-minute window visible at its end."""
    records = spark.read.format("delta").load(archive).dropDuplicates(["partition", "offset"])
    window = F.window("event_time", "5 minutes")
    return (
        records.groupBy("user_id", window)
        .agg(F.sum("amount").alias("spend_5m"), F.count("amount").alias("transactions_5m"))
        .select("user_id", F.col("window.end").alias("visible_at"), *FEATURES[:2])
    )


def apply_faulty_view(store: FeatureStore) -> None:
    """``user_spend_5m``'s job over the faulty topic, added to the registry (it is the demo's
    own, so it stays out of ``features.py``, which tests copy)."""
    from feast import FileSource, KafkaSource, StreamFeatureView
    from feast.data_format import DeltaFormat, JsonFormat

    from feast_stream_backfill.feast_plugin import archive_tags

    spend = store.get_stream_feature_view(VIEW)
    archive = FileSource(
        name="transactions_faulty_archive",
        path="data/archive/transactions_faulty",
        file_format=DeltaFormat(),
        timestamp_field="event_time",
        tags=archive_tags(),
    )
    source = KafkaSource(
        name="transactions_faulty",
        topic="transactions_faulty",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(
            schema_json="user_id string, amount double, event_time timestamp"
        ),
        timestamp_field="event_time",
        batch_source=archive,
        watermark_delay_threshold=spend.stream_source.kafka_options.watermark_delay_threshold,
    )
    view = StreamFeatureView(
        name=FAULTY_VIEW,
        source=source,
        entities=[store.get_entity("user")],
        ttl=spend.ttl,
        schema=spend.schema,
        aggregations=spend.aggregations,
        timestamp_field="event_time",
        tags=spend.tags,
    )
    store.apply([archive, source, view])


def explain(store: FeatureStore, predictions: str, data: Path) -> None:
    """The report over both views and the hottest user's timeline, as the CLI writes them."""
    apply_faulty_view(store)
    report, timeline = data / "report.html", data / "u000000_timeline.png"
    common = ["--chdir", str(REPO)]
    print(f"\n$ feast-stream-backfill report {VIEW} {FAULTY_VIEW} -o {report}", flush=True)
    cli.cli.main(
        [*common, "report", VIEW, FAULTY_VIEW, "--predictions", predictions, "-o", str(report)],
        standalone_mode=False,
    )
    print(f"$ feast-stream-backfill timeline {VIEW} --key u000000 -o {timeline}", flush=True)
    cli.cli.main(
        [*common, "timeline", VIEW, "--key", "u000000", "-o", str(timeline)],
        standalone_mode=False,
    )
    print(f"\nreport (open in a browser): {report}\ntimeline of u000000: {timeline}")


def run_live_job(spark, archive: str, writes: str, restart_ms: int) -> dict:
    """The view's job run as production ran it (see the module's docstring), failing at
    ``restart_ms``; its writes archived at ``writes``, as ``features.py`` declares them.
    Returns the truth."""
    from tests.conformance.live import LiveParams, live_log

    records = (
        spark.read.format("delta")
        .load(archive)
        .dropDuplicates(["partition", "offset"])
        .select(
            "partition",
            "offset",
            F.unix_millis("event_time").alias("event_time"),
            "user_id",
            "amount",
        )
    )
    params = LiveParams(requests_per_key_hour=0)
    params = replace(params, restart_at_s=(restart_ms - params.start_ms) / 1000)
    live = live_log(params, archive=records.toPandas())
    stamps = ["window_start", "window_end", "processing_time", "write_time"]
    frame = spark.createDataFrame(live.writes)
    frame.withColumns({c: F.timestamp_millis(c) for c in stamps}).write.format("delta").mode(
        "overwrite"
    ).save(writes)
    return live.truth


def calibrate_view(
    store: FeatureStore, spark, archive: str, predictions: str, data: Path, emissions: DataFrame
):
    """Production's writes, ``calibrate``, and the training set with probabilities. The
    restart comes 30 s after the backfill's second firing instant, from a checkpoint a minute
    before it: the windows of that firing are written twice."""
    print("\nRunning the job as production ran it (real Flink, later reads, a restart)", flush=True)
    instants = emissions.select(F.unix_millis("emit_time").alias("t")).distinct()
    second = instants.orderBy("t").limit(2).collect()[-1]["t"]
    truth = run_live_job(spark, archive, str(data / f"live/{VIEW}"), second + 30_000)
    timing, restart = truth["timing"], truth["restart"]
    print(
        f"production: D2 {timing['d2_ms']} ms + consumer lag (mean {timing['lag']['mean_ms']:.0f} "
        f"ms), D3 {timing['d3_ms']} ms + jitter, a restart at "
        f"{datetime.fromtimestamp(restart['failed_at_ms'] / 1000, timezone.utc):%H:%M:%S} "
        f"from the checkpoint of a minute before; {truth['writes']['rows']:,} writes"
    )
    picture = data / "calibration.png"
    print(f"$ feast-stream-backfill calibrate {VIEW} -o {picture}", flush=True)
    cli.cli.main(
        ["--chdir", str(REPO), "calibrate", VIEW, "-o", str(picture)], standalone_mode=False
    )
    entity_sql = f"SELECT user_id, event_timestamp FROM delta.`{predictions}`"
    job = store.get_historical_features(entity_df=entity_sql, features=[f"{VIEW}:spend_5m"])
    rows = job.with_probabilities().to_spark_df()
    chance = F.col(f"{VIEW}__visible_probability")
    verdict = rows.agg(
        F.count(F.lit(1)).alias("rows"),
        F.count(F.when(chance < UNCERTAIN_BELOW, 1)).alias("uncertain"),
        F.avg(chance).alias("mean"),
    ).first()
    print(
        f"training rows with probabilities: {verdict['rows']:,}; uncertain (probability "
        f"< {UNCERTAIN_BELOW}) "
        f"{verdict['uncertain']:,} ({verdict['uncertain'] / max(verdict['rows'], 1):.2%}); "
        f"mean probability {verdict['mean']:.4f}"
    )
    print(f"calibration picture: {picture}")


def same_value(a, b):
    """Equal within 1e-9 relative, or both null: the two sums add the same amounts in another
    order, and exact equality counted their rounding as wrong points (4,174 of 20,000 at 200k
    records, against 1,661 that differ by more than 1e-6)."""
    close = F.abs(a - b) <= F.lit(1e-9) * F.greatest(F.abs(a), F.abs(b)) + F.lit(1e-9)
    return a.eqNullSafe(b) | F.coalesce(close, F.lit(False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--records", type=int, default=int(os.environ.get("DEMO_RECORDS", 1_000_000))
    )
    parser.add_argument("--predictions", type=int, default=100_000)
    args = parser.parse_args()
    if "FSB_REDIS" not in os.environ:
        sys.exit("FSB_REDIS is not set: run scripts/demo.sh, which starts a redis-server")

    started = time.monotonic()
    data = REPO / "data"
    shutil.rmtree(data, ignore_errors=True)
    archive, predictions = str(data / "archive/transactions"), str(data / "predictions")
    spark = get_spark()
    print(
        f"Generating {args.records:,} archived Kafka records and {args.predictions:,} predictions"
    )
    generate_archive(spark, archive, n_records=args.records)
    generate_predictions(spark, predictions, archive, n_rows=args.predictions)
    generate_user_tiers(spark, str(data / "state/user_tiers"), archive)  # for user_fees_5m
    generate_faulty_archive(spark, str(data / "archive/transactions_faulty"))

    feast("apply")
    feast("materialize", "2026-01-01T00:00:00", MIDDLE)
    feast("materialize-incremental", END)

    store = FeatureStore(repo_path=str(REPO))
    log = str(data / f"emission_log/payments/{VIEW}")
    emissions = spark.read.format("delta").load(log)
    stats = stored_metadata(spark, log)["stats"]
    dropped = spark.read.format("delta").load(dropped_path(log))

    # Serving against training: Redis after materializing up to END vs the training join at
    # END, for the 1000 most active users; and one online read as a user would do it.
    end = datetime.fromisoformat(END).replace(tzinfo=timezone.utc)
    mismatches = compare(store, VIEW, end, n_keys=1000)
    hottest = {"user_id": "u000000"}
    online = store.get_online_features([f"{VIEW}:{f}" for f in FEATURES], [hottest]).to_dict()

    # Training set: prediction events joined as of when Flink would have written.
    entity_sql = f"SELECT user_id, event_timestamp FROM delta.`{predictions}`"
    job = store.get_historical_features(
        entity_df=entity_sql, features=[f"{VIEW}:{f}" for f in FEATURES]
    )
    training = job.to_spark_df().persist()
    naive = as_of_join(
        spark.read.format("delta").load(predictions),
        naive_event_time_features(spark, archive),
        ["user_id"],
        "event_timestamp",
        FEATURES[:2],
        emission_time="visible_at",
        sequence=None,
        ttl_seconds=3600,
        output_names=["naive_spend", "naive_count"],
    )
    compared = training.join(naive, ["user_id", "event_timestamp"]).dropDuplicates(
        ["user_id", "event_timestamp"]
    )
    summary = compared.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.col("spend_5m").isNotNull().cast("int")).alias("with_value"),
        F.sum((~same_value(F.col("spend_5m"), F.col("naive_spend"))).cast("int")).alias("differ"),
        F.sum((F.col("spend_5m").isNull() & F.col("naive_spend").isNotNull()).cast("int")).alias(
            "naive_sees_unwritten"
        ),
    ).first()

    print("\n=== feast-stream-backfill demo ===")
    print(f"records read            {stats['records_read']:>12,}")
    print(f"duplicates removed      {stats['duplicates_removed']:>12,}")
    print(f"emissions               {emissions.count():>12,}")
    print(
        f"late records dropped    {stats['records_dropped']:>12,}  "
        f"(in {dropped.count():,} key-windows)"
    )
    print(f"records in windows not yet fired at the archive's end {stats['records_pending']:,}")
    print(
        f"online read of u000000 after materializing to {END}: "
        f"spend_5m={online['spend_5m'][0]:.2f}, transactions_5m={online['transactions_5m'][0]}"
    )
    print(
        f"online vs training join at {END}, 1000 users: {sum(mismatches.values())} "
        f"mismatches ({', '.join(f'{f} {n}' for f, n in mismatches.items())})"
    )
    print(
        f"training rows {training.count():,}; distinct (user, time) points {summary['rows']:,}, "
        f"{summary['with_value']:,} with a value"
    )
    print(
        f"points a naive event-time join gets wrong: {summary['differ']:,} "
        f"({summary['differ'] / max(summary['rows'], 1):.1%}), of which "
        f"{summary['naive_sees_unwritten']:,} see a window Flink had not written yet"
    )
    # The enriched view: fees at the tier rate the job would have looked up (processing time).
    fees = store.get_online_features(["user_fees_5m:fees_5m"], [{"user_id": "u000000"}])
    fee_log = spark.read.format("delta").load(str(data / "emission_log/payments/user_fees_5m"))
    print(
        f"enriched view user_fees_5m: {fee_log.count():,} emissions; online read of u000000: "
        f"fees_5m={fees.to_dict()['fees_5m'][0]:.2f}"
    )
    # The view declared by the team's Flink SQL script (feature_repo/user_spend_1h.sql).
    hour = store.get_online_features(["user_spend_1h:spend_1h"], [hottest]).to_dict()
    hour_log = spark.read.format("delta").load(str(data / "emission_log/payments/user_spend_1h"))
    print(
        f"Flink SQL view user_spend_1h (HOP, 1 h every 5 min): {hour_log.count():,} emissions; "
        f"online read of u000000: spend_1h={hour['spend_1h'][0]:.2f}"
    )
    explain(store, predictions, data)
    calibrate_view(store, spark, archive, predictions, data, emissions)
    print(f"wall time {time.monotonic() - started:.0f} s")
    if any(mismatches.values()):
        sys.exit("the online store disagrees with the training join")


if __name__ == "__main__":
    main()
