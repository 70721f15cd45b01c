"""``feast apply`` checks the stream views the plugin backfills and lists every problem at once;
deleted views and ``feast teardown`` take their emission logs with them."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from feast import (
    Entity,
    FeatureStore,
    Field,
    FileSource,
    KafkaSource,
    PushSource,
    RepoConfig,
    StreamFeatureView,
    ValueType,
)
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, String
from pyspark.sql import functions as F

from feast_stream_backfill.enrichment import Lookup, ScdTable
from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags, lookup_tags
from feast_stream_backfill.feast_plugin.apply_checks import ApplyCheckError, check_views

FEAST = str(Path(sys.executable).parent / "feast")
ENGINE = "feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine"
OFFLINE = "feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"
MINUTE = timedelta(minutes=1)
t0 = datetime(2026, 1, 1, 10, tzinfo=timezone.utc)

#: A repo with three mistakes, one per view (the archive has no column ``price``).
THREE_MISTAKES = """
from datetime import timedelta

from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, String

from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
source = KafkaSource(
    name="payments", topic="payments", kafka_bootstrap_servers="localhost:9092",
    message_format=JsonFormat(schema_json="user_id string, amount double"),
    timestamp_field="event_time", watermark_delay_threshold=timedelta(0),
    batch_source=FileSource(name="payments_archive", path="data/archive", file_format=DeltaFormat(),
                            timestamp_field="event_time", tags=archive_tags()))


def view(name, column="amount", function="sum", **tags):
    return StreamFeatureView(
        name=name, source=source, entities=[user], ttl=timedelta(hours=1),
        schema=[Field(name="user_id", dtype=String), Field(name="x", dtype=Float64)],
        aggregations=[Aggregation(column=column, function=function,
                                  time_window=timedelta(minutes=1), name="x")],
        timestamp_field="event_time", tags={**backfill_tags(), **tags})


late = view("late", **{"stream_backfill.allowed_lateness_ms": "ten"})
priced = view("priced", column="price")
distinct = view("distinct", function="count_distinct")
"""

YAML = """project: checks
provider: local
registry: data/registry.db
entity_key_serialization_version: 3
online_store: {type: redis, connection_string: "127.0.0.1:1"}
offline_store:
  type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
  spark_conf: {spark.master: "local[1]", spark.ui.enabled: "false"}
batch_engine:
  type: feast_stream_backfill.feast_plugin.compute_engine.StreamBackfillComputeEngine
