"""5-minute spend per user from a parquet archive of a Kafka topic: the feature repo that
tests/test_install.py runs with the plugin installed from its wheel."""

from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import JsonFormat, ParquetFormat
from feast.types import Float64, Int64, String

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

transactions = KafkaSource(
    name="transactions",
    topic="transactions",
    kafka_bootstrap_servers="localhost:9092",
    message_format=JsonFormat(schema_json="user_id string, amount double, event_time timestamp"),
    timestamp_field="event_time",
    batch_source=FileSource(
        name="transactions_archive",
        path="data/archive/transactions",
        file_format=ParquetFormat(),
        timestamp_field="event_time",
        tags=archive_tags(partition_column="partition", offset_column="offset"),
    ),
    watermark_delay_threshold=timedelta(seconds=5),
)

WINDOW = timedelta(minutes=5)

user_spend_5m = StreamFeatureView(
    name="user_spend_5m",
    source=transactions,
    entities=[user],
    ttl=timedelta(hours=1),
    schema=[
        Field(name="user_id", dtype=String),
        Field(name="spend_5m", dtype=Float64),
        Field(name="transactions_5m", dtype=Int64),
    ],
    aggregations=[
        Aggregation(column="amount", function="sum", time_window=WINDOW, name="spend_5m"),
        Aggregation(column="amount", function="count", time_window=WINDOW, name="transactions_5m"),
    ],
    timestamp_field="event_time",
    tags=backfill_tags(watermark_interval=timedelta(milliseconds=200)),
)
