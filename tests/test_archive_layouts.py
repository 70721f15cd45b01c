"""One topic, every archive layout: the same records and the same emission log as Delta.

The topic (``examples.generate``'s, a few hundred records) has offset holes (every layout the
same) and, in the sink-connector layouts, flushes written twice by a connector restart; the
Delta table has the generator's own records archived twice. Each layout is read through its
archive class, its records compared with Delta's (partition, offset, payload: derived offsets
must be the real ones) and its emission log and dropped records with Delta's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from examples.generate import archive_frame
from examples.layouts import LAYOUTS, archived_topic, with_offset_holes, write_layout
from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    BadArchiveError,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.archives import SinkConnectorArchive, TableArchive
from feast_stream_backfill.emission_store import fingerprint

COLUMNS = ["partition", "offset", "event_time", "user_id", "amount"]
#: Checked on Maven Central on 2026-11-24 (see README, "Archive layouts").
NO_ICEBERG = "no iceberg-spark-runtime for Spark 4.2 on Maven Central (latest: 4.1_2.13 1.12.0)"


def job(topic: ArchivedTopic) -> StreamJob:
    return StreamJob(
        topics=[topic],
        keys=["user_id"],
        window=TumblingWindows(5_000),
        aggregations=[
            Aggregation("amount", "sum", "spend"),
            Aggregation("amount", "count", "n"),
            Aggregation("amount", "max", "top"),
        ],
        # MAX over partitions (the seed's aligned readers) drops a few records here; MIN none.
        watermark=WatermarkStrategy(interval_ms=200, combine="max"),
    )


@pytest.fixture(scope="module")
def written(spark, tmp_path_factory) -> dict[str, ArchivedTopic]:
    root = tmp_path_factory.mktemp("layouts")
    records = with_offset_holes(
        archive_frame(spark, 400, n_partitions=3, n_users=12, records_per_second=4.0),
        fraction=0.05,
    ).cache()
    topics = {}
    for layout in LAYOUTS:
        folder = str(root / layout)
        write_layout(spark, records, layout, folder, flush_records=20, restart_fraction=0.3)
        topics[layout] = archived_topic(layout, folder)
    records.unpersist()
    yield topics
    spark.sql("DROP TABLE IF EXISTS transactions_archive")


def rows(df: DataFrame) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def records_of(spark: SparkSession, topic: ArchivedTopic) -> list[tuple]:
    return rows(topic.load(spark).select(*COLUMNS).distinct())


def test_every_layout_reads_the_same_records(spark, written):
    expected = records_of(spark, written["delta"])
    offsets = [r[1] for r in expected if r[0] == 0]
    assert len(offsets) < max(offsets) + 1, "the topic has offset holes"
    for layout, topic in written.items():
        assert records_of(spark, topic) == expected, layout
    # Splits of 256 bytes: JSON files (~1.4 kB) are read by several tasks each, and a row's
    # place in its file still follows from the split's start and its order in the task.
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "256")
    try:
        folder = written["sink-json"].archive.folder
        scan = spark.read.options(recursiveFileLookup="true").json(folder)
        assert scan.rdd.getNumPartitions() > 2 * len(scan.inputFiles())
        assert records_of(spark, written["sink-json"]) == expected
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous)


def test_every_layout_gives_the_delta_emission_log(spark, written):
    def log(topic: ArchivedTopic) -> tuple[list[tuple], list[tuple], int]:
        result = backfill(spark, job(topic))
        found = rows(result.emissions), rows(result.dropped), result.stats["duplicates_removed"]
        result.release()
        return found

    emissions, dropped, _ = log(written["delta"])
    assert len(emissions) > 100 and dropped, "a log with emissions and late records dropped"
    for layout, topic in list(written.items())[1:]:
        found_emissions, found_dropped, duplicates = log(topic)
        assert found_dropped == dropped, layout
        assert _within_rounding(found_emissions, emissions), layout
        if layout.startswith("sink-"):
            assert duplicates > 0, f"{layout}: restart files repeat offsets"


def _within_rounding(found: list[tuple], expected: list[tuple]) -> bool:
    """Equal rows, floats within 1e-12 relative: a sum of fractional doubles depends on the
    order Spark adds them in, which follows the files' layout (README: "Sums of fractional
    doubles")."""
    return len(found) == len(expected) and all(
        len(f) == len(e)
        and all(
            math.isclose(a, b, rel_tol=1e-12) if isinstance(a, float) else a == b
            for a, b in zip(f, e, strict=True)
        )
        for f, e in zip(found, expected, strict=True)
    )


