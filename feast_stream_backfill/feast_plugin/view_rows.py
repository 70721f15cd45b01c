"""Where a feature view's rows come from: the plugin's Spark session, the windowed views'
emission logs, and the Delta or parquet ``FileSource``s of every other view, read as Feast
reads them."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from feast import FeatureView, FileSource, StreamFeatureView
from feast.data_format import DeltaFormat, ParquetFormat
from feast.feature_view import DUMMY_ENTITY_ID, DUMMY_ENTITY_VAL
from feast.repo_config import RepoConfig
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from feast_stream_backfill.emission_store import ensure_emission_log
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.feast_plugin.conventions import resolve_path
from feast_stream_backfill.feast_plugin.definitions import is_windowed, stream_job
from feast_stream_backfill.feast_plugin.transformations import record_transform
from feast_stream_backfill.files import read_parquet
from feast_stream_backfill.jars import JarsUnavailableError
from feast_stream_backfill.online_state import state_at
from feast_stream_backfill.spark import default_driver_memory, delta_jars, get_spark

_DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"


def _delta_jars_at_jvm_launch() -> None:
    """Put Delta's jars (and the default driver memory) on the command line of the first Spark
    JVM this process launches, whoever launches it: Feast launches one, bare, whenever it builds
    a ``StreamFeatureView`` with a ``mode="spark"`` udf (its ``SparkTransformation``; in
    ``feast materialize``, reading the registry), before this plugin asks for a session, and a
    JVM's classpath and heap are fixed at launch. A ``PYSPARK_SUBMIT_ARGS`` of the user's wins.
    Jars that cannot be had (offline) are left to :func:`get_spark`, whose error then stands on
    its own rather than inside Feast's traceback of importing this module."""
    try:
        jars = delta_jars()
    except JarsUnavailableError:
        return
    if jars and "PYSPARK_SUBMIT_ARGS" not in os.environ:
        memory = default_driver_memory()
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--jars {','.join(jars)} --driver-memory {memory} pyspark-shell"
        )


_delta_jars_at_jvm_launch()


def spark_for(config: RepoConfig) -> SparkSession:
    """The plugin's Spark session. An active session without Delta Lake's extension (Feast's
    bare one, above) is stopped and a new one started in the same JVM from ``spark_conf``:
    session extensions and the master are fixed when a session starts."""
    active = SparkSession.getActiveSession()
    if active is not None and _DELTA_EXTENSION not in active.conf.get("spark.sql.extensions", ""):
        warnings.warn(
            "stopping the active Spark session: it has no Delta Lake extension (Feast starts "
            "such a session when it loads a stream feature view with a mode='spark' udf); "
            "feast-stream-backfill starts its own from spark_conf in the same JVM",
            stacklevel=2,
        )
        active.stop()
    return get_spark(config.offline_store.spark_conf)


def project_logs(config: RepoConfig, project: str) -> str | None:
    """Where the project's emission logs are (one per view, ``<this>/<view>``); None when the
    offline store keeps none."""
    root = getattr(config.offline_store, "emission_log_path", None)
    if root is None:
        return None
    return f"{resolve_path(root, config.repo_path).rstrip('/')}/{project}"


def emissions_for(config: RepoConfig, view: StreamFeatureView) -> DataFrame:
    """The view's emission log, backfilled first when missing or stale."""
    path = f"{project_logs(config, config.project)}/{view.name}"
    spark = spark_for(config)
    return ensure_emission_log(spark, stream_job(view, config.repo_path, spark), path)


def spark_format(file_format: Any, where: str) -> str:
    """The Spark format of a Feast file format this store reads and writes."""
    if not isinstance(file_format, DeltaFormat | ParquetFormat):
        raise ValueError(
            f"{where}: this store reads and writes Delta or parquet, got {file_format!r}"
        )
    return "delta" if isinstance(file_format, DeltaFormat) else "parquet"


def file_kind(source: Any, where: str) -> str:
    """The Spark format of a source this store reads: a ``FileSource`` in Delta or parquet."""
    if not isinstance(source, FileSource):
        raise ValueError(
            f"{where}: this store reads FileSources in Delta or parquet format, got "
            f"{type(source).__name__}"
        )
    return spark_format(source.file_format, where)


