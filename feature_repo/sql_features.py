"""A view whose job is the team's Flink SQL script, user_spend_1h.sql, as written.

The view declares what Feast serves (the entity, the features' schema, the topic's
``KafkaSource`` with its archive); the window, the functions and the watermark are the
script's (``sql_tags``).
"""

from datetime import timedelta

from feast import Field, StreamFeatureView
from feast.types import Float64, Int64, String
from features import transactions, user

from feast_stream_backfill.feast_plugin import sql_tags

user_spend_1h = StreamFeatureView(
    name="user_spend_1h",
    source=transactions,
    entities=[user],
    ttl=timedelta(hours=2),
    schema=[
        Field(name="user_id", dtype=String),
        Field(name="spend_1h", dtype=Float64),
        Field(name="transactions_1h", dtype=Int64),
    ],
    timestamp_field="event_time",
    tags=sql_tags("user_spend_1h.sql"),
)
