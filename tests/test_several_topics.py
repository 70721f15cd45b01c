"""A Flink job over two topics declared through Feast (the view's KafkaSource plus
``topics_tags``): the registry round trip, training, ``materialize`` into a real redis-server,
the core API's backfill of the same job, and the apply-time checks.

View ``spend_1m``: 1-minute tumbling windows, sum and count of ``amount`` per user, 200 ms
periodic watermark, D1 = D2 = 0 (pt = running max of et per partition), L = 0. Topic ``card``
(the view's source, B = 0) and topic ``wallet`` (``topics_tags``, B = 30 s), one partition each.
The watermark is the MIN of card's ``maxEt - 1 ms`` and wallet's ``maxEt - 30 s - 1 ms``::

    topic   offset  et        pt        user  amount
    card    0       10:00:10  10:00:10  u1    1
    wallet  0       10:00:20  10:00:20  u1    16
    card    1       10:00:50  10:00:50  u2    2
    wallet  1       10:01:10  10:01:10  u2    32
    card    2       10:01:20  10:01:20  u1    4      tick 10:01:20: W = min(10:01:19.999,
                                                     10:00:39.999): [10:00, 10:01) waits
    wallet  2       10:01:35  10:01:35  u1    64     tick 10:01:35: W = min(10:01:19.999,
                                                     10:01:04.999) fires [10:00, 10:01):
                                                     u1 = 1 + 16 = 17 (2), u2 = 2 (1)
    wallet  3       10:02:40  10:02:40  u2    128
    wallet  4       10:00:45  10:02:40  u1    256    W = 10:01:04.999 >= 10:00:59.999: dropped
    card    3       10:03:00  10:03:00  u1    8      tick 10:03:00: W = min(10:02:59.999,
                                                     10:02:09.999) fires [10:01, 10:02):
                                                     u1 = 4 + 64 = 68 (2), u2 = 32 (1)

[10:02, 10:03) (u2 128) would need wallet to reach 10:03:30; [10:03, 10:04) (u1 8): never
fire. With the job's B (0) for wallet too, [10:00, 10:01) would have fired at 10:01:20; with
wallet's B (30 s) for card too, at 10:03:00.

View ``spend_1m_layouts`` is the same job over the same records kept as teams keep them:
card as a parquet table of the Spark catalog (``SparkSource(table=...)``), wallet as the JSON
lines a sink connector wrote (``SparkSource(path=<root>, file_format="json")`` with
``sink_connector_tags``), offsets from the file names, including a restart that wrote offset 2
twice (``wallet+0+0.json``: 0-2, ``wallet+0+2.json``: 2-4): the same log.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pandas as pd
import pytest
from feast import Entity, FeatureStore, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.data_source import DataSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.types import Float64, Int64, String
from pyspark.sql import functions as F

from feast_stream_backfill import Aggregation as CoreAggregation
from feast_stream_backfill import ArchivedTopic, StreamJob, TumblingWindows, WatermarkStrategy
from feast_stream_backfill.emission_store import stored_metadata
from feast_stream_backfill.feast_plugin import (
    archive_tags,
    backfill_tags,
    sink_connector_tags,
    stream_job,
    topics_tags,
)
from feast_stream_backfill.feast_plugin.view_rows import emissions_for
from tests.conftest import feature_store_yaml
from tests.test_apply_checks import problems, repo_config, stream_view, write_archive

CARD = [
    (0, "10:00:10", "u1", 1.0),
    (1, "10:00:50", "u2", 2.0),
    (2, "10:01:20", "u1", 4.0),
    (3, "10:03:00", "u1", 8.0),
]
WALLET = [
    (0, "10:00:20", "u1", 16.0),
    (1, "10:01:10", "u2", 32.0),
    (2, "10:01:35", "u1", 64.0),
    (3, "10:02:40", "u2", 128.0),
    (4, "10:00:45", "u1", 256.0),
]
#: (user, window start, emit time, spend, n), as computed above.
EMISSIONS = [
    ("u1", "10:00:00", "10:01:35", 17.0, 2),
    ("u1", "10:01:00", "10:03:00", 68.0, 2),
    ("u2", "10:00:00", "10:01:35", 2.0, 1),
    ("u2", "10:01:00", "10:03:00", 32.0, 1),
]
MINUTE = timedelta(minutes=1)
CARD_TABLE = "fsb_test_card_archive"


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


def topic(
    name: str, bound: timedelta, archive: DataSource | None = None, suffix: str = ""
) -> KafkaSource:
    return KafkaSource(
        name=name + suffix,  # Feast's data source names are unique; topics need not be
        topic=name,
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=archive
        or FileSource(
            name=f"{name}_archive",
            path=f"data/archive/{name}",
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
        watermark_delay_threshold=bound,
    )


def spend_view(name: str, card: KafkaSource, wallet: KafkaSource) -> StreamFeatureView:
    return StreamFeatureView(
        name=name,
        source=card,
        entities=[USER],
        ttl=timedelta(hours=1),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend", dtype=Float64),
            Field(name="n", dtype=Int64),
        ],
        aggregations=[
            Aggregation(column="amount", function="sum", time_window=MINUTE, name="spend"),
            Aggregation(column="amount", function="count", time_window=MINUTE, name="n"),
        ],
        timestamp_field="event_time",
        tags={**backfill_tags(), **topics_tags(wallet)},
    )


def definitions() -> list:
    card, wallet = topic("card", timedelta(0)), topic("wallet", timedelta(seconds=30))
    card_table = SparkSource(name="card_table", table=CARD_TABLE, timestamp_field="event_time")
    wallet_sink = SparkSource(
        name="wallet_sink",
        path="data/sink",
        file_format="json",
        timestamp_field="event_time",  # epoch milliseconds, as Connect's JsonConverter writes
        tags=sink_connector_tags(schema="user_id string, amount double, event_time long"),
    )
    return [
        USER,
        card,
        spend_view("spend_1m", card, wallet),
        spend_view(
            "spend_1m_layouts",
            topic("card", timedelta(0), card_table, "_in_catalog"),
            topic("wallet", timedelta(seconds=30), wallet_sink, "_in_sink"),
        ),
    ]


USER = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)


def records(spark, rows):
    return (
        spark.createDataFrame(
            [(0, offset, f"2026-01-01 {et}", user, amount) for offset, et, user, amount in rows],
            "partition int, offset long, at string, user_id string, amount double",
        )
        .withColumn("event_time", F.to_timestamp("at"))
        .drop("at")
    )


def write_sink_files(folder, rows, flushes: list[tuple[int, int]]) -> None:
    """JSON lines as a sink connector writes them: a file per flush of offsets
    ``[start, end)``, named ``wallet+0+<start>.json``, the event time in epoch milliseconds."""
    folder.mkdir(parents=True)
    for start, end in flushes:
        lines = [
            json.dumps({"user_id": u, "amount": a, "event_time": int(t(et).timestamp() * 1000)})
            for _, et, u, a in rows[start:end]
        ]
        (folder / f"wallet+0+{start}.json").write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server) -> Iterator[FeatureStore]:
    path = tmp_path_factory.mktemp("topics_repo")
    (path / "feature_store.yaml").write_text(feature_store_yaml("topics", redis_server))
    records(spark, CARD).write.format("delta").save(str(path / "data/archive/card"))
    records(spark, WALLET).write.format("delta").save(str(path / "data/archive/wallet"))
    records(spark, CARD).write.parquet(str(path / "data/card_table"))
    spark.sql(f"CREATE TABLE {CARD_TABLE} USING parquet LOCATION '{path}/data/card_table'")
    write_sink_files(path / "data/sink/topics/wallet/partition=0", WALLET, [(0, 3), (2, 5)])
    FeatureStore(repo_path=str(path)).apply(definitions())
    yield FeatureStore(repo_path=str(path))  # a fresh store: what the registry kept
    spark.sql(f"DROP TABLE {CARD_TABLE}")


def core_job(repo) -> StreamJob:
    """The same job through the core API: wallet's own B beside the job's."""
    archive = f"{repo}/data/archive/"
    return StreamJob(
        topics=[
            ArchivedTopic("card", archive + "card"),
            ArchivedTopic("wallet", archive + "wallet", out_of_orderness_ms=30_000),
        ],
        keys=["user_id"],
        window=TumblingWindows(60_000),
        aggregations=[
            CoreAggregation("amount", "sum", "spend"),
            CoreAggregation("amount", "count", "n"),
        ],
        watermark=WatermarkStrategy(out_of_orderness_ms=0),
    )


def test_the_registry_keeps_the_job_with_both_topics(store):
    view = store.get_stream_feature_view("spend_1m")
    assert stream_job(view, store.repo_path) == core_job(store.repo_path)


def test_the_log_is_the_hand_computed_one(store, spark):
    # The job is the core API's (above): its log through Feast is the core's backfill of it.
    log = emissions_for(store.config, store.get_stream_feature_view("spend_1m"))
    assert logged(log) == EMISSIONS
    dropped = spark.read.format("delta").load(f"{logs(store)}/spend_1m_dropped")
    window = F.date_format("window_start", "HH:mm")
    assert [tuple(r) for r in dropped.select("user_id", window, "dropped_count").collect()] == [
        ("u1", "10:00", 1)
    ]


def logged(log) -> list[tuple]:
    """(user, window start, emit time, spend, n) of each emission, sorted."""
    hms = [F.date_format(c, "HH:mm:ss") for c in ("window_start", "emit_time")]
    return sorted(tuple(r) for r in log.select("user_id", *hms, "spend", "n").collect())


def logs(store: FeatureStore) -> str:
    return f"{store.repo_path}/data/emission_log/topics"


def test_a_catalog_table_and_a_sink_connectors_json_files_give_the_same_log(store, spark):
    view = store.get_stream_feature_view("spend_1m_layouts")
    assert logged(emissions_for(store.config, view)) == EMISSIONS
    stored = stored_metadata(spark, f"{logs(store)}/{view.name}")
    assert (stored["stats"]["records_read"], stored["stats"]["duplicates_removed"]) == (10, 1)


def test_training_and_materialize_see_both_topics(store):
    rows = [
        ("u1", "10:01:34.999"),
        ("u1", "10:01:35"),
        ("u2", "10:02:59.999"),
        ("u2", "10:03:00"),
        ("u1", "10:05:00"),
    ]
    entity_df = pd.DataFrame(
        [(user, t(hms)) for user, hms in rows], columns=["user_id", "event_timestamp"]
    )
    df = store.get_historical_features(entity_df=entity_df, features=["spend_1m:spend"]).to_df()
    assert [None if pd.isna(v) else v for v in df["spend"]] == [None, 17.0, 2.0, 32.0, 68.0]

    def online() -> dict:
        features = ["spend_1m:spend", "spend_1m:n"]
        result = store.get_online_features(features, [{"user_id": "u1"}, {"user_id": "u2"}])
        return {k: v for k, v in result.to_dict().items() if k != "user_id"}

    store.materialize(t("10:00:00"), t("10:02:00"), feature_views=["spend_1m"])
    assert online() == {"spend": [17.0, 2.0], "n": [2, 1]}
    store.materialize(t("10:00:00"), t("10:04:00"), feature_views=["spend_1m"])
    assert online() == {"spend": [68.0, 32.0], "n": [2, 1]}


def test_apply_lists_every_problem_of_the_other_topics(spark, tmp_path):
    good, renamed = tmp_path / "good", tmp_path / "renamed"
    write_archive(spark, good)
    spark.read.format("delta").load(str(good)).select(
        "partition",
        "offset",
        "event_time",
        F.col("user_id").alias("uid"),
        F.col("amount").cast("string").alias("amount"),
    ).write.format("delta").save(str(renamed))
    view = stream_view(good, "two")
    other = KafkaSource(
        name="refunds",
        topic="refunds",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="uid string, amount string"),
        timestamp_field="event_time",
        batch_source=FileSource(
            name="refunds_archive",
            path=str(renamed),
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags={**archive_tags(), "stream_backfill.ofset_column": "o"},
        ),
        tags={"stream_backfill.allowed_lateness_ms": "60000"},
    )
    same_topic = stream_view(good, "twice")
    view.tags.update(topics_tags(other))
    same_topic.tags.update(topics_tags(same_topic.stream_source))
    broken = stream_view(good, "broken", **{"stream_backfill.topic.lost": "{not json"})
    sunk = stream_view(good, "sunk")
    sunk.batch_source.tags.update(sink_connector_tags())
    misplaced = stream_view(good, "misplaced", **sink_connector_tags(topic="payments"))
    assert problems(repo_config(tmp_path), view, same_topic, broken, sunk, misplaced) == [
        "  stream feature view 'broken': tag stream_backfill.topic.lost: not a KafkaSource "
        "declaration (write it with topics_tags): Failed to load JSON: Expecting property name "
        "enclosed in double quotes: line 1 column 2 (char 1).",
        "  stream feature view 'misplaced': tag(s) ['stream_backfill.sink.topic', "
        "'stream_backfill.sink.topics_dir'] on the view are read from the archive's tags only: "
        "put sink_connector_tags on the KafkaSource's batch_source",
        "  stream feature view 'sunk': the batch_source of topic 'payments' is FileSource "
        "'payments_archive' with sink_connector_tags: a sink connector's folder is a "
        'SparkSource(path=<root>, file_format="json" | "parquet" | "avro")',
        "  stream feature view 'twice': topic(s) ['payments'] declared twice (its source and "
        "topics_tags, or two KafkaSources of one topic): a job reads each topic once",
        "  stream feature view 'two': topic 'refunds' (source 'refunds'): unknown tag "
        "'stream_backfill.ofset_column' (did you mean 'stream_backfill.offset_column'?)",
        "  stream feature view 'two': topic 'refunds' (source 'refunds'): tag(s) "
        "['stream_backfill.allowed_lateness_ms'] are the job's options, read from the view and "
        "its source only; a topic of topics_tags has its own archive_tags, sink_connector_tags "
        "and watermark_delay_threshold",
        f"  stream feature view 'two': archive {renamed}: no column(s) ['user_id']; it has "
        "['partition', 'offset', 'event_time', 'uid', 'amount']",
        "  stream feature view 'two': column 'amount' has different types across topics "
        "(payments: double, refunds: string); the job reads the topics as one stream, so it "
        "needs one type (cast it in the archive)",
    ]
