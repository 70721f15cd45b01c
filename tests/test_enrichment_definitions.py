"""Lookups and derived columns declared on Feast objects survive the registry's round trip."""

from datetime import timedelta

import pytest
from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation as FeastAggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, String

from feast_stream_backfill import Aggregation
from feast_stream_backfill.enrichment import CdcLog, DeltaHistory, Lookup, ScdTable
from feast_stream_backfill.feast_plugin import (
    backfill_tags,
    derived_tags,
    lookup_tags,
    stream_job,
)

TIERS = ScdTable(
    "user_tiers", ["user_id"], "data/state/user_tiers", valid_from="from", valid_to="to"
)
RATES = CdcLog(
    "rates",
    ["currency"],
    "s3a://lake/rates_cdc",
    time="ts",
    op="kind",
    delete_ops=("d", "D"),
    sequence="lsn",
    snapshot_path="/abs/rates_snapshot",
    snapshot_time_ms=1_767_225_600_000,
)
MERCHANTS = DeltaHistory("merchants", ["merchant_id", "country"], "data/merchants", False)
LOOKUPS = [
    Lookup(TIERS, ["fee_rate", "tier"], delay_ms=250, how="inner"),
    Lookup(RATES, ["rate"], on={"currency": "currency"}, time="event", prefix="fx_"),
    Lookup(MERCHANTS, ["risk"], on={"merchant": "merchant_id", "country": "country"}),
]
DERIVED = {"fee": "amount * fee_rate", "amount_usd": "amount * fx_rate"}


def view(tags) -> StreamFeatureView:
    archive = FileSource(
        name="payments_archive",
        path="data/payments",
        file_format=DeltaFormat(),
        timestamp_field="ts",
    )
    source = KafkaSource(
        name="payments",
        topic="payments",
        kafka_bootstrap_servers="k:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="ts",
        batch_source=archive,
    )
    sfv = StreamFeatureView(
        name="user_fees_5m",
        source=source,
        entities=[Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)],
        schema=[Field(name="user_id", dtype=String), Field(name="fees", dtype=Float64)],
        aggregations=[
            FeastAggregation(
                column="fee", function="sum", time_window=timedelta(minutes=5), name="fees"
            )
        ],
        timestamp_field="ts",
        tags=tags,
    )
    return StreamFeatureView.from_proto(sfv.to_proto(), skip_udf=True)


def test_lookups_and_derived_columns_round_trip_through_the_registry():
    tags = {**backfill_tags(), **lookup_tags(*LOOKUPS), **derived_tags(DERIVED)}
    assert tags["stream_backfill.lookup.user_tiers.table.valid_from"] == "from"
    job = stream_job(view(tags), "/repo")
    # Relative state paths are resolved against the repo, like the archive's.
    assert job.lookups == (
        Lookup(
            ScdTable("user_tiers", ["user_id"], "/repo/data/state/user_tiers", "from", "to"),
            ["fee_rate", "tier"],
            delay_ms=250,
            how="inner",
        ),
        LOOKUPS[1],
        Lookup(
            DeltaHistory("merchants", ["merchant_id", "country"], "/repo/data/merchants", False),
            ["risk"],
            on={"merchant": "merchant_id", "country": "country"},
        ),
    )
    assert job.derived == DERIVED
    assert job.aggregations == [Aggregation("fee", "sum", "fees")]
    # The archive is read for the keys and enrichment inputs, not for what enrichment adds.
    assert job.payload_columns == ["user_id", "currency", "merchant", "country", "amount"]


def test_a_view_without_lookup_tags_has_no_enrichment():
    job = stream_job(view(backfill_tags()), "/repo")
    assert job.lookups == () and job.derived == {}


def test_undeclarable_lookups_are_refused():
    in_memory = ScdTable("tiers", ["user_id"], dataframe=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs Delta paths, not DataFrames"):
        lookup_tags(Lookup(in_memory, ["tier"]))
    with pytest.raises(ValueError, match="two lookups of one state table need two names"):
        lookup_tags(Lookup(TIERS, ["tier"]), Lookup(TIERS, ["fee_rate"]))