def test_a_restart_file_with_other_content_is_refused(spark, written, tmp_path):
    folder = Path(written["sink-json"].archive.folder) / "partition=0"
    files = sorted(folder.glob("transactions+*"))
    first = next(f for f in files if len(f.read_text().splitlines()) >= 2)
    lines = first.read_text().splitlines()
    changed = lines[1].replace('"amount":', '"amount":1000')
    start = int(first.name.split("+")[2].split(".")[0])
    copy = folder / f"transactions+0+{start + 1:010d}.json"
    copy.write_text(changed + "\n")
    try:
        with pytest.raises(BadArchiveError, match="archived twice with different content"):
            backfill(spark, job(written["sink-json"]))
    finally:
        copy.unlink()


def test_file_names_are_checked(spark, tmp_path):
    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "t+0+0000000000.json").write_text('{"event_time": 1, "user_id": "a"}\n')
    (folder / "t+0+x.json").write_text('{"event_time": 2, "user_id": "a"}\n')
    topic = ArchivedTopic("t", archive=SinkConnectorArchive(str(tmp_path), "t", "json"))
    with pytest.raises(BadArchiveError, match=r"1 file\(s\) not named .* e\.g\. .*t\+0\+x\.json"):
        topic.load(spark)
    empty = ArchivedTopic("t", archive=SinkConnectorArchive(str(tmp_path), "other", "json"))
    with pytest.raises(BadArchiveError, match=r"archived topic 't' \(json sink-connector files"):
        empty.load(spark)


def test_json_event_time_as_text_and_what_is_refused(spark, tmp_path):
    folder = tmp_path / "topics" / "t" / "partition=2"
    folder.mkdir(parents=True)
    (folder / "t+2+0000000007.json").write_text(
        '{"at": "2026-01-01T00:00:01.500Z", "user_id": "a", "amount": 1.5}\n'
        '{"at": "2026-01-01T01:00:00+01:00", "user_id": "b", "amount": 2.5}\n'
    )
    sink = SinkConnectorArchive(str(tmp_path), "t", "json", timestamp_field="at")
    read = sink.read(spark).select("partition", "offset", F.unix_millis("at"), "user_id")
    assert rows(read) == [(2, 7, 1_767_225_601_500, "a"), (2, 8, 1_767_225_600_000, "b")]
    amount_as_time = SinkConnectorArchive(str(tmp_path), "t", "json", timestamp_field="amount")
    with pytest.raises(BadArchiveError, match="timestamp_field 'amount' has type double"):
        amount_as_time.read(spark)
    (folder / "t+2+0000000009.json").write_text('{"at": "x", "user_id": "c", "offset": 9}\n')
    with pytest.raises(BadArchiveError, match="have a field 'offset'.* name it as offset_field"):
        sink.read(spark)


def test_the_fingerprint_follows_each_layout(spark, written):
    before = {layout: fingerprint(spark, job(topic)) for layout, topic in written.items()}
    assert None not in before.values() and len(set(before.values())) == len(before)
    assert fingerprint(spark, job(written["sink-json"])) == before["sink-json"]
    folder = Path(written["sink-json"].archive.folder) / "partition=1"
    added = folder / "transactions+1+0000099999.json"
    added.write_text('{"event_time": 1767225600000, "user_id": "u000001", "amount": 1.0}\n')
    try:
        assert fingerprint(spark, job(written["sink-json"])) != before["sink-json"]
    finally:
        added.unlink()
    dataframe = ArchivedTopic("t", dataframe=written["delta"].load(spark))
    assert fingerprint(spark, job(dataframe)) is None


def test_delta_by_table_name_has_its_version(spark, written, tmp_path):
    written["delta"].load(spark).write.format("delta").option("path", str(tmp_path)).saveAsTable(
        "transactions_delta"
    )
    try:
        assert TableArchive(table="transactions_delta").version(spark) == "delta:0"
    finally:
        spark.sql("DROP TABLE transactions_delta")


def test_avro_by_path_and_format(spark, written):
    folder = written["sink-avro"].archive.folder
    avro = TableArchive(path=folder, format="avro", options={"recursiveFileLookup": "true"})
    assert avro.read(spark).count() == written["sink-avro"].load(spark).count()


def test_iceberg_table(spark, written, tmp_path):
    try:
        spark.sparkContext._jvm.java.lang.Class.forName("org.apache.iceberg.spark.SparkCatalog")
    except Exception:
        pytest.skip(NO_ICEBERG)
    spark.conf.set("spark.sql.catalog.ice", "org.apache.iceberg.spark.SparkCatalog")
    spark.conf.set("spark.sql.catalog.ice.type", "hadoop")
    spark.conf.set("spark.sql.catalog.ice.warehouse", str(tmp_path))
    written["delta"].load(spark).writeTo("ice.db.transactions").using("iceberg").create()
    topic = ArchivedTopic("transactions", archive=TableArchive(table="ice.db.transactions"))
    delta = backfill(spark, job(written["delta"]))
    iceberg = backfill(spark, job(topic))
    assert rows(iceberg.emissions) == rows(delta.emissions)
