"""Two jobs, each declared twice: by the team's Flink SQL script and by Feast objects.

user_spend.sql, 5-minute windows: SQL's watermark is ``event_time - 5 s`` per record, where the
DataStream job the Feast objects declare has ``max(event_time) - B - 1 ms``: the Feast view's B
is 4.999 s. user_totals.sql, an unbounded GROUP BY with a 5-minute state TTL: a
processing-time session of gap 5 minutes, fired by every record.
"""

from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags, sql_tags

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

archive = FileSource(
    name="transactions_archive",
    path="data/archive/transactions",
    file_format=DeltaFormat(),
    timestamp_field="event_time",
    tags=archive_tags(partition_column="partition", offset_column="offset"),
)

RECORD = "user_id string, amount double, event_time timestamp"


def transactions(bound: timedelta | None) -> KafkaSource:
    return KafkaSource(
        name=f"transactions_{'sql' if bound is None else 'feast'}",
        topic="transactions",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(
            schema_json="user_id string, amount double, event_time timestamp"
        ),
        timestamp_field="event_time",
        batch_source=archive,
        watermark_delay_threshold=bound,
    )


SCHEMA = [
    Field(name="user_id", dtype=String),
    Field(name="spend_5m", dtype=Float64),
    Field(name="transactions_5m", dtype=Int64),
    Field(name="max_amount_5m", dtype=Float64),
]

spend_sql = StreamFeatureView(
    name="spend_sql",
    source=transactions(None),
    entities=[user],
    ttl=timedelta(hours=1),
    schema=SCHEMA,
    timestamp_field="event_time",
    tags=sql_tags("user_spend.sql"),
)

WINDOW = timedelta(minutes=5)
spend_feast = StreamFeatureView(
    name="spend_feast",
    source=transactions(timedelta(milliseconds=4_999)),
    entities=[user],
    ttl=timedelta(hours=1),
    schema=SCHEMA,
    aggregations=[
        Aggregation(column="amount", function="sum", time_window=WINDOW, name="spend_5m"),
        Aggregation(column="amount", function="count", time_window=WINDOW, name="transactions_5m"),
        Aggregation(column="amount", function="max", time_window=WINDOW, name="max_amount_5m"),
    ],
    timestamp_field="event_time",
    tags=backfill_tags(watermark_interval=timedelta(milliseconds=200)),
)

TOTALS = [
    Field(name="user_id", dtype=String),
    Field(name="total_spend", dtype=Float64),
    Field(name="total_transactions", dtype=Int64),
]
TTL = timedelta(minutes=5)

totals_sql = StreamFeatureView(
    name="totals_sql",
    source=transactions(None),
    entities=[user],
    ttl=timedelta(hours=1),
    schema=TOTALS,
    timestamp_field="event_time",
    tags=sql_tags("user_totals.sql"),
)

totals_feast = StreamFeatureView(
    name="totals_feast",
    source=transactions(timedelta(milliseconds=4_999)),
    entities=[user],
    ttl=timedelta(hours=1),
    schema=TOTALS,
    aggregations=[
        Aggregation(column="amount", function="sum", name="total_spend"),
        Aggregation(column="amount", function="count", name="total_transactions"),
    ],
    timestamp_field="event_time",
    tags=backfill_tags(window_domain="processing", trigger="per_record", session_gap=TTL),
)