"""


def write_archive(spark, path: Path, event_time: str = "timestamp") -> None:
    spark.createDataFrame(
        [(0, 0, "2026-01-01 10:00:00", "u1", 1.0)],
        "partition int, offset long, ts string, user_id string, amount double",
    ).select(
        "partition",
        "offset",
        F.to_timestamp("ts").cast(event_time).alias("event_time"),
        "user_id",
        "amount",
    ).write.format("delta").save(str(path))


#: sqlite with Feast's local provider named by its class: ``feast apply`` then calls the engine.
SQLITE_BY_CLASS = {
    "provider: local": "provider: feast.infra.passthrough_provider.PassthroughProvider",
    'online_store: {type: redis, connection_string: "127.0.0.1:1"}': (
        "online_store: {type: sqlite, path: data/online.db}"
    ),
}


@pytest.mark.parametrize("store", ["redis", "sqlite, provider by class"])
def test_feast_apply_prints_every_problem_and_exits_non_zero(spark, tmp_path, store):
    write_archive(spark, tmp_path / "data/archive")
    (tmp_path / "features.py").write_text(THREE_MISTAKES)
    yaml = YAML
    if store != "redis":
        for old, new in SQLITE_BY_CLASS.items():
            yaml = yaml.replace(old, new)
    (tmp_path / "feature_store.yaml").write_text(yaml)
    done = subprocess.run(
        [FEAST, "apply"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    archive = tmp_path / "data/archive"
    assert (
        "ApplyCheckError: 3 problem(s) in stream feature view(s) 'distinct', 'late', 'priced' "
        "of Feast project 'checks':\n"
        "  stream feature view 'distinct': aggregation 'x': function 'count_distinct' is not "
        "supported (the model has sum, count, mean, min, max)\n"
        "  stream feature view 'late': tag stream_backfill.allowed_lateness_ms = 'ten' is not a "
        "whole number of milliseconds\n"
        f"  stream feature view 'priced': archive {archive}: no column(s) ['price']; it has "
        "['partition', 'offset', 'event_time', 'user_id', 'amount']\n"
    ) in done.stderr
    assert FeatureStore(repo_path=str(tmp_path)).list_stream_feature_views() == []


def stream_view(archive: Path, name: str = "v", aggregations=None, **tags) -> StreamFeatureView:
    source = KafkaSource(
        name="payments",
        topic="payments",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        watermark_delay_threshold=timedelta(0),
        batch_source=FileSource(
            name="payments_archive",
            path=str(archive),
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
    )
    return StreamFeatureView(
        name=name,
        source=source,
        entities=[Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)],
        ttl=timedelta(hours=1),
        schema=[Field(name="user_id", dtype=String), Field(name="x", dtype=Float64)],
        aggregations=aggregations
        or [Aggregation(column="amount", function="sum", time_window=MINUTE, name="x")],
        timestamp_field="event_time",
        tags={**backfill_tags(), **tags},
    )


def repo_config(tmp_path: Path, logs: str | None = None) -> RepoConfig:
    return RepoConfig(
        project="checks",
        provider="local",
        registry=str(tmp_path / "registry.db"),
        online_store={"type": "sqlite", "path": str(tmp_path / "online.db")},
        offline_store={"type": OFFLINE, "emission_log_path": logs or str(tmp_path / "logs")},
        batch_engine={"type": ENGINE},
        entity_key_serialization_version=3,
        repo_path=tmp_path,
    )


def problems(config: RepoConfig, *views: StreamFeatureView) -> list[str]:
    with pytest.raises(ApplyCheckError) as error:
        check_views(config, views)
    return str(error.value).splitlines()[1:]


def test_each_rule_names_its_view_and_several_problems_of_one_view_are_all_listed(spark, tmp_path):
    good, naive = tmp_path / "good", tmp_path / "naive"
    write_archive(spark, good)
    write_archive(spark, naive, "timestamp_ntz")
    tiers = ScdTable("tiers", keys=["user_id"], path=str(good))  # no valid_from, no fee_rate
    p = "stream_backfill."
    pushed = stream_view(good, "pushed")
    pushed.stream_source = PushSource(name="pushes", batch_source=pushed.batch_source)
    views = [
        stream_view(good, "fine"),
        stream_view(
            good,
            "typo",
            aggregations=[
                Aggregation(column="amount", function="sum", time_window=MINUTE, name="x"),
                Aggregation(column="amount", function="median", time_window=MINUTE, name="m"),
            ],
            **{p + "alowed_lateness_ms": "5", p + "trigger": "sometimes"},
        ),
        stream_view(
            good,
            "processing",
            **{p + "window_domain": "processing", p + "allowed_lateness_ms": "1000"},
        ),
        stream_view(good, "sessions", **{p + "session_gap_ms": "60000"}),
        stream_view(tmp_path / "nowhere", "lost"),
        stream_view(naive, "naive"),
        stream_view(good, "enriched", **lookup_tags(Lookup(tiers, ["fee_rate"]))),
        pushed,
    ]
    config = repo_config(tmp_path)
    assert problems(config, *views) == [  # by view name
        f"  stream feature view 'enriched': state table 'tiers' ({good}): no column(s) "
        "['fee_rate', 'valid_from']; it has ['partition', 'offset', 'event_time', 'user_id', "
        "'amount']",
        f"  stream feature view 'lost': archive {tmp_path / 'nowhere'}: no Delta table there",
        f"  stream feature view 'naive': archive {naive}: event time column 'event_time' is "
        "timestamp_ntz, not an instant (TIMESTAMP)",
        "  stream feature view 'processing': allowed lateness (1000 ms) is set but the windows "
        "are processing-time ones, which are never late (Flink ignores it)",
        "  stream feature view 'pushed' has aggregations over a PushSource: pushed rows have no "
        "Kafka partition and offset, so there is no Flink job to model; aggregate them before "
        "pushing",
        "  stream feature view 'sessions': the session_gap tag makes session windows, so the "
        "time_window / slide_interval of aggregation(s) ['x'] would be ignored: declare one or "
        "the other",
        "  stream feature view 'typo': unknown tag 'stream_backfill.alowed_lateness_ms' (did you "
        "mean 'stream_backfill.allowed_lateness_ms'?)",
        "  stream feature view 'typo': aggregation 'm': function 'median' is not supported (the "
        "model has sum, count, mean, min, max)",
        "  stream feature view 'typo': trigger must be 'default' or 'per_record', got 'sometimes'",
    ]
    check_views(config, [views[0]])  # a correct view passes


def test_teardown_removes_the_projects_emission_logs_and_no_others(tmp_path):
    """Through Spark's Hadoop file system (a ``file://`` root, as ``s3a://`` would be)."""
    root = tmp_path / "logs"
    for view in ("checks/v", "checks/v_dropped", "other/w"):
        (root / view).mkdir(parents=True)
        (root / view / "part-0.parquet").write_bytes(b"")
    FeatureStore(config=repo_config(tmp_path, f"file://{root}")).teardown()
    assert sorted(p.name for p in root.iterdir()) == ["other"]
    assert (root / "other/w/part-0.parquet").exists()


def test_materialize_lists_the_problems_when_apply_did_not_check_them(tmp_path):
    """The ``feast apply`` command with a sqlite store writes the registry without calling the
    engine (Feast's plan path), as here: ``materialize`` then reports every problem first."""
    view = stream_view(
        tmp_path / "archive",
        "uniq",
        aggregations=[Aggregation(column="amount", function="count_distinct", name="u")],
        **{"stream_backfill.operator_dely_ms": "5"},
    )
    store = FeatureStore(config=repo_config(tmp_path))
    for entity in view.entities:
        store.registry.apply_entity(
            Entity(name=entity, join_keys=["user_id"], value_type=ValueType.STRING), "checks"
        )
    store.registry.apply_feature_view(view, "checks", commit=True)
    with pytest.raises(ApplyCheckError) as error:
        store.materialize(t0, t0 + MINUTE, ["uniq"])
    assert str(error.value).splitlines() == [
        "2 problem(s) in stream feature view(s) 'uniq' of Feast project 'checks':",
        "  stream feature view 'uniq': unknown tag 'stream_backfill.operator_dely_ms' (did you "
        "mean 'stream_backfill.operator_delay_ms'?)",
        "  stream feature view 'uniq': aggregation 'u': function 'count_distinct' is not "
        "supported (the model has sum, count, mean, min, max)",
        "feast apply did not check these views: with provider 'local' and a sqlite online store, "
        "Feast's apply command writes the registry without calling the compute engine, which "
        "checks them. Naming the same provider by its class (provider: "
        "feast.infra.passthrough_provider.PassthroughProvider in feature_store.yaml) makes feast "
        "apply check them and refuse such views.",
    ]
