"""A Feast repository on disk for the reliability tests: a bulk archive (one record per user, so
one Redis key per user), stream views over it, and a ``feature_store.yaml`` whose Redis is the
environment's ``FSB_REDIS`` (what ``feast materialize`` run as a command reads too).

The archive: ``users`` users with one record each in [10:00, 10:01) over two partitions, then
one record at 10:05 in each partition: the watermark passes 10:01 and the 1-minute window fires
for every user at once. Each view then writes one key per user.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from feast import Entity, FeatureStore, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags
from tests.conftest import feature_store_yaml

START = datetime.fromisoformat("2026-01-01T10:00:00+00:00")
END = START + timedelta(hours=1)


def write_bulk_archive(spark: SparkSession, path: str, users: int) -> None:
    """The archive above, as a Delta table at ``path``."""
    start = int(START.timestamp() * 1000)
    spark.range(users + 2).select(
        (F.col("id") % 2).cast("int").alias("partition"),
        (F.col("id") / 2).cast("long").alias("offset"),
        F.timestamp_millis(
            F.when(F.col("id") < users, F.lit(start) + F.col("id") % 60_000).otherwise(
                F.lit(start + 300_000)
            )
        ).alias("event_time"),
        F.format_string("user%07d", "id").alias("user_id"),
        (F.col("id") % 100).cast("double").alias("amount"),
    ).write.format("delta").save(path)


def objects(archive: str) -> list:
    """The entity and two views over the archive: ``spend`` (sum, count) and ``top`` (max)."""
    user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
    source = KafkaSource(
        name="bulk",
        topic="bulk",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=FileSource(
            name="bulk_archive",
            path=archive,
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
        watermark_delay_threshold=timedelta(0),
    )
    minute = timedelta(minutes=1)

    def view(name: str, features: list[tuple[str, str, object]]) -> StreamFeatureView:
        return StreamFeatureView(
            name=name,
            source=source,
            entities=[user],
            ttl=timedelta(0),
            schema=[Field(name="user_id", dtype=String)]
            + [Field(name=f, dtype=dtype) for f, _, dtype in features],
            aggregations=[
                Aggregation(column="amount", function=fn, time_window=minute, name=f)
                for f, fn, _ in features
            ],
            timestamp_field="event_time",
            tags=backfill_tags(),
        )

    spend = view("spend", [("spend", "sum", Float64), ("n", "count", Int64)])
    top = view("top", [("top", "max", Float64)])
    return [user, spend, top]


def make_repo(
    spark: SparkSession, path: Path, users: int, project: str, registry: str = "data/registry.db"
) -> FeatureStore:
    """The repository at ``path``, applied (registry written); the store it opens.
    ``registry``: as :func:`tests.conftest.feature_store_yaml`."""
    (path / "data").mkdir(parents=True, exist_ok=True)
    yaml = feature_store_yaml(project, "${FSB_REDIS}", registry)
    (path / "feature_store.yaml").write_text(yaml)
    archive = str(path / "data" / "archive")
    write_bulk_archive(spark, archive, users)
    store = FeatureStore(repo_path=str(path))
    store.apply(objects(archive))
    return store
