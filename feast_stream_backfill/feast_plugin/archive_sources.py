"""A ``KafkaSource``'s ``batch_source`` as the archive the core reads.

Feast's own data sources say where a topic's records are:

- ``FileSource(file_format=DeltaFormat())``: a Delta table;
- ``FileSource(file_format=ParquetFormat())``: a parquet table (a folder of parquet files);
- ``SparkSource(table=...)``: a table of the Spark session's catalog (Hive, Iceberg, Delta by
  name); ``SparkSource(path=..., file_format=...)``: a path Spark reads in that format;
  ``SparkSource(path=..., table_format=IcebergFormat() | ...)``: a path or identifier read by
  that table format, with its properties as reader options;
- ``SparkSource(path=<root>, file_format="json" | "parquet" | "avro")`` with
  :func:`sink_connector_tags`: the files a Kafka Connect object-storage sink wrote under
  ``<root>/topics/<topic>/``.

A ``SparkSource(query=...)`` is refused: nothing tells whether a query's result changed, so
its emission log could never be reused, and its records have no archive to name in errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from feast import FileSource
from feast.data_format import DeltaFormat, ParquetFormat
from feast.data_source import DataSource
from feast.infra.offline_stores.contrib.spark_offline_store.spark_source import SparkSource

from feast_stream_backfill.archives import (
    SPARK_FORMATS,
    Archive,
    SinkConnectorArchive,
    TableArchive,
)
from feast_stream_backfill.feast_plugin.conventions import PREFIX, resolve_path

SINK = PREFIX + "sink."
#: The sink-connector options, per topic (see :func:`sink_connector_tags`).
SINK_OPTIONS = tuple(SINK + name for name in ("topic", "topics_dir", "offset_field", "schema"))


def sink_connector_tags(
    *,
    topic: str | None = None,
    topics_dir: str = "topics",
    offset_field: str | None = None,
    schema: str | None = None,
) -> dict[str, str]:
    """Tags for a ``SparkSource(path=<root>, file_format=...)`` that is a sink connector's
    folder: ``topic`` as the connector named its folder and files (default: the
    ``KafkaSource``'s topic), ``topics_dir`` (the connector's ``topics.dir``),
    ``offset_field`` (the field an ``InsertField`` transform stored the Kafka offset in;
    otherwise a file's start offset plus the row's place in it), ``schema`` (Spark DDL: JSON
    is then read without inferring its schema, a full pass). The source's ``timestamp_field``
    is the event time: a timestamp, epoch milliseconds or an ISO-8601 string."""
    options = {
        "topic": topic,
        "topics_dir": topics_dir,
        "offset_field": offset_field,
        "schema": schema,
    }
    return {SINK + name: value for name, value in options.items() if value is not None}


def archive_problem(source: DataSource | None) -> str | None:
    """Why ``source`` cannot be a topic's archive (a phrase), or None."""
    if isinstance(source, FileSource) and _is_sink(source.tags):
        return (
            f"is FileSource {source.name!r} with sink_connector_tags: a sink connector's folder "
            'is a SparkSource(path=<root>, file_format="json" | "parquet" | "avro")'
        )
    if isinstance(source, FileSource) and isinstance(
        source.file_format, DeltaFormat | ParquetFormat
    ):
        return None
    if isinstance(source, SparkSource):
        if source.query:
            return (
                f"is SparkSource {source.name!r} with a query: nothing tells whether a "
                "query's result changed; name a table or a path instead"
            )
        if _is_sink(source.tags) and source.file_format not in ("json", "parquet", "avro"):
            return (
                f"is SparkSource {source.name!r} with sink_connector_tags and file_format "
                f"{source.file_format!r}: a sink connector writes json, parquet or avro"
            )
        return None
    return (
        f"is {type(source).__name__} {getattr(source, 'name', None)!r}: an archive is a Delta or "
        "parquet FileSource or a SparkSource (a table, a path with a file_format or "
        "table_format, or a sink connector's folder)"
    )


def archive_of(
    source: DataSource, topic: str, repo_path: Path | str | None
) -> tuple[str | None, Archive | None]:
    """``(Delta path, None)`` for a Delta ``FileSource`` (the core's original layout),
    otherwise ``(None, archive)``. Sink-connector options are read from the source's own
    tags: with several topics, each archive has its own."""
    problem = archive_problem(source)
    if problem is not None:
        raise ValueError(f"the batch_source of topic {topic!r} {problem}")
    if isinstance(source, FileSource):
        path = resolve_path(source.path, repo_path)
        if isinstance(source.file_format, DeltaFormat):
            return path, None
        return None, TableArchive(path=path, format="parquet")
    if source.table:
        return None, TableArchive(table=source.table)
    if source.table_format is not None:  # its path may be a catalog's identifier: as given
        table_format = source.table_format
        return None, TableArchive(
            path=source.path, format=table_format.format_type.value, options=table_format.properties
        )
    path = resolve_path(source.path, repo_path)
    tags = source.tags
    if _is_sink(tags):
        return None, SinkConnectorArchive(
            root=path,
            topic=tags.get(SINK + "topic", topic),
            format=source.file_format,
            topics_dir=tags.get(SINK + "topics_dir", "topics"),
            offset_field=tags.get(SINK + "offset_field"),
            timestamp_field=source.timestamp_field,
            schema=tags.get(SINK + "schema"),
        )
    # Spark names avro's built-in reader by its class (no spark-avro jar for Spark 4.2).
    return None, TableArchive(
        path=path, format=SPARK_FORMATS.get(source.file_format, source.file_format)
    )


def _is_sink(tags: Mapping[str, str]) -> bool:
    return any(key.startswith(SINK) for key in tags)
