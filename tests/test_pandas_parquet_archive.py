"""Parquet as pandas writes it (nanosecond, timezone-aware timestamps) as a stream archive.

The same records (``examples.generate``'s, a few hundred, with nanoseconds added to their event
times) are kept three ways: a Delta table, a folder of parquet files written by pandas (a
``FileSource``), and the parquet files a sink connector would have written, written by pandas
too (a ``SparkSource`` with ``sink_connector_tags``). Three views declare the same job over
them; ``FeatureStore.apply`` checks them (reading the archives' schemas) and ``materialize``
backfills them: the three emission logs and the online values are the same. Spark's setting
that reads nanosecond timestamps (``spark.sql.legacy.parquet.nanosAsLong``) is left as it was,
so other reads of such files still fail as they do without the plugin. A column no Spark
type holds is refused at apply time, named, with what to write instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from feast import Entity, FeatureStore, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.aggregation import Aggregation
from feast.data_format import DeltaFormat, JsonFormat, ParquetFormat
from feast.data_source import DataSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource
from feast.types import Float64, Int64, String
from pyspark.sql import functions as F

from examples.generate import archive_frame
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.feast_plugin import archive_tags, backfill_tags, sink_connector_tags
from feast_stream_backfill.feast_plugin.apply_checks import check_views
from feast_stream_backfill.files import NANOS_AS_LONG, read_parquet
from tests.conftest import feature_store_yaml
from tests.test_apply_checks import problems, repo_config

USER = Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)
WINDOW = timedelta(seconds=5)
LAYOUTS = ("delta", "pandas", "sink")
pytestmark = pytest.mark.filterwarnings("ignore:The spark data source API is an experimental")


def spend_view(layout: str, archive: DataSource) -> StreamFeatureView:
    source = KafkaSource(
        name=f"transactions_{layout}",
        topic="transactions",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="user_id string, amount double"),
        timestamp_field="event_time",
        batch_source=archive,
        watermark_delay_threshold=timedelta(seconds=1),
    )
    return StreamFeatureView(
        name=f"spend_{layout}",
        source=source,
        entities=[USER],
        ttl=timedelta(hours=1),
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend", dtype=Float64),
            Field(name="n", dtype=Int64),
        ],
        aggregations=[
            Aggregation(column="amount", function="sum", time_window=WINDOW, name="spend"),
            Aggregation(column="amount", function="count", time_window=WINDOW, name="n"),
        ],
        timestamp_field="event_time",
        tags=backfill_tags(watermark_interval=timedelta(milliseconds=200)),
    )


def archives() -> dict[str, DataSource]:
    return {
        "delta": FileSource(
            name="archive_delta",
            path="data/delta",
            file_format=DeltaFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
        "pandas": FileSource(
            name="archive_pandas",
            path="data/pandas",
            file_format=ParquetFormat(),
            timestamp_field="event_time",
            tags=archive_tags(),
        ),
        "sink": SparkSource(
            name="archive_sink",
            path="data/sink",
            file_format="parquet",
            timestamp_field="event_time",
            tags=sink_connector_tags(),
        ),
    }


def with_nanos(records: pd.DataFrame) -> pd.DataFrame:
    """The records as pandas holds them: UTC nanoseconds, with 789 ns below each microsecond
    (Spark keeps microseconds: the Delta copy's times are these, truncated)."""
    frame = records.copy()
    frame["event_time"] = pd.to_datetime(frame["event_time"], utc=True).astype(
        "datetime64[ns, UTC]"
    ) + pd.Timedelta(nanoseconds=789)
    return frame


def write_sink_files(folder: Path, records: pd.DataFrame) -> None:
    """A sink connector's parquet files, by pandas: ``transactions+<partition>+<offset>``, one
    per 50 offsets of a partition; the offset is the file's start plus the row's place."""
    for partition, rows in records.sort_values("offset").groupby("partition"):
        place = folder / f"partition={partition}"
        place.mkdir(parents=True)
        rows = rows.reset_index(drop=True)
        for start in range(0, len(rows), 50):
            flush = rows.iloc[start : start + 50]
            name = f"transactions+{partition}+{flush['offset'].iloc[0]}.parquet"
            flush.drop(columns=["partition", "offset"]).to_parquet(place / name, index=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory, spark, redis_server) -> Iterator[FeatureStore]:
    path = tmp_path_factory.mktemp("pandas_repo")
    (path / "feature_store.yaml").write_text(feature_store_yaml("nanos", redis_server))
    # Contiguous offsets: the sink connector's files then give each record its own.
    delta = archive_frame(spark, 600, n_partitions=2, n_users=6, records_per_second=20.0)
    delta = delta.dropDuplicates(["partition", "offset"]).cache()
    delta.write.format("delta").save(str(path / "data/delta"))
    records = with_nanos(delta.toPandas())
    (path / "data/pandas").mkdir(parents=True)
    for partition, rows in records.groupby("partition"):
        rows.to_parquet(path / f"data/pandas/part-{partition}.parquet", index=False)
    write_sink_files(path / "data/sink/topics/transactions", records)
    delta.unpersist()
    FeatureStore(repo_path=str(path)).apply(
        [USER, *[spend_view(layout, archive) for layout, archive in archives().items()]]
    )
    yield FeatureStore(repo_path=str(path))


def emission_log(spark, store: FeatureStore, layout: str) -> list[tuple]:
    log = spark.read.format("delta").load(
        f"{store.repo_path}/data/emission_log/nanos/spend_{layout}"
    )
    # Sums of the same amounts read in another order differ in their last bits.
    return sorted(tuple(r) for r in log.withColumn("spend", F.round("spend", 6)).collect())


def test_pandas_parquet_is_the_file_pandas_writes(store):
    schema = pq.read_schema(next((store.repo_path / "data/pandas").glob("*.parquet")))
    assert schema.field("event_time").type == pa.timestamp("ns", tz="UTC")


def test_materialize_backfills_every_layout_to_the_delta_copys_log(store, spark):
    start = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    store.materialize(start, start + timedelta(hours=1))
    expected = emission_log(spark, store, "delta")
    assert len(expected) > 20
    for layout in ("pandas", "sink"):
        assert emission_log(spark, store, layout) == expected, layout
    users = [{"user_id": f"u{i:06d}"} for i in range(6)]
    online = {
        layout: store.get_online_features(
            [f"spend_{layout}:spend", f"spend_{layout}:n"], users
        ).to_dict()
        for layout in LAYOUTS
    }
    for values in online.values():
        values["spend"] = [None if v is None else round(v, 6) for v in values["spend"]]
    assert online["pandas"] == online["delta"] == online["sink"]
    assert any(v is not None for v in online["delta"]["spend"])


def test_event_times_keep_their_microseconds(store, spark):
    folder = str(store.repo_path / "data/pandas")
    read = read_parquet(spark, folder).select("partition", "offset", "event_time")
    delta = spark.read.format("delta").load(str(store.repo_path / "data/delta"))
    assert read.schema["event_time"].dataType.simpleString() == "timestamp"
    assert read.exceptAll(delta.select(*read.columns)).count() == 0
    assert read.count() == delta.count()


def test_the_sessions_own_parquet_reads_are_unchanged(store, spark):
    before = spark.conf.getAll.get(NANOS_AS_LONG)
    read_parquet(spark, str(store.repo_path / "data/pandas")).count()
    assert spark.conf.getAll.get(NANOS_AS_LONG) == before
    # As without the plugin: Spark refuses the nanoseconds it was not told to read as numbers.
    with pytest.raises(Exception, match="PARQUET_TYPE_ILLEGAL"):
        spark.read.parquet(str(store.repo_path / "data/pandas")).count()


def test_naive_nanoseconds_are_wall_clock_times_or_utc_as_feast_reads_them(spark, tmp_path):
    pd.DataFrame({"at": [pd.Timestamp("2026-01-01 10:00:00.123456789")], "x": [1]}).to_parquet(
        tmp_path / "naive.parquet"
    )
    naive = read_parquet(spark, str(tmp_path / "naive.parquet"))
    utc = read_parquet(spark, str(tmp_path / "naive.parquet"), naive_as_utc=True)
    assert naive.schema["at"].dataType.simpleString() == "timestamp_ntz"
    assert utc.schema["at"].dataType.simpleString() == "timestamp"
    text = F.date_format("at", "yyyy-MM-dd HH:mm:ss.SSSSSS")
    assert (
        naive.select(text).first()[0]
        == utc.select(text).first()[0]
        == ("2026-01-01 10:00:00.123456")
    )
    assert utc.select(F.unix_micros("at")).first()[0] == 1_767_261_600_123_456


def unreadable(tmp_path: Path, name: str, column: pa.Array) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    table = pa.table(
        {
            "partition": [0],
            "offset": [0],
            "event_time": pa.array(
                [pd.Timestamp("2026-01-01", tz="UTC")], pa.timestamp("ns", "UTC")
            ),
            "user_id": ["u1"],
            "amount": [1.0],
            name: column,
        }
    )
    pq.write_table(table, folder / "part-0.parquet")
    return folder


@pytest.mark.parametrize(
    ("column", "declared", "fix"),
    [
        (pa.array([dt.time(1, 2, 3)], pa.time64("ns")), "INT64 (TIME(NANOS,false))", "a string"),
        (
            pa.array([{"at": 1}], pa.struct([("at", pa.timestamp("ns", "UTC"))])),
            "INT64 (TIMESTAMP(NANOS,true))",
            "coerce_timestamps='us'",
        ),
        (pa.array([b"0123456789abcdef"], pa.uuid()), "FIXED_LEN_BYTE_ARRAY (UUID)", "a string"),
    ],
    ids=["time-of-day", "nested-nanos", "uuid"],
)
def test_what_spark_cannot_read_is_refused_with_the_fix(spark, tmp_path, column, declared, fix):
    folder = unreadable(tmp_path, "extra", column)
    with pytest.raises(BadArchiveError) as error:
        read_parquet(spark, str(folder))
    message = str(error.value)
    assert "part-0.parquet: column 'extra" in message and declared in message and fix in message
    view = spend_view(
        "bad",
        FileSource(
            name="bad", path=str(folder), file_format=ParquetFormat(), timestamp_field="event_time"
        ),
    )
    (line,) = problems(repo_config(tmp_path), view)
    assert line.strip().startswith("stream feature view 'spend_bad': archive ")
    assert declared in line and fix in line


def test_apply_reads_a_pandas_archives_schema(spark, tmp_path):
    folder = unreadable(tmp_path, "fine", pa.array([1.5]))
    view = spend_view(
        "ok",
        FileSource(
            name="ok", path=str(folder), file_format=ParquetFormat(), timestamp_field="event_time"
        ),
    )
    check_views(repo_config(tmp_path), [view])  # the event time is an instant: no problem