def read_file_source(config: RepoConfig, source: Any, where: str) -> DataFrame:
    """A Delta or parquet ``FileSource`` as Spark reads it, source column names unchanged."""
    kind = file_kind(source, where)
    path = resolve_path(source.path, config.repo_path)
    spark = spark_for(config)
    return (
        read_parquet_source(spark, path, where)
        if kind == "parquet"
        else spark.read.format(kind).load(path)
    )


def read_parquet_source(spark: SparkSession, path: str, where: str) -> DataFrame:
    """Parquet as pandas writes it by default too (nanosecond timestamps, which Spark refuses;
    :func:`~feast_stream_backfill.files.read_parquet`), naive times read as UTC as Feast
    reads them."""
    try:
        return read_parquet(spark, path, naive_as_utc=True)
    except BadArchiveError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def join_keys(view: FeatureView) -> list[str]:
    """The view's join keys as projected; Feast's ``__dummy_id`` for an entityless view."""
    projected = view.projection.join_key_map
    return [projected.get(e.name, e.name) for e in view.entity_columns] or [DUMMY_ENTITY_ID]


def batch_rows(config: RepoConfig, view: FeatureView) -> DataFrame:
    """The rows Feast's batch rule reads for a view that is not windowed: its batch source,
    a stream view's udf applied to them as stored, renamed by ``field_mapping``; an entityless
    view's rows get Feast's ``__dummy_id``."""
    source = view.batch_source
    where = f"feature view {view.name!r} (source {source.path!r})"
    frame = read_file_source(config, source, where)
    if isinstance(view, StreamFeatureView):
        transform = record_transform(view, [source.timestamp_field], where)
        frame = frame if transform is None else transform.apply(frame)
    mapping = source.field_mapping or {}
    frame = frame.toDF(*[mapping.get(c, c) for c in frame.columns])
    if DUMMY_ENTITY_ID in join_keys(view) and DUMMY_ENTITY_ID not in frame.columns:
        frame = frame.withColumn(DUMMY_ENTITY_ID, F.lit(DUMMY_ENTITY_VAL))
    return frame


def latest_rows(config: RepoConfig, view: FeatureView, start: datetime, end: datetime) -> DataFrame:
    """Feast's materialization of a view that is not windowed: per key, its latest row with
    event time in ``[start, end]`` (the created timestamp breaks ties; null loses)."""
    source = view.batch_source
    return state_at(
        batch_rows(config, view),
        join_keys(view),
        end,
        start,
        time=source.timestamp_field,
        sequence=source.created_timestamp_column or None,
    )


@dataclass(frozen=True)
class ViewRows:
    """A view's rows with its join-key column names: emissions or batch feature rows."""

    frame: DataFrame
    keys: list[str]
    time: str
    created: str | None
    streaming: bool


def view_rows(config: RepoConfig, view: FeatureView, features: list[str]) -> ViewRows:
    """The view's rows for a training join: its emission log if windowed, else its batch
    source's rows; renamed by its projection, the columns asked for checked, times as
    timestamps."""
    projected = view.projection.join_key_map
    keys = join_keys(view)
    if is_windowed(view):
        frame, time, created = emissions_for(config, view), "emit_time", None
        where = f"stream feature view {view.name!r} (its emission log)"
    else:
        source = view.batch_source
        frame = batch_rows(config, view)
        time, created = source.timestamp_field, source.created_timestamp_column or None
        where = f"feature view {view.name!r} (source {source.path!r}, after field_mapping)"
    frame = frame.toDF(*[projected.get(c, c) for c in frame.columns])
    missing = [c for c in [*keys, time, created, *features] if c and c not in frame.columns]
    if missing:
        raise ValueError(f"{where}: no column {missing}; it has {frame.columns}")
    for column in (time, created):
        if column and not isinstance(frame.schema[column].dataType, TimestampType):
            frame = frame.withColumn(column, F.col(column).cast("timestamp"))
    return ViewRows(frame, keys, time, created, is_windowed(view))
