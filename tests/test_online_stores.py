"""``feast materialize`` into Feast's sqlite online store (written from the driver) and into
Redis (from the executors): the same values, reruns that change nothing, clear errors.

View ``spend_1m`` (as in ``test_materialize``): one partition, 1-minute tumbling windows, B = 0,
allowed lateness 2 min, min gap 1 s, 200 ms periodic watermark::

    offset  et        user  amount  what it makes happen
    0       10:00:10  u1    1
    1       10:00:40  u3    32
    2       10:01:30  u1    2       W = 10:01:29.999 fires [10:00, 10:01): u1 = 1, u3 = 32
    3       10:02:30  u1    4       fires [10:01, 10:02): u1 = 2
    4       10:00:20  u1    8       (pt 10:02:31) late, kept: [10:00, 10:01) fires again, u1 = 9
    5       10:01:10  u2    16      (pt 10:02:32) late, kept: u2 = 16
    6       10:09:00  u3    64      fires [10:02, 10:03): u1 = 4

Materialized over [10:00, 10:03]: u1 = 9 (2 records), u2 = 16 (1), u3 = 32 (1), u4 nothing; over
[10:00, 10:10]: u1 = 4 (1), the others unchanged.
"""

from __future__ import annotations

import io
import socket
import sqlite3
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from feast import (
    Entity,
    FeatureStore,
    FeatureView,
    Field,
    FileSource,
    KafkaSource,
    RepoConfig,
    StreamFeatureView,
    ValueType,
)
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Bytes, Float64, Int64, String
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from tqdm import tqdm

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags
from feast_stream_backfill.feast_plugin.compute_engine import _writing_tasks, write_online
from feast_stream_backfill.feast_plugin.online_writer import (
    LiveCounts,
    OnlineStoreWriteError,
    RowsReporter,
    store_address,
    writes_from_driver,
)

SMALL = [
    (0, "10:00:10", "u1", 1.0),
    (1, "10:00:40", "u3", 32.0),
    (2, "10:01:30", "u1", 2.0),
    (3, "10:02:30", "u1", 4.0),
    (4, "10:00:20", "u1", 8.0),
    (5, "10:01:10", "u2", 16.0),
    (6, "10:09:00", "u3", 64.0),
]
USERS = ["u1", "u2", "u3", "u4"]
ENGINE = "feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine"
OFFLINE = "feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


def keyed_by_id(name: str, feature: Field) -> tuple[Entity, FeatureView]:
    """A batch view of one feature keyed by ``id``, its timestamp ``ts``."""
    entity = Entity(name="e", join_keys=["id"], value_type=ValueType.STRING)
    view = FeatureView(
        name=name,
        entities=[entity],
        ttl=timedelta(hours=1),
        schema=[Field(name="id", dtype=String), feature],
        source=FileSource(path="unused", timestamp_field="ts"),
    )
    return entity, view


def recording_bars() -> tuple[list[tqdm], Callable[[int | None], tqdm]]:
    """A ``tqdm_builder`` whose bars write to memory, and the bars it built."""
    bars: list[tqdm] = []

    def bar(total: int | None) -> tqdm:
        bars.append(tqdm(total=total, file=io.StringIO()))
        return bars[-1]

    return bars, bar


def objects(archive: Path) -> list:
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    source = KafkaSource(
        name="small",
        topic="small",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=FileSource(
            name="small_archive",
            path=str(archive),
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
        watermark_delay_threshold=timedelta(0),
    )
    minute = timedelta(minutes=1)
    view = StreamFeatureView(
        name="spend_1m",
        source=source,
        entities=[user],
        ttl=timedelta(hours=1),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend", dtype=Float64),
            Field(name="n", dtype=Int64),
        ],
        aggregations=[
            Aggregation(column="amount", function="sum", time_window=minute, name="spend"),
            Aggregation(column="amount", function="count", time_window=minute, name="n"),
        ],
        timestamp_field="event_time",
        tags=backfill_tags(allowed_lateness=timedelta(minutes=2), min_gap=timedelta(seconds=1)),
    )
    return [user, view]


def config(repo: Path, online_store: dict, logs: Path | None = None) -> RepoConfig:
    """``logs``: where the emission logs are (shared: one backfill serves both stores)."""
    logs = logs or repo / "emission_log"
    return RepoConfig(
        project="stores",
        provider="local",
        registry=str(repo / "registry.db"),
        online_store=online_store,
        offline_store={"type": OFFLINE, "emission_log_path": str(logs)},
        batch_engine={"type": ENGINE},
        entity_key_serialization_version=3,
        repo_path=repo,
    )


def small_archive(spark, rows: list[tuple] = SMALL) -> DataFrame:
    """``(offset, "hh:mm:ss" on 2026-01-01, user_id, amount)`` rows as partition 0's records."""
    return spark.createDataFrame(
        [(0, o, f"2026-01-01 {hms}", u, a) for o, hms, u, a in rows],
        "partition int, offset long, ts string, user_id string, amount double",
    ).select("partition", "offset", F.to_timestamp("ts").alias("event_time"), "user_id", "amount")


