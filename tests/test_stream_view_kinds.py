"""Every kind of stream view, through Feast (real Spark, Delta, redis-server), hand-computed.

One archived topic, one partition (pt = et), B = 0, 200 ms ticks::

    offset  et        user  amount  currency
    0       10:00:10  u1    1       EUR
    1       10:00:20  u1    2       USD
    2       10:00:30  u2    4       EUR
    3       10:01:10  u1    8       EUR   tick 10:01:10 (W = 10:01:09.999) fires [10:00, 10:01)
    4       10:02:30  u2    16      EUR   tick 10:02:30 fires [10:01, 10:02)

Each udf keeps the EUR records and adds ``doubled = 2 * amount``.

``eur_spend`` (windowed, ``mode="spark"`` udf; ``eur_spend_pandas``: the same udf in pandas,
giving the job the same records): per minute, the sum of ``doubled``: [10:00, 10:01) u1 2 (the
USD record is gone), u2 8, written at 10:01:10; [10:01, 10:02) u1 16 at 10:02:30; u2's [10:02,
10:03) never fires.

``last_eur`` (no aggregations, spark udf): Feast's batch rule on the udf's rows (doubled): u1 2
from 10:00:10 (not 4 at 10:00:20: USD), 16 from 10:01:10; u2 8 from 10:00:30, 32 from 10:02:30.

``clicks`` (a PushSource over a Delta table): u1 3 at 10:00:00; a push to the offline store
appends u1 5 at 10:02:00 (one Delta transaction), and both are read back.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pandas as pd
import pytest
from feast import (
    Entity,
    FeatureStore,
    Field,
    FileSource,
    KafkaSource,
    PushSource,
    StreamFeatureView,
    ValueType,
)
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.data_source import PushMode
from feast.infra.common.materialization_job import MaterializationTask
from feast.types import Float64, Int64, String
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, TimestampType

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags, stream_job
from feast_stream_backfill.feast_plugin.offline_store import StreamBackfillOfflineStore
from feast_stream_backfill.feast_plugin.transformations import view_udf
from tests.conftest import feature_store_yaml

ARCHIVE = [
    (0, 0, "10:00:10", "u1", 1.0, "EUR"),
    (0, 1, "10:00:20", "u1", 2.0, "USD"),
    (0, 2, "10:00:30", "u2", 4.0, "EUR"),
    (0, 3, "10:01:10", "u1", 8.0, "EUR"),
    (0, 4, "10:02:30", "u2", 16.0, "EUR"),
]


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


def eur_doubled(df):
    from pyspark.sql import functions as F

    return df.where(F.col("currency") == "EUR").withColumn("doubled", F.col("amount") * 2)


def eur_doubled_pandas(df):
    eur = df[df["currency"] == "EUR"]
    return eur.assign(doubled=eur["amount"] * 2)


def dropping_offsets(df):
    return df.drop("offset")


def definitions() -> list:
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    archive = FileSource(
        name="payments_archive",
        path="data/archive/payments",
        file_format=DeltaFormat(),
        timestamp_field="event_time",
        tags=archive_tags(),
    )
    payments = KafkaSource(
        name="payments",
        topic="payments",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=archive,
        watermark_delay_threshold=timedelta(0),
    )

    def windowed(name, udf, mode):
        return StreamFeatureView(
            name=name,
            source=payments,
            entities=[user],
            ttl=timedelta(hours=1),
            schema=[Field(name="user_id", dtype=String), Field(name="spend", dtype=Float64)],
            aggregations=[
                Aggregation(
                    column="doubled", function="sum", time_window=timedelta(minutes=1), name="spend"
                )
            ],
            timestamp_field="event_time",
            tags=backfill_tags(),
            udf=udf,
            udf_string="",
            mode=mode,
        )

    last_eur = StreamFeatureView(
        name="last_eur",
        source=payments,
        entities=[user],
        ttl=timedelta(hours=1),
        schema=[Field(name="user_id", dtype=String), Field(name="doubled", dtype=Float64)],
        udf=eur_doubled,
        udf_string="",
        mode="spark",
    )
    clicks_push = PushSource(
        name="clicks_push",
        batch_source=FileSource(
            name="clicks_table",
            path="data/clicks",
            file_format=DeltaFormat(),
            timestamp_field="event_time",
        ),
    )
    clicks = StreamFeatureView(
        name="clicks",
        source=clicks_push,
        entities=[user],
        ttl=timedelta(hours=1),
        schema=[Field(name="user_id", dtype=String), Field(name="clicks", dtype=Int64)],
    )
    return [
        user,
        payments,
        clicks_push,
        windowed("eur_spend", eur_doubled, "spark"),
        windowed("eur_spend_pandas", eur_doubled_pandas, "pandas"),
        last_eur,
        clicks,
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server) -> FeatureStore:
    path = tmp_path_factory.mktemp("kinds_repo")
    (path / "feature_store.yaml").write_text(feature_store_yaml("kinds", redis_server))
    stamp = F.to_timestamp(F.concat(F.lit("2026-01-01 "), F.col("at")))
    spark.createDataFrame(
        ARCHIVE,
        "partition int, offset long, at string, user_id string, amount double, currency string",
    ).withColumn("event_time", stamp).drop("at").write.format("delta").save(
        str(path / "data/archive/payments")
    )
    spark.createDataFrame([("u1", 3, "10:00:00")], "user_id string, clicks long, at string").select(
        "user_id", "clicks", stamp.alias("event_time")
    ).write.format("delta").save(str(path / "data/clicks"))
    feature_store = FeatureStore(repo_path=str(path))
    feature_store.apply(definitions())
    return feature_store


def values(store: FeatureStore, feature: str, rows: list[tuple[str, str]]) -> list:
    entity_df = pd.DataFrame(
        [(user, t(hms)) for user, hms in rows], columns=["user_id", "event_timestamp"]
    )
    df = store.get_historical_features(entity_df=entity_df, features=[feature]).to_df()
    name = feature.split(":")[1]
    return [None if pd.isna(v) else v for v in df[name]]


def online(store: FeatureStore, feature: str, users: list[str]) -> list:
    rows = [{"user_id": user} for user in users]
    return store.get_online_features(features=[feature], entity_rows=rows).to_dict()[
        feature.split(":")[1]
    ]


def test_an_unsupported_view_fails_materialize_before_any_view_is_written(store):
    python_udf = StreamFeatureView(
        name="python_udf",
        source=store.get_data_source("payments"),
        entities=[store.get_entity("user")],
        schema=[Field(name="user_id", dtype=String), Field(name="doubled", dtype=Float64)],
        udf=eur_doubled,
        udf_string="",
        mode="python",
    )
    good = store.get_stream_feature_view("eur_spend_pandas")
    tasks = [
        MaterializationTask(store.project, view, t("10:00:00"), t("10:03:00"))
        for view in (good, python_udf)
    ]
    engine = store._get_provider().batch_engine
    with pytest.raises(NotImplementedError, match="stream feature view 'python_udf' has a udf"):
        engine.materialize(store.registry, tasks)
    assert online(store, "eur_spend_pandas:spend", ["u1"]) == [None], "nothing was written"


def test_a_spark_udf_runs_before_the_windows(store):
    rows = [("u1", "10:01:09.999"), ("u1", "10:01:10"), ("u1", "10:02:30"), ("u2", "10:05:00")]
    assert values(store, "eur_spend:spend", rows) == [None, 2.0, 16.0, 8.0]
    store.materialize(t("10:00:00"), t("10:03:00"), feature_views=["eur_spend"])
    assert online(store, "eur_spend:spend", ["u1", "u2"]) == [16.0, 8.0]


def test_a_pandas_udf_gives_the_job_the_records_the_spark_udf_gives(store, spark):
    # What the backfill reads (the windows after it are the spark udf's test): the same rows,
    # with event time still an instant (pandas gets it naive) and types from the udf's result.
    view = store.get_stream_feature_view("eur_spend_pandas")
    (topic,) = stream_job(view, store.repo_path).topics
    records = topic.load(spark)
    assert records.schema["event_time"].dataType == TimestampType()
    assert records.schema["doubled"].dataType == DoubleType()
    rows = records.select("offset", F.date_format("event_time", "HH:mm:ss"), "doubled")
    assert sorted(tuple(r) for r in rows.collect()) == [
        (0, "10:00:10", 2.0),
        (2, "10:00:30", 8.0),
        (3, "10:01:10", 16.0),
        (4, "10:02:30", 32.0),
    ]


def test_a_view_without_aggregations_follows_feasts_batch_rule_on_the_udfs_rows(store):
    rows = [("u1", "10:00:09"), ("u1", "10:00:25"), ("u1", "10:01:10"), ("u2", "10:02:29")]
    assert values(store, "last_eur:doubled", rows) == [None, 2.0, 16.0, 8.0]
    store.materialize(t("10:00:00"), t("10:02:00"), feature_views=["last_eur"])
    assert online(store, "last_eur:doubled", ["u1", "u2"]) == [16.0, 8.0]


def test_a_push_source_view_reads_what_was_pushed_to_the_offline_store(store):
    pushed = pd.DataFrame({"user_id": ["u1"], "clicks": [5], "event_time": [t("10:02:00")]})
    store.push("clicks_push", pushed, to=PushMode.OFFLINE)
    rows = [("u1", "09:59:59"), ("u1", "10:01:59"), ("u1", "10:02:00")]
    assert values(store, "clicks:clicks", rows) == [None, 3, 5]
    store.materialize(t("10:00:00"), t("10:03:00"), feature_views=["clicks"])
    assert online(store, "clicks:clicks", ["u1"]) == [5]


def test_a_udf_that_drops_the_offsets_is_named(store):
    view = store.get_stream_feature_view("eur_spend")
    view.udf, view.udf_string = dropping_offsets, ""
    entity_df = pd.DataFrame({"user_id": ["u1"], "event_timestamp": [t("10:01:10")]})
    with pytest.raises(
        ValueError, match=r"'eur_spend'.*udf dropped the archive's column\(s\) \['offset'\]"
    ):
        StreamBackfillOfflineStore.get_historical_features(
            store.config, [view], ["eur_spend:spend"], entity_df, store.registry, store.project
        ).to_df()


TRAIN_IN_A_FRESH_PROCESS = """
import sys
import pandas as pd
from feast import FeatureStore
from pyspark.sql import SparkSession

