"""The rest of Feast's offline-store contract, through Feast (real Spark, Delta, redis-server).

``driver_stats`` (Delta, ttl 1 h, created timestamps)::

    driver  event time  created  trips
    1       10:00       10:30    1      written late (a backfill)
    1       10:10       10:10    2
    2       10:00       10:00    10
    2       10:00       12:00    20     the same event time, re-created at noon

``global_stats`` (a parquet directory written by pandas, nanosecond timestamps; no entities, no
ttl): rides 5 at 10:00, 7 at 10:30. ``global_fares`` (one parquet file, likewise): fare 1.5 at
10:00.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest
from feast import Entity, FeatureService, FeatureStore, FeatureView, Field, FileSource
from feast.data_format import DeltaFormat, ParquetFormat
from feast.errors import SavedDatasetLocationAlreadyExists
from feast.feature_logging import LoggingConfig
from feast.infra.offline_stores.file_source import FileLoggingDestination, SavedDatasetFileStorage
from feast.types import Float64, Int64
from pyspark.sql import functions as F

from tests.conftest import feature_store_yaml


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server) -> FeatureStore:
    path = tmp_path_factory.mktemp("contract_repo")
    (path / "feature_store.yaml").write_text(feature_store_yaml("contract", redis_server))

    def stamp(column: str):
        return F.to_timestamp(F.concat(F.lit("2026-01-01 "), F.col(column)))

    spark.createDataFrame(
        [(1, "10:00", "10:30", 1), (1, "10:10", "10:10", 2), (2, "10:00", "10:00", 10)]
        + [(2, "10:00", "12:00", 20)],
        "driver_id long, at string, made string, trips long",
    ).select(
        "driver_id", stamp("at").alias("event_time"), stamp("made").alias("created"), "trips"
    ).write.format("delta").save(str(path / "data/driver_stats"))
    # As pandas writes parquet by default (Feast's own file sources): nanosecond timestamps.
    (path / "data/global_stats").mkdir(parents=True)
    pd.DataFrame({"rides": [5, 7], "event_time": [t("10:00"), t("10:30")]}).to_parquet(
        path / "data/global_stats/part-0.parquet"
    )
    pd.DataFrame({"fare": [1.5], "event_time": [t("10:00")]}).to_parquet(
        path / "data/global_fares.parquet"
    )

    driver = Entity(name="driver", join_keys=["driver_id"])
    driver_stats = FeatureView(
        name="driver_stats",
        entities=[driver],
        ttl=timedelta(hours=1),
        schema=[Field(name="driver_id", dtype=Int64), Field(name="trips", dtype=Int64)],
        source=FileSource(
            name="driver_stats_source",
            path="data/driver_stats",
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            created_timestamp_column="created",
        ),
    )
    global_stats = FeatureView(
        name="global_stats",
        entities=[],
        ttl=timedelta(0),
        schema=[Field(name="rides", dtype=Int64)],
        source=FileSource(
            name="global_stats_source",
            path="data/global_stats",
            file_format=ParquetFormat(),
            timestamp_field="event_time",
        ),
    )
    global_fares = FeatureView(
        name="global_fares",
        entities=[],
        schema=[Field(name="fare", dtype=Float64)],
        source=FileSource(
            name="global_fares_source",
            path="data/global_fares.parquet",
            file_format=ParquetFormat(),
            timestamp_field="event_time",
        ),
    )
    logged = FeatureService(
        name="logged",
        features=[driver_stats],
        logging_config=LoggingConfig(destination=FileLoggingDestination(path="data/logs")),
    )
    feature_store = FeatureStore(repo_path=str(path))
    feature_store.apply([driver, driver_stats, global_stats, global_fares, logged])
    return feature_store


def training(store: FeatureStore, rows: list[tuple[int, str]], features: list[str], **options):
    entity_df = pd.DataFrame(
        [(driver, t(hms)) for driver, hms in rows], columns=["driver_id", "event_timestamp"]
    )
    return store.get_historical_features(entity_df=entity_df, features=features, **options).to_df()


def column(df: pd.DataFrame, name: str) -> list:
    return [None if pd.isna(v) else v for v in df[name]]


ROWS = [(1, "10:05"), (1, "10:20"), (1, "10:40"), (1, "11:15"), (2, "11:00")]


def test_filter_by_created_timestamp_keeps_what_had_been_written_by_then(store):
    plain = training(store, ROWS, ["driver_stats:trips"])
    # 10:05: the 10:00 row; 11:15: the 10:10 row is past the ttl; driver 2: noon's copy wins.
    assert column(plain, "trips") == [1, 2, 2, None, 20]
    created = training(store, ROWS, ["driver_stats:trips"], filter_by_created_timestamp=True)
    # 10:05: nothing created yet; 10:40: both rows exist and the later event time wins, not the
    # row created last (10:30); driver 2 at 11:00: noon's copy does not exist yet.
    assert column(created, "trips") == [None, 2, 2, None, 10]


def test_an_entityless_view_joins_on_time_alone_and_materializes(store):
    rows = [(1, "09:59"), (2, "10:15"), (1, "10:45")]
    df = training(store, rows, ["global_stats:rides", "driver_stats:trips"])
    assert column(df, "rides") == [None, 5, 7]
    assert "__dummy_id" not in df.columns
    store.materialize(t("10:00"), t("11:00"), feature_views=["global_stats"])
    online = store.get_online_features(
        features=["global_stats:rides"], entity_rows=[{"driver_id": 1}]
    ).to_dict()
    assert online["rides"] == [7]


def test_persist_raises_feasts_error_on_an_existing_location(store, tmp_path):
    job = store.get_historical_features(
        entity_df=pd.DataFrame({"driver_id": [1], "event_timestamp": [t("10:20")]}),
        features=["driver_stats:trips"],
    )
    for fmt in (DeltaFormat(), ParquetFormat()):
        storage = SavedDatasetFileStorage(str(tmp_path / type(fmt).__name__), file_format=fmt)
        job.persist(storage)
        with pytest.raises(SavedDatasetLocationAlreadyExists):
            job.persist(storage)
        job.persist(storage, allow_overwrite=True)


def test_offline_writes_append_to_parquet_directories_and_single_files(store):
    store.write_to_offline_store(
        "global_stats", pd.DataFrame({"rides": [9], "event_time": [t("11:00")]})
    )
    store.write_to_offline_store(
        "global_fares", pd.DataFrame({"fare": [2.5], "event_time": [t("11:00")]})
    )
    assert (store.repo_path / "data/global_fares.parquet").is_file()
    features = ["global_stats:rides", "global_fares:fare"]
    df = training(store, [(1, "10:59"), (1, "11:00")], features)
    assert column(df, "rides") == [7, 9]
    assert column(df, "fare") == [1.5, 2.5]


def test_logged_features_are_appended_to_the_file_destination(store, spark):
    logs = pa.table({"driver_id": [1, 2], "trips": [2, 10]})
    service = store.get_feature_service("logged")
    store.write_logged_features(logs, service)
    store.write_logged_features(logs, service)
    written = spark.read.parquet(str(store.repo_path / "data/logs"))
    assert sorted(tuple(r) for r in written.select("driver_id", "trips").collect()) == [
        (1, 2),
        (1, 2),
        (2, 10),
        (2, 10),
    ]