@pytest.fixture(scope="module")
def archive(tmp_path_factory, spark) -> Path:
    path = tmp_path_factory.mktemp("stores_archive") / "small"
    small_archive(spark).write.format("delta").save(str(path))
    return path


@pytest.fixture(scope="module")
def stores(tmp_path_factory, archive, redis_server) -> dict[str, FeatureStore]:
    made, logs = {}, archive.parent / "emission_log"
    for kind, online in {
        "sqlite": {"type": "sqlite", "path": "data/online.db"},
        "redis": {"type": "redis", "connection_string": redis_server},
    }.items():
        repo = tmp_path_factory.mktemp(f"stores_{kind}")
        made[kind] = FeatureStore(config=config(repo, online, logs))
        made[kind].apply(objects(archive))
    return made


def online(store: FeatureStore) -> dict[str, list]:
    got = store.get_online_features(
        ["spend_1m:spend", "spend_1m:n"], [{"user_id": u} for u in USERS]
    ).to_dict()
    return {"spend": got["spend"], "n": got["n"]}


def sqlite_rows(store: FeatureStore) -> list[tuple]:
    path = Path(store.config.repo_path) / "data/online.db"
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT * FROM stores_spend_1m ORDER BY entity_key, feature_name"
        ).fetchall()


def test_sqlite_and_redis_hold_the_same_hand_checked_values(stores):
    for store in stores.values():
        store.materialize(t("10:00:00"), t("10:03:00"), ["spend_1m"])
    expected = {"spend": [9.0, 16.0, 32.0, None], "n": [2, 1, 1, None]}
    assert online(stores["sqlite"]) == online(stores["redis"]) == expected


def test_materializing_twice_leaves_sqlite_unchanged(stores):
    store = stores["sqlite"]
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
    assert online(store) == {"spend": [4.0, 16.0, 32.0, None], "n": [1, 1, 1, None]}
    first = sqlite_rows(store)
    assert len(first) == 9  # u1, u2, u3 x spend, n and the join key (a feature of the view)
    store.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
    assert sqlite_rows(store) == first


def test_an_unwritable_sqlite_path_fails_naming_the_store(stores):
    # /proc/1 is a directory nobody, root included, can create a file in.
    repo = Path(stores["sqlite"].config.repo_path)
    broken = FeatureStore(
        config=config(repo, {"type": "sqlite", "path": "/proc/1/online.db"}, repo.parent)
    )
    with pytest.raises(OnlineStoreWriteError) as error:
        broken.materialize(t("10:00:00"), t("10:10:00"), ["spend_1m"])
    assert str(error.value) == (
        "cannot open the online store at '/proc/1/online.db' (sqlite online store): "
        "unable to open database file"
    )


def test_a_network_store_feasts_writer_covers_is_written_from_the_executors(
    spark, redis_server, tmp_path
):
    """Bytes features are not the Redis writer's: Feast's ``online_write_batch`` writes them,
    from the executors."""
    entity, view = keyed_by_id("blobs", Field(name="blob", dtype=Bytes))
    store = FeatureStore(
        config=config(tmp_path, {"type": "redis", "connection_string": f"{redis_server},db=3"})
    )
    store.apply([entity, view])
    rows = spark.createDataFrame(
        [("a", b"\x00\x01", t("10:00:00")), ("b", b"\xff", t("10:00:01"))],
        "id string, blob binary, ts timestamp",
    )
    assert not writes_from_driver(store.config)
    assert write_online(rows, view, store.config, timestamp="ts") == 2
    got = store.get_online_features(["blobs:blob"], [{"id": "a"}, {"id": "b"}]).to_dict()
    assert got["blob"] == [b"\x00\x01", b"\xff"]


def test_redis_is_written_in_one_wave_of_tasks_and_the_bar_ends_exact(
    spark, redis_server, tmp_path
):
    """A state of many small partitions is written by at most one task per core (each task
    is a connection and a ramp; see ``write_online``), one fewer with Redis on this machine's
    loopback in local mode (it keeps a core), every row once."""
    entity, view = keyed_by_id("waves", Field(name="score", dtype=Float64))
    store = FeatureStore(
        config=config(tmp_path, {"type": "redis", "connection_string": f"{redis_server},db=4"})
    )
    store.apply([entity, view])
    rows = spark.range(0, 600, 1, 12).select(
        F.format_string("k%03d", "id").alias("id"),
        (F.col("id") / 4).alias("score"),
        F.lit(t("10:00:00")).alias("ts"),
    )
    bars, bar = recording_bars()

    assert write_online(rows, view, store.config, bar, timestamp="ts") == 600
    (progress,) = bars
    cores = spark.sparkContext.defaultParallelism
    assert redis_server.startswith("127.0.0.1") and spark.sparkContext.master.startswith("local")
    assert (progress.n, progress.postfix) == (600, f"{max(cores - 1, 1)} partitions done")
    got = store.get_online_features(["waves:score"], [{"id": "k000"}, {"id": "k599"}]).to_dict()
    assert got["score"] == [0.0, 149.75]