store = FeatureStore(repo_path=sys.argv[1])
store.get_stream_feature_view("eur_spend")  # Feast builds its SparkTransformation
assert SparkSession.getActiveSession() is not None, "Feast started no Spark session"
rows = pd.DataFrame({"user_id": ["u1"], "event_timestamp": [pd.Timestamp(sys.argv[2])]})
print(store.get_historical_features(entity_df=rows, features=["eur_spend:spend"]).to_df().spend[0])
"""


@pytest.mark.skipif(
    not os.environ.get("FSB_FRESH_PROCESS_TESTS"),
    reason="starts a Spark JVM of its own (about 60 s): FSB_FRESH_PROCESS_TESTS=1 runs it",
)
def test_a_spark_udf_view_works_where_feast_started_spark_without_delta(store):
    # feast materialize's situation: loading a mode="spark" udf view, Feast starts a bare Spark
    # session (no Delta) before the plugin asks for one.
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            TRAIN_IN_A_FRESH_PROCESS,
            str(store.repo_path),
            "2026-01-01T10:01:10Z",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "2.0"
    assert "stopping the active Spark session: it has no Delta Lake extension" in done.stderr


def test_a_udf_read_without_its_callable_is_rebuilt_from_its_source(spark):
    # Feast's SQL registry and registry server read views with skip_udf=True: only the proto.
    source = PushSource(
        name="p", batch_source=FileSource(path="x", file_format=DeltaFormat(), timestamp_field="t")
    )
    declared = StreamFeatureView(
        name="v",
        source=source,
        schema=[Field(name="doubled", dtype=Float64)],
        udf=eur_doubled,
        udf_string=inspect.getsource(eur_doubled),
        mode="spark",
    )
    read = StreamFeatureView.from_proto(declared.to_proto(), skip_udf=True)
    assert read.udf is None
    records = spark.createDataFrame([(1.0, "EUR"), (2.0, "USD")], "amount double, currency string")
    assert [tuple(r) for r in view_udf(read)(records).collect()] == [(1.0, "EUR", 2.0)]
