"""The generated topic written in each archive layout the backfill reads, as teams keep them.

``write_layout(spark, records, layout, folder)`` writes one topic (``examples.generate``'s
``transactions``, or any DataFrame with ``partition, offset, event_time`` and payload
columns) in one of :data:`LAYOUTS`, and ``archived_topic(layout, folder)`` declares it for the
core, so the same records can be backfilled from each layout and the results compared:

* ``delta``: a Delta table (:class:`~feast_stream_backfill.archives.DeltaArchive`);
* ``sink-json``, ``sink-parquet``, ``sink-avro``: what Confluent's S3 / GCS sink connector
  leaves, ``topics/transactions/partition=<p>/transactions+<p>+<startOffset>.<ext>``, one file
  per flush of at most ``flush_records`` records in offset order. JSON and Avro store no offset
  (it is the file's start offset plus the row's place in the file), so their files are cut at
  offset holes as well as at flush size; Parquet stores the offset as an ``InsertField``
  transform would (``offset``), so its files span holes. In JSON the event time is epoch
  milliseconds, as Connect's JsonConverter writes a ``Timestamp``. A share of the files
  (``restart_fraction``) is written again from its middle on, under its own start offset, as
  a connector restart does: the same offsets in two files;
* ``parquet-table``: an external parquet table ``<table>`` of the session's catalog
  (:class:`~feast_stream_backfill.archives.TableArchive` by name);
* ``parquet-path``: parquet files read by path and format (``TableArchive(path, "parquet")``).

``with_offset_holes`` removes a share of the offsets from the records first (compaction,
transaction markers), so every layout holds the same holes.

Renaming Spark's part files to the connector's names is a loop over files on the driver: the
generator's business only; the backfill reads the files in one distributed read.
"""

from __future__ import annotations

import re

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from examples.generate import TOPIC, _uniform
from feast_stream_backfill.archives import SPARK_FORMATS, SinkConnectorArchive, TableArchive
from feast_stream_backfill.records import ArchivedTopic

LAYOUTS = ("delta", "sink-json", "sink-parquet", "sink-avro", "parquet-table", "parquet-path")
#: Share of the offsets missing, and of the flushes written twice by a restart.
HOLE_FRACTION = 0.02
RESTART_FRACTION = 0.1
FLUSH_RECORDS = 50
_HOLE, _RESTART = 300, 301


def _uniform_per_offset(df: DataFrame, seed: int, stream: int, at: str = "offset") -> DataFrame:
    """``df`` with ``_u``, a pseudo-random double in ``(0, 1)`` per (partition, ``at``)."""
    key = F.col("partition").cast("long") * F.lit(1 << 40) + F.col(at)
    return df.withColumn("_key", key).withColumn("_u", _uniform(seed, stream, "_key")).drop("_key")


def with_offset_holes(
    records: DataFrame, fraction: float = HOLE_FRACTION, seed: int = 7
) -> DataFrame:
    """The records less those at ``fraction`` of the offsets (every copy of them)."""
    kept = _uniform_per_offset(records, seed, _HOLE).where(F.col("_u") >= F.lit(fraction))
    return kept.drop("_u")


def archived_topic(layout: str, folder: str, table: str = "transactions_archive") -> ArchivedTopic:
    """How the core is told where the topic that :func:`write_layout` wrote at ``folder`` is."""
    if layout == "delta":
        return ArchivedTopic(TOPIC, path=folder)
    if layout == "parquet-table":
        return ArchivedTopic(TOPIC, archive=TableArchive(table=table))
    if layout == "parquet-path":
        return ArchivedTopic(TOPIC, archive=TableArchive(path=folder, format="parquet"))
    fmt = _sink_format(layout)
    stored = "offset" if fmt == "parquet" else None
    timestamp = "event_time" if fmt == "json" else None
    sink = SinkConnectorArchive(folder, TOPIC, fmt, offset_field=stored, timestamp_field=timestamp)
    return ArchivedTopic(TOPIC, archive=sink)