@pytest.mark.parametrize(
    ("online_store", "keeps_a_core"),
    [
        ({"type": "redis", "connection_string": "localhost:6379,db=2"}, True),
        ({"type": "redis", "connection_string": "127.0.0.1:6379"}, True),
        ({"type": "redis", "connection_string": "10.1.2.3:6379,password=x"}, False),
        ({"type": "sqlite", "path": "online.db"}, False),
    ],
)
def test_a_local_redis_keeps_a_core_from_the_writers(spark, online_store, keeps_a_core):
    repo_config = RepoConfig(
        project="p",
        provider="local",
        registry="/tmp/registry.db",
        online_store=online_store,
        entity_key_serialization_version=3,
    )
    cores = spark.sparkContext.defaultParallelism
    expected = cores - 1 if keeps_a_core and cores > 1 else cores
    assert _writing_tasks(spark, repo_config) == expected


def test_live_counts_take_each_partitions_latest_attempt_and_ignore_strangers(spark):
    """What running writing tasks report (UDP to the driver), from real Spark tasks: each
    partition's rows once, a retried partition by its latest attempt, a datagram without the
    write's token or with garbage ignored."""
    live = LiveCounts.for_session(spark)
    assert live is not None
    try:
        address, token = live.address, live.token

        def report(batches):
            reporter = RowsReporter(address, token)
            for batch in batches:
                reporter(batch.num_rows, last=True)
                yield batch

        assert spark.range(0, 30, 1, 3).mapInArrow(report, "id long").count() == 30
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for datagram in (
                b"%s 0 1 4" % token.encode(),  # partition 0 again, its next attempt
                b"%s 1 0 999" % token.encode()[::-1],  # not this write's
                b"%s 2 x 999" % token.encode(),
                b"garbage",
            ):
                sender.sendto(datagram, address)
        deadline = time.monotonic() + 10
        while live.value != 24 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert live.value == 24  # 4 (partition 0, attempt 1) + 10 + 10
    finally:
        live.close()


@pytest.mark.parametrize(
    ("online_store", "address", "from_driver"),
    [
        ({"type": "sqlite", "path": "data/online.db"}, "/repo/data/online.db", True),
        ({"type": "sqlite", "path": "/var/o.db"}, "/var/o.db", True),
        (
            {"type": "redis", "connection_string": "h:6379,password=hunter2,ssl=true,db=1"},
            "h:6379,ssl=true,db=1",
            False,
        ),
        ({"type": "remote", "path": "http://user:hunter2@feast:6566"}, "http://feast:6566", False),
    ],
)
def test_a_store_is_named_by_its_address_without_credentials(online_store, address, from_driver):
    repo_config = RepoConfig(
        project="p",
        provider="local",
        registry="/repo/registry.db",
        online_store=online_store,
        entity_key_serialization_version=3,
        repo_path=Path("/repo"),
    )
    assert store_address(repo_config) == address
    assert writes_from_driver(repo_config) is from_driver


def test_deleting_the_view_removes_its_emission_log(stores, archive):
    """After the tests that materialize the view: it deletes it."""
    logs = archive.parent / "emission_log" / "stores"
    assert (logs / "spend_1m").is_dir() and (logs / "spend_1m_dropped").is_dir()
    store = stores["sqlite"]
    view = store.get_stream_feature_view("spend_1m")
    store.apply([], objects_to_delete=[view], partial=False)
    assert sorted(p.name for p in logs.iterdir()) == []


def test_a_file_store_is_written_from_the_driver_in_bounded_batches_with_progress(spark, tmp_path):
    """Three rows in one partition, at most two rows per Arrow batch: two ``online_write_batch``
    calls, counted by the same progress bar as the executors' writes."""
    entity, view = keyed_by_id("scores", Field(name="score", dtype=Float64))
    store = FeatureStore(config=config(tmp_path, {"type": "sqlite", "path": "online.db"}))
    store.apply([entity, view])
    rows = spark.createDataFrame(
        [("a", 1.0, t("10:00:00")), ("b", 2.5, t("10:00:01")), ("c", None, t("10:00:02"))],
        "id string, score double, ts timestamp",
    ).coalesce(1)
    bars, bar = recording_bars()

    before = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        assert write_online(rows, view, store.config, bar, timestamp="ts") == 3
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", before)
    (progress,) = bars
    assert (progress.n, progress.postfix) == (3, "2 batches written")
    got = store.get_online_features(["scores:score"], [{"id": i} for i in "abc"]).to_dict()
    assert got["score"] == [1.0, 2.5, None]
