"""Each Feast data source a ``KafkaSource`` may have as its ``batch_source``, read back from
the registry's proto, becomes the core archive it declares (no Spark: the declarations only;
``tests/test_several_topics.py`` backfills a sink-connector folder and a catalog table through
Feast, ``tests/test_archive_layouts.py`` compares the layouts' emission logs)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat, ParquetFormat
from feast.data_source import DataSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.table_format import IcebergFormat
from feast.types import Float64, String

from feast_stream_backfill.archives import SinkConnectorArchive, TableArchive
from feast_stream_backfill.feast_plugin import archive_tags, sink_connector_tags, stream_job


def view(archive: DataSource) -> StreamFeatureView:
    source = KafkaSource(
        name="clicks",
        topic="clicks",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=archive,
    )
    declared = StreamFeatureView(
        name="clicks_1m",
        source=source,
        entities=[Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)],
        schema=[Field(name="user_id", dtype=String), Field(name="spend", dtype=Float64)],
        aggregations=[
            Aggregation(
                column="amount", function="sum", time_window=timedelta(minutes=1), name="spend"
            )
        ],
        timestamp_field="event_time",
    )
    return StreamFeatureView.from_proto(declared.to_proto())


def spark_source(**options) -> SparkSource:
    return SparkSource(name="clicks_archive", timestamp_field="event_time", **options)


@pytest.mark.filterwarnings("ignore:The spark data source API is an experimental")
@pytest.mark.parametrize(
    ("archive", "path", "expected"),
    [
        (
            FileSource(path="data/clicks", file_format=DeltaFormat(), timestamp_field="ts"),
            "/repo/data/clicks",
            None,
        ),
        (
            FileSource(path="data/clicks", file_format=ParquetFormat(), timestamp_field="ts"),
            None,
            TableArchive(path="/repo/data/clicks", format="parquet"),
        ),
        (spark_source(table="kafka.clicks"), None, TableArchive(table="kafka.clicks")),
        (
            spark_source(path="s3a://b/clicks", file_format="avro"),
            None,
            TableArchive(path="s3a://b/clicks", format="org.apache.spark.sql.avro.AvroFileFormat"),
        ),
        (
            spark_source(path="db.clicks", table_format=IcebergFormat(properties={"a": "1"})),
            None,
            TableArchive(path="db.clicks", format="iceberg", options={"a": "1"}),
        ),
        (
            spark_source(path="s3a://b", file_format="json", tags=sink_connector_tags()),
            None,
            SinkConnectorArchive("s3a://b", "clicks", "json", timestamp_field="event_time"),
        ),
        (
            spark_source(
                path="sink",
                file_format="parquet",
                tags=sink_connector_tags(
                    topic="clicks-v2",
                    topics_dir="raw",
                    offset_field="kafka_offset",
                    schema="user_id string",
                ),
            ),
            None,
            SinkConnectorArchive(
                "/repo/sink",
                "clicks-v2",
                "parquet",
                topics_dir="raw",
                offset_field="kafka_offset",
                timestamp_field="event_time",
                schema="user_id string",
            ),
        ),
    ],
    ids=["delta", "parquet", "table", "path", "iceberg", "sink-json", "sink-options"],
)
def test_each_batch_source_is_the_archive_it_declares(archive, path, expected):
    (topic,) = stream_job(view(archive), "/repo").topics
    assert (topic.path, topic.archive) == (path, expected)


@pytest.mark.filterwarnings("ignore:The spark data source API is an experimental")
def test_sources_that_are_no_archive_are_named():
    query = spark_source(query="SELECT * FROM clicks")
    with pytest.raises(ValueError, match="'clicks_archive' with a query: nothing tells whether"):
        stream_job(view(query), "/repo")
    csv_sink = spark_source(path="s3a://b", file_format="csv", tags=sink_connector_tags())
    with pytest.raises(ValueError, match="file_format 'csv': a sink connector writes json"):
        stream_job(view(csv_sink), "/repo")


def test_archive_tags_still_name_the_partition_and_offset_of_any_archive():
    archive = FileSource(
        path="p",
        file_format=ParquetFormat(),
        timestamp_field="ts",
        tags=archive_tags(partition_column="kafka_partition", offset_column="kafka_offset"),
    )
    (topic,) = stream_job(view(archive)).topics
    assert (topic.partition_col, topic.offset_col, topic.timestamp_col) == (
        "kafka_partition",
        "kafka_offset",
        "ts",
    )
