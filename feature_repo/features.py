"""A Flink job declared as Feast objects: 5-minute spend per user, from archived transactions.

The Flink job this mirrors::

    env.fromSource(kafka("transactions"),
                   WatermarkStrategy.forBoundedOutOfOrderness(Duration.ofSeconds(5)), ...)
       .keyBy(t -> t.userId)
       .window(TumblingEventTimeWindows.of(Duration.ofMinutes(5)))
       .aggregate(sum, count, mean, max of amount)      // default trigger, no lateness
       .sinkTo(redis)

and a second job over the same topic, enriched before windowing: each transaction's fee, at
the fee rate of the user's tier as the job would have looked it up when it processed the
record (a processing-time lookup join on an SCD type II table), summed per 5 minutes::

    SELECT user_id, SUM(amount * c.fee_rate) AS fees_5m
    FROM transactions t LEFT JOIN user_tiers FOR SYSTEM_TIME AS OF t.proc_time AS c
      ON t.user_id = c.user_id
    GROUP BY user_id, TUMBLE(event_time, INTERVAL '5' MINUTE)
"""

from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String

from feast_stream_backfill.enrichment import Lookup, ScdTable
from feast_stream_backfill.feast_plugin import (
    archive_tags,
    backfill_tags,
    calibration_tags,
    derived_tags,
    lookup_tags,
    observed_writes_tags,
)

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)

# The archive: every record of the Kafka topic, as a Delta table.
transactions_archive = FileSource(
    name="transactions_archive",
    path="data/archive/transactions",
    file_format=DeltaFormat(),
    timestamp_field="event_time",
    tags=archive_tags(partition_column="partition", offset_column="offset"),
)

transactions = KafkaSource(
    name="transactions",
    topic="transactions",
    kafka_bootstrap_servers="localhost:9092",
    message_format=JsonFormat(schema_json="user_id string, amount double, event_time timestamp"),
    timestamp_field="event_time",
    batch_source=transactions_archive,
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
        Field(name="mean_amount_5m", dtype=Float64),
        Field(name="max_amount_5m", dtype=Float64),
    ],
    aggregations=[
        Aggregation(column="amount", function="sum", time_window=WINDOW, name="spend_5m"),
        Aggregation(column="amount", function="count", time_window=WINDOW, name="transactions_5m"),
        Aggregation(column="amount", function="mean", time_window=WINDOW, name="mean_amount_5m"),
        Aggregation(column="amount", function="max", time_window=WINDOW, name="max_amount_5m"),
    ],
    timestamp_field="event_time",
    tags={
        **backfill_tags(watermark_interval=timedelta(milliseconds=200)),
        **calibration_tags("user_spend_5m_writes"),
    },
)

# What the live job wrote: its output topic as archived, one row per write, with the write time
# and the firing's own processing time (`feast-stream-backfill calibrate user_spend_5m`).
user_spend_5m_writes = FileSource(
    name="user_spend_5m_writes",
    path="data/live/user_spend_5m",
    file_format=DeltaFormat(),
    timestamp_field="write_time",
    tags=observed_writes_tags(processing_time_column="processing_time"),
)

# State for enrichment: the users' fee tiers, an SCD type II table (Delta).
user_tiers = ScdTable(
    name="user_tiers",
    keys=["user_id"],
    path="data/state/user_tiers",
    valid_from="valid_from",
    valid_to="valid_to",
)

user_fees_5m = StreamFeatureView(
    name="user_fees_5m",
    source=transactions,
    entities=[user],
    ttl=timedelta(hours=1),
    schema=[
        Field(name="user_id", dtype=String),
        Field(name="fees_5m", dtype=Float64),
    ],
    aggregations=[
        Aggregation(column="fee", function="sum", time_window=WINDOW, name="fees_5m"),
    ],
    timestamp_field="event_time",
    tags={
        **backfill_tags(watermark_interval=timedelta(milliseconds=200)),
        **lookup_tags(Lookup(user_tiers, ["fee_rate"], time="processing", how="left")),
        **derived_tags({"fee": "amount * fee_rate"}),
    },
)
