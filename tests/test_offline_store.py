"""get_historical_features through the plugin's offline store, hand-computed.

One Feast repo (real Spark, Delta and parquet written through Spark, a real redis-server as
the online store) with three views keyed by user_id and/or merchant_id:

``pair_spend`` (stream, entities user + merchant, 5-minute tumbling windows, B = 0, 200 ms
ticks, allowed lateness 10 min, ttl 10 min). Archive, one partition (pt = running max et)::

    offset 0: 10:00:10 u1 m1 $10    3: 10:10:30 u2 m1 $1
           1: 10:01:00 u1 m2 $7     4: 10:03:00 u1 m1 $5   (pt 10:10:30)
           2: 10:06:00 u1 m1 $20    5: 10:11:00 u3 m2 $1
                                    6: 10:04:00 u1 m1 $3   (pt 10:11:00)

The tick at 10:06:00 (W = 10:05:59.999) fires [10:00, 10:05): u1m1 $10, u1m2 $7. At 10:10:30
offset 4 is late for [10:00, 10:05) (W still 10:05:59.999): a late firing, $15, then the tick
fires [10:05, 10:10): u1m1 $20, the later emit_sequence of that instant. At 10:11:00 offset 6
fires [10:00, 10:05) late again: $18, overwriting the newer window's $20. [10:10, 10:15)
never fires. So u1m1: none < 10:06, 10 until 10:10:30, 20 until 10:11, then 18 (ttl: until
10:21); u1m2: 7 from 10:06 to 10:16 inclusive.

``merchant_risk`` (batch, Delta, entity merchant, ttl 1 h, created-timestamp tie-break, source
column ``risk_score`` mapped to ``risk``): m1 0.1 at 10:00; at 10:05 three rows, created 10:05
(0.2), 10:07 (0.25) and null (0.9): 0.25 wins; 0.3 at 11:00. m2 0.5 at 10:00 (visible to
11:00:00 inclusive).

``pair_visits`` (batch, parquet, entities user + merchant, no ttl): u1m1 3 at 09:00 and 4 at
10:10:30; u1m2 8 at 09:30.

``pair_average`` (on demand, pandas): ``spend_5m / transactions_5m`` of pair_spend's value.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pandas as pd
import pytest
from feast import (
    BatchFeatureView,
    Entity,
    FeatureStore,
    FeatureView,
    Field,
    FileSource,
    KafkaSource,
    StreamFeatureView,
    ValueType,
)
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat, ParquetFormat
from feast.infra.offline_stores.file_source import SavedDatasetFileStorage
from feast.on_demand_feature_view import on_demand_feature_view
from feast.types import Float64, Int64, String
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags
from feast_stream_backfill.feast_plugin.offline_store import StreamBackfillOfflineStore
from feast_stream_backfill.feast_plugin.view_rows import emissions_for, file_kind
from tests.conftest import feature_store_yaml


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


FEATURES = [
    "pair_spend:spend_5m",
    "pair_spend:transactions_5m",
    "merchant_risk:risk",
    "pair_visits:visits",
]

# label, user, merchant, t -> spend_5m, transactions_5m, risk, visits. Not in time order.
CASES = [
    ("a", "u1", "m1", "10:11:00", 18.0, 3, 0.25, 4),  # late firing overwrote the newer 20
    ("b", "u1", "m1", "10:05:59.999", None, None, 0.25, 3),  # window not fired yet
    ("c", "u1", "m1", "10:06:00", 10.0, 1, 0.25, 3),  # emit_time == t is visible
    ("d", "u1", "m2", "10:06:00", 7.0, 1, 0.5, 8),  # the other merchant: its own value
    ("e", "u1", "m1", "10:10:30", 20.0, 1, 0.25, 4),  # same instant: later sequence wins
    ("f", "u1", "m2", "10:16:00", 7.0, 1, 0.5, 8),  # exactly ttl old: visible
    ("g", "u1", "m2", "10:16:00.001", None, None, 0.5, 8),  # 1 ms past the ttl
    ("h", "u2", "m1", "10:20:00", None, None, 0.25, None),  # u2's window never fired
    ("i", "u1", "m1", "10:04:59.999", None, None, 0.1, 3),
    ("j", "u1", "m1", "10:05:00", None, None, 0.25, 3),  # batch row at exactly t; created
    ("k", "u2", "m2", "11:00:00", None, None, 0.5, None),  # batch row exactly ttl old
    ("l", "u2", "m2", "11:00:00.001", None, None, None, None),
    ("m", "u1", "m1", "11:00:00", None, None, 0.3, 4),  # stream value older than ttl
    ("c2", "u1", "m1", "10:06:00", 10.0, 1, 0.25, 3),  # a duplicate of c: kept
]
LABELS = [c[0] for c in CASES]
EXPECTED = [list(c[4:]) for c in CASES]


def entity_rows() -> list[tuple]:
    return [(u, m, t(hms), label) for label, u, m, hms, *_ in CASES]


ARCHIVE = [
    (0, 0, "10:00:10", "u1", "m1", 10.0),
    (0, 1, "10:01:00", "u1", "m2", 7.0),
    (0, 2, "10:06:00", "u1", "m1", 20.0),
    (0, 3, "10:10:30", "u2", "m1", 1.0),
    (0, 4, "10:03:00", "u1", "m1", 5.0),
    (0, 5, "10:11:00", "u3", "m2", 1.0),
    (0, 6, "10:04:00", "u1", "m1", 3.0),
]
RISK = [
    ("m1", "10:00:00", "10:00:00", 0.1),
    ("m1", "10:05:00", "10:05:00", 0.2),
    ("m1", "10:05:00", "10:07:00", 0.25),
    ("m1", "10:05:00", None, 0.9),
    ("m1", "11:00:00", "11:00:00", 0.3),
    ("m2", "10:00:00", "10:00:00", 0.5),
]
VISITS = [("u1", "m1", "09:00:00", 3), ("u1", "m2", "09:30:00", 8), ("u1", "m1", "10:10:30", 4)]


def _ts(column: str):
    return F.to_timestamp(F.concat(F.lit("2026-01-01 "), F.col(column)))


def definitions() -> list:
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    merchant = Entity(name="merchant", join_keys=["merchant_id"], value_type=ValueType.STRING)
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
    window = timedelta(minutes=5)
    pair_spend = StreamFeatureView(
        name="pair_spend",
        source=payments,
        entities=[user, merchant],
        ttl=timedelta(minutes=10),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="merchant_id", dtype=String),
            Field(name="spend_5m", dtype=Float64),
            Field(name="transactions_5m", dtype=Int64),
        ],
        aggregations=[
            Aggregation(column="amount", function="sum", time_window=window, name="spend_5m"),
            Aggregation(
                column="amount", function="count", time_window=window, name="transactions_5m"
            ),
        ],
        timestamp_field="event_time",
        tags=backfill_tags(allowed_lateness=timedelta(minutes=10)),
    )
    merchant_risk = FeatureView(
        name="merchant_risk",
        entities=[merchant],
        ttl=timedelta(hours=1),
        schema=[Field(name="merchant_id", dtype=String), Field(name="risk", dtype=Float64)],
        source=FileSource(
            name="merchant_risk_source",
            path="data/merchant_risk",
            file_format=DeltaFormat(),
            timestamp_field="ts",
            created_timestamp_column="created",
            field_mapping={"risk_score": "risk"},
        ),
    )
    pair_visits = FeatureView(
        name="pair_visits",
        entities=[user, merchant],
        ttl=timedelta(0),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="merchant_id", dtype=String),
            Field(name="visits", dtype=Int64),
        ],
        source=FileSource(
            name="pair_visits_source",
            path="data/pair_visits",
            file_format=ParquetFormat(),
            timestamp_field="event_time",
        ),
    )

    @on_demand_feature_view(
        sources=[pair_spend], schema=[Field(name="average", dtype=Float64)], mode="pandas"
    )
    def pair_average(inputs: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"average": inputs["spend_5m"] / inputs["transactions_5m"]})

    return [user, merchant, payments, pair_spend, merchant_risk, pair_visits, pair_average]


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server) -> FeatureStore:
    path = tmp_path_factory.mktemp("offline_repo")
    (path / "feature_store.yaml").write_text(feature_store_yaml("offline", redis_server))
    spark.createDataFrame(
        ARCHIVE,
        "partition int, offset long, at string, user_id string, merchant_id string, amount double",
    ).withColumn("event_time", _ts("at")).drop("at").write.format("delta").save(
        str(path / "data/archive/payments")
    )
    spark.createDataFrame(
        RISK, "merchant_id string, at string, made string, risk_score double"
    ).select(
        "merchant_id", _ts("at").alias("ts"), _ts("made").alias("created"), "risk_score"
    ).write.format("delta").save(str(path / "data/merchant_risk"))
    # As pandas writes them: naive (TIMESTAMP_NTZ) event times, read as UTC.
    ntz = F.to_timestamp_ntz(F.concat(F.lit("2026-01-01 "), F.col("at")))
    spark.createDataFrame(
        VISITS, "user_id string, merchant_id string, at string, visits long"
    ).withColumn("event_time", ntz).drop("at").write.parquet(str(path / "data/pair_visits"))
    feature_store = FeatureStore(repo_path=str(path))
    feature_store.apply(definitions())
    return feature_store


def rows_of(df: pd.DataFrame, columns: list[str]) -> list[list]:
    return [[None if pd.isna(v) else v for v in row] for row in df[columns].values.tolist()]


def test_the_emission_log_is_the_scenario_the_expectations_assume(store):
    view = store.get_stream_feature_view("pair_spend")
    log = emissions_for(store.config, view).where("user_id = 'u1'")
    got = [
        (r.merchant_id, r.emit_time.strftime("%H:%M:%S"), r.emit_sequence, r.firing, r.spend_5m)
        for r in log.orderBy("merchant_id", "emit_time", "emit_sequence").collect()
    ]
    assert got == [
        ("m1", "10:06:00", 0, "on_time", 10.0),
        ("m1", "10:10:30", 0, "late", 15.0),
        ("m1", "10:10:30", 1, "on_time", 20.0),
        ("m1", "10:11:00", 0, "late", 18.0),
        ("m2", "10:06:00", 0, "on_time", 7.0),
    ]


def test_stream_and_batch_views_in_one_call_by_their_own_time(store):
    entity_df = pd.DataFrame(
        entity_rows(), columns=["user_id", "merchant_id", "event_timestamp", "label"]
    )
    df = store.get_historical_features(entity_df=entity_df, features=FEATURES).to_df()
    assert list(df["label"]) == LABELS, "rows keep their order, duplicates and extra columns"
    features = ["spend_5m", "transactions_5m", "risk", "visits"]
    assert rows_of(df, features) == EXPECTED


def test_spark_and_sql_entity_dfs_and_full_feature_names(store, spark):
    frame = spark.createDataFrame(
        entity_rows(), "user_id string, merchant_id string, event_timestamp timestamp, label string"
    )
    job = store.get_historical_features(entity_df=frame, features=FEATURES, full_feature_names=True)
    df = job.to_df()
    full = ["pair_spend__spend_5m", "pair_spend__transactions_5m", "merchant_risk__risk"]
    assert list(df["label"]) == LABELS
    assert rows_of(df, [*full, "pair_visits__visits"]) == EXPECTED

    frame.createOrReplaceTempView("offline_store_predictions")
    query = (  # naive prediction times are UTC, like Feast's
        "SELECT user_id, merchant_id, label, CAST(event_timestamp AS TIMESTAMP_NTZ) AS "
        "event_timestamp FROM offline_store_predictions"
    )
    df = store.get_historical_features(entity_df=query, features=FEATURES).to_df()
    assert list(df["label"]) == LABELS
    assert rows_of(df, ["spend_5m", "transactions_5m", "risk", "visits"]) == EXPECTED


def test_to_arrow_and_persist_to_delta_read_back_as_a_saved_dataset(store, tmp_path):
    entity_df = pd.DataFrame(
        entity_rows()[:4], columns=["user_id", "merchant_id", "event_timestamp", "label"]
    )
    job = store.get_historical_features(entity_df=entity_df, features=FEATURES)
    table = job.to_arrow()
    assert table.column("label").to_pylist() == LABELS[:4]
    assert table.column("spend_5m").to_pylist() == [18.0, None, 10.0, 7.0]

    storage = SavedDatasetFileStorage(str(tmp_path / "training"), file_format=DeltaFormat())
    store.create_saved_dataset(from_=job, name="training", storage=storage, allow_overwrite=True)
    # A saved dataset holds keys, timestamps and features (Feast drops the extra columns).
    saved = store.get_saved_dataset("training").to_df()
    saved = saved.sort_values(["event_timestamp", "merchant_id"])
    assert rows_of(saved, ["merchant_id", "spend_5m", "visits"]) == [
        ["m1", None, 3],
        ["m1", 10.0, 3],
        ["m2", 7.0, 8],
        ["m1", 18.0, 4],
    ]
    with pytest.raises(Exception, match="already exist"):
        job.persist(storage)  # only allow_overwrite replaces a dataset


def test_a_source_neither_delta_nor_parquet_is_refused_naming_the_view():
    no_format = FileSource(path="spend.csv", timestamp_field="ts")
    with pytest.raises(ValueError, match=r"^batch view spend: .* Delta or parquet, got None$"):
        file_kind(no_format, "batch view spend")
    with pytest.raises(ValueError, match=r"reads FileSources in Delta or parquet .*got str$"):
        file_kind("spend.csv", "batch view spend")


def test_date_range_mode_gives_every_change_in_the_range(store):
    # Emissions in [10:06:00, 10:10:30]: u1m1 and u1m2 at 10:06, u1m1 twice at 10:10:30; the
    # visits row u1m1 at 10:10:30 coincides. merchant_risk would add m-only rows: not asked.
    df = store.get_historical_features(
        features=["pair_spend:spend_5m", "pair_visits:visits"],
        start_date=t("10:06:00"),
        end_date=t("10:10:30"),
    ).to_df()
    stamps = [s.strftime("%H:%M:%S") for s in df["event_timestamp"]]
    assert list(zip(stamps, df["user_id"], df["merchant_id"], strict=True)) == [
        ("10:06:00", "u1", "m1"),
        ("10:06:00", "u1", "m2"),
        ("10:10:30", "u1", "m1"),
    ]
    assert rows_of(df, ["spend_5m", "visits"]) == [[10.0, 3], [7.0, 8], [20.0, 4]]


def test_pull_latest_gives_each_key_its_latest_batch_row_in_the_range(store):
    source = store.get_feature_view("merchant_risk").batch_source

    def latest(start, end):
        job = StreamBackfillOfflineStore.pull_latest_from_table_or_query(
            store.config, source, ["merchant_id"], ["risk_score"], "ts", "created", start, end
        )
        return sorted((r.merchant_id, r.risk_score) for r in job.to_spark_df().collect())

    # At 10:05 three rows tie on event time: the latest created wins, the null one loses.
    assert latest(t("10:00:00"), t("10:06:00")) == [("m1", 0.25), ("m2", 0.5)]
    assert latest(t("10:00:01"), t("11:00:00")) == [("m1", 0.3)]


def test_no_join_pairs_predictions_with_feature_rows_on_the_key_alone(store, spark):
    frame = spark.createDataFrame(
        entity_rows(), "user_id string, merchant_id string, event_timestamp timestamp, label string"
    )
    job = store.get_historical_features(entity_df=frame, features=FEATURES)
    physical = job.to_spark_df()._jdf.queryExecution().executedPlan().toString()
    assert "CartesianProduct" not in physical and "BroadcastNestedLoopJoin" not in physical
    # No join at all: the entity rows go through each view's sort themselves.
    assert not re.search(r"SortMergeJoin|BroadcastHashJoin|ShuffledHashJoin", physical), physical
    assert physical.count("Window [") >= 3, "each view's as-of join is a sort and a window"


def test_missing_columns_are_named_with_the_view(store):
    entity_df = pd.DataFrame({"user_id": ["u1"], "event_timestamp": [t("10:06:00")]})
    with pytest.raises(ValueError, match=r"'merchant_risk' joins on \['merchant_id'\]"):
        store.get_historical_features(entity_df=entity_df, features=["merchant_risk:risk"])

    merchant = store.get_entity("merchant")
    bad = FeatureView(
        name="bad_risk",
        entities=[merchant],
        schema=[Field(name="merchant_id", dtype=String), Field(name="risk", dtype=Float64)],
        source=FileSource(
            path="data/merchant_risk", file_format=DeltaFormat(), timestamp_field="at"
        ),
    )
    with pytest.raises(
        ValueError, match=r"'bad_risk' \(source 'data/merchant_risk'.*\['at', 'risk'\]"
    ):
        StreamBackfillOfflineStore.get_historical_features(
            store.config, [bad], ["bad_risk:risk"], entity_df, store.registry, store.project
        )


def test_on_demand_views_transform_the_values_as_of_each_row(store):
    # Cases a, b, c and e: (18 / 3), nothing yet, (10 / 1), (20 / 1) at the same instant.
    wanted = {"a", "b", "c", "e"}
    rows = [row for row in entity_rows() if row[3] in wanted]
    entity_df = pd.DataFrame(rows, columns=["user_id", "merchant_id", "event_timestamp", "label"])
    features = ["pair_spend:spend_5m", "pair_average:average"]
    df = store.get_historical_features(entity_df=entity_df, features=features).to_df()
    assert list(df["label"]) == ["a", "b", "c", "e"]
    assert rows_of(df, ["spend_5m", "average"]) == [
        [18.0, 6.0],
        [None, None],
        [10.0, 10.0],
        [20.0, 20.0],
    ]
    # Online, Feast applies it to what the plugin materialized: at 10:11 u1m1 holds $18 of 3.
    store.materialize(t("10:00:00"), t("10:11:00"), feature_views=["pair_spend"])
    online = store.get_online_features(
        features=features, entity_rows=[{"user_id": "u1", "merchant_id": "m1"}]
    ).to_dict()
    assert (online["spend_5m"], online["average"]) == ([18.0], [6.0])


def test_a_batch_view_transformation_is_refused_not_silently_skipped(store):
    merchant = store.get_entity("merchant")
    transformed = BatchFeatureView(
        name="risk_doubled",
        entities=[merchant],
        schema=[Field(name="merchant_id", dtype=String), Field(name="risk", dtype=Float64)],
        source=store.get_feature_view("merchant_risk").batch_source,
        udf=lambda df: df,
        udf_string="lambda df: df",
        mode="pandas",
    )
    entity_df = pd.DataFrame({"merchant_id": ["m1"], "event_timestamp": [t("10:06:00")]})
    with pytest.raises(NotImplementedError, match="batch feature view 'risk_doubled' has a udf"):
        StreamBackfillOfflineStore.get_historical_features(
            store.config,
            [transformed],
            ["risk_doubled:risk"],
            entity_df,
            store.registry,
            store.project,
        )