def write_layout(
    spark: SparkSession,
    records: DataFrame,
    layout: str,
    folder: str,
    table: str = "transactions_archive",
    flush_records: int = FLUSH_RECORDS,
    restart_fraction: float = RESTART_FRACTION,
    seed: int = 7,
) -> None:
    """Write ``records`` (overwriting) at ``folder`` in ``layout`` (see the module docstring)."""
    if layout == "delta":
        records.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
            folder
        )
    elif layout == "parquet-table":
        spark.sql(f"DROP TABLE IF EXISTS {table}")
        records.write.format("parquet").mode("overwrite").option("path", folder).saveAsTable(table)
    elif layout == "parquet-path":
        records.write.format("parquet").mode("overwrite").save(folder)
    else:
        fmt = _sink_format(layout)
        _write_sink_files(
            spark, records, fmt, folder, flush_records, restart_fraction, seed, fmt == "parquet"
        )


def _sink_format(layout: str) -> str:
    if layout not in LAYOUTS or not layout.startswith("sink-"):
        raise ValueError(f"unknown layout {layout!r}: one of {LAYOUTS}")
    return layout.removeprefix("sink-")


def _write_sink_files(
    spark: SparkSession,
    records: DataFrame,
    fmt: str,
    folder: str,
    flush_records: int,
    restart_fraction: float,
    seed: int,
    store_offset: bool,
) -> None:
    by_offset = Window.partitionBy("partition").orderBy("offset")
    distinct = records.dropDuplicates(["partition", "offset"])
    ranked = distinct.withColumn("_rank", F.row_number().over(by_offset) - 1)
    # A flush: up to flush_records consecutive records; without a stored offset also cut where
    # offsets jump (the offset is then the file's start plus the row's place).
    run = F.lit(0) if store_offset else F.col("offset") - F.col("_rank")
    in_run = F.col("_rank") - F.min("_rank").over(Window.partitionBy("partition", "_run"))
    flushes = ranked.withColumn("_run", run).withColumn(
        "_flush", F.floor(in_run / F.lit(flush_records))
    )
    by_flush = Window.partitionBy("partition", "_run", "_flush")
    placed = flushes.select(
        "*",
        F.min("offset").over(by_flush).alias("_start"),
        F.count(F.lit(1)).over(by_flush).alias("_size"),
        (F.row_number().over(by_flush.orderBy("offset")) - 1).alias("_place"),
    )
    # A restart re-reads a flush from its middle on and writes it under that start offset.
    restarted = (
        _uniform_per_offset(placed, seed, _RESTART, "_start")
        .where(
            (F.col("_u") < F.lit(restart_fraction))
            & (F.col("_size") >= 2)
            & (F.col("_place") >= F.floor(F.col("_size") / 2))
        )
        .withColumn("_start", F.min("offset").over(by_flush))
    )
    files = placed.unionByName(restarted.drop("_u"))
    payload = [c for c in records.columns if c != "partition" and (store_offset or c != "offset")]
    if fmt == "json":
        files = files.withColumn("event_time", F.unix_millis("event_time"))
    staging = folder.rstrip("/") + "/_staging"
    (
        files.select("partition", "_start", *payload)
        .repartition("partition", "_start")
        .sortWithinPartitions("partition", "_start", "offset")
        .write.mode("overwrite")
        .partitionBy("partition", "_start")
        .format(SPARK_FORMATS[fmt])
        .save(staging)
    )
    _rename_to_connector_names(spark, staging, f"{folder.rstrip('/')}/topics/{TOPIC}")


def _rename_to_connector_names(spark: SparkSession, staging: str, topic_folder: str) -> None:
    """Move each ``partition=<p>/_start=<s>/part-*.<ext>`` to the connector's file name."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path
    fs = path(staging).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.delete(path(topic_folder), True)
    name = re.compile(r"partition=(\d+)/_start=(\d+)/part-[^.]*\.c\d+\.(.+)$")
    for status in fs.globStatus(path(f"{staging}/partition=*/_start=*/part-*")):
        found = name.search(status.getPath().toString())
        p, start, ext = found.group(1), int(found.group(2)), found.group(3)
        target = path(f"{topic_folder}/partition={p}/{TOPIC}+{p}+{start:010d}.{ext}")
        fs.mkdirs(target.getParent())
        fs.rename(status.getPath(), target)
    fs.delete(path(staging), True)
