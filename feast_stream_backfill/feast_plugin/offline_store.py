"""Feast offline store: training sets joined as of when the job would have written.

``feature_store.yaml``::

    offline_store:
      type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
      emission_log_path: data/emission_log     # Delta tables, one per feature view
      spark_conf: {spark.master: "local[*]"}   # any Spark setting; a cluster's master here

``get_historical_features`` serves the plugin's stream feature views (as of ``emit_time``, from
their emission logs) and ordinary ``FeatureView``s over Delta or parquet ``FileSource``s (as of
event time, Feast's rule), several in one call, all by the sort-based as-of join of
:mod:`feast_stream_backfill.training_join`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
from feast import FeatureView, FileSource, OnDemandFeatureView, StreamFeatureView
from feast.data_format import DeltaFormat, ParquetFormat
from feast.infra.offline_stores.file_source import SavedDatasetFileStorage
from feast.infra.offline_stores.offline_store import (
    OfflineStore,
    RetrievalJob,
    RetrievalMetadata,
)
from feast.infra.offline_stores.offline_utils import DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
from feast.infra.registry.base_registry import BaseRegistry
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from feast.saved_dataset import SavedDatasetStorage
from feast.utils import compute_non_entity_date_range
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from feast_stream_backfill.emission_store import ensure_emission_log
from feast_stream_backfill.feast_plugin.definitions import (
    refuse_transformations,
    resolve_path,
    stream_job,
)
from feast_stream_backfill.online_state import state_at
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.training_join import as_of_values

_ROW = "_fsb_row"


class StreamBackfillOfflineStoreConfig(FeastConfigBaseModel):
    type: Literal["feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"] = (
        "feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"
    )
    emission_log_path: str = "data/emission_log"
    """Root of the emission logs (Delta), relative to the feature repo unless absolute/s3a://."""
    spark_conf: dict[str, str] | None = None


def spark_for(config: RepoConfig) -> SparkSession:
    return get_spark(config.offline_store.spark_conf)


def emissions_for(config: RepoConfig, view: StreamFeatureView) -> DataFrame:
    """The view's emission log, backfilled first when missing or stale."""
    spark = spark_for(config)
    root = resolve_path(config.offline_store.emission_log_path, config.repo_path)
    path = f"{root.rstrip('/')}/{config.project}/{view.name}"
    return ensure_emission_log(spark, stream_job(view, config.repo_path), path)


def read_file_source(config: RepoConfig, source: Any, where: str) -> DataFrame:
    """A Delta or parquet ``FileSource`` as Spark reads it, source column names unchanged."""
    if not isinstance(source, FileSource) or not isinstance(
        source.file_format, DeltaFormat | ParquetFormat
    ):
        raise ValueError(
            f"{where}: this store reads FileSources in Delta or parquet format, got "
            f"{type(source).__name__} {getattr(source, 'file_format', None)!r}"
        )
    kind = "delta" if isinstance(source.file_format, DeltaFormat) else "parquet"
    path = resolve_path(source.path, config.repo_path)
    return spark_for(config).read.format(kind).load(path)


@dataclass(frozen=True)
class _Rows:
    """A view's rows with its join-key column names: emissions or batch feature rows."""

    frame: DataFrame
    keys: list[str]
    time: str
    created: str | None
    streaming: bool


def _view_rows(config: RepoConfig, view: FeatureView, features: list[str]) -> _Rows:
    projected = view.projection.join_key_map
    keys = [projected.get(e.name, e.name) for e in view.entity_columns]
    if isinstance(view, StreamFeatureView):
        frame, time, created = emissions_for(config, view), "emit_time", None
        where = f"stream feature view {view.name!r} (its emission log)"
    else:
        refuse_transformations(view)
        source = view.batch_source
        frame = read_file_source(config, source, f"feature view {view.name!r}")
        mapping = source.field_mapping or {}
        frame = frame.toDF(*[mapping.get(c, c) for c in frame.columns])
        time, created = source.timestamp_field, source.created_timestamp_column or None
        where = f"feature view {view.name!r} (source {source.path!r}, after field_mapping)"
    frame = frame.toDF(*[projected.get(c, c) for c in frame.columns])
    missing = [c for c in [*keys, time, created, *features] if c and c not in frame.columns]
    if missing:
        raise ValueError(f"{where}: no column {missing}; it has {frame.columns}")
    for column in (time, created):
        if column and not isinstance(frame.schema[column].dataType, TimestampType):
            frame = frame.withColumn(column, F.col(column).cast("timestamp"))
    return _Rows(frame, keys, time, created, isinstance(view, StreamFeatureView))


def _entity_frame(spark: SparkSession, entity_df: pd.DataFrame | str | DataFrame) -> DataFrame:
    if isinstance(entity_df, DataFrame):
        return entity_df.withColumn(_ROW, F.monotonically_increasing_id())
    if isinstance(entity_df, str):
        return spark.sql(entity_df).withColumn(_ROW, F.monotonically_increasing_id())
    if isinstance(entity_df, pd.DataFrame):
        return spark.createDataFrame(entity_df.assign(**{_ROW: range(len(entity_df))}))
    raise TypeError(
        f"entity_df must be a pandas DataFrame, a Spark DataFrame or SQL, got {type(entity_df)}"
    )


def _timestamp_column(df: DataFrame) -> str:
    if DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL in df.columns:
        return DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
    stamps = [f.name for f in df.schema if isinstance(f.dataType, TimestampType | TimestampNTZType)]
    if len(stamps) != 1:
        raise ValueError(
            f"entity_df needs an '{DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL}' column or exactly one "
            f"timestamp column; it has {df.columns}"
        )
    return stamps[0]


def _date_range_spine(views: list[_Rows], start: datetime, end: datetime, ts: str) -> DataFrame:
    """Feast's date-range mode: every ``(key, instant)`` at which a view's value changed in
    ``[start, end]`` (an emission, or a batch row's event time), once."""
    spines = [
        rows.frame.where(F.col(rows.time).between(F.lit(start), F.lit(end))).select(
            *rows.keys, F.col(rows.time).alias(ts)
        )
        for rows in views
    ]
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), spines)
    return union.distinct()


class StreamBackfillRetrievalJob(RetrievalJob):
    """A lazy Spark result. ``to_df``/``to_arrow`` return rows in ``order`` (the entity_df's
    order); ``to_spark_df`` is unordered, as Spark DataFrames are."""

    def __init__(
        self,
        df: DataFrame,
        full_feature_names: bool,
        *,
        order: list[str] | None = None,
        metadata: RetrievalMetadata | None = None,
        entity: DataFrame | None = None,
        timestamp: str | None = None,
        repo_path: Any = None,
        on_demand_feature_views: list[OnDemandFeatureView] | None = None,
    ) -> None:
        self._df, self._full_feature_names, self._order = df, full_feature_names, order or []
        self._on_demand = on_demand_feature_views or []
        self._metadata, self._repo_path = metadata, repo_path
        self._entity, self._timestamp = entity, timestamp

    def to_spark_df(self) -> DataFrame:
        return self._df.drop(_ROW)

    def _to_df_internal(self, timeout: int | None = None) -> pd.DataFrame:
        return self._to_arrow_internal(timeout).to_pandas()

    def _to_arrow_internal(self, timeout: int | None = None) -> pa.Table:
        ordered = self._df.orderBy(*self._order) if self._order else self._df
        return ordered.drop(_ROW).toArrow()

    @property
    def full_feature_names(self) -> bool:
        return self._full_feature_names

    @property
    def on_demand_feature_views(self) -> list[OnDemandFeatureView]:
        """Feast's ``to_df``/``to_arrow`` apply these to the rows, as for its own stores."""
        return self._on_demand

    @property
    def metadata(self) -> RetrievalMetadata | None:
        """Feature refs, keys and the entity timestamps' range (one aggregate, on first use)."""
        if self._metadata is not None and self._metadata.max_event_timestamp is None:
            low, high = self._entity.agg(F.min(self._timestamp), F.max(self._timestamp)).first()
            self._metadata.min_event_timestamp, self._metadata.max_event_timestamp = low, high
        return self._metadata

    def persist(
        self,
        storage: SavedDatasetStorage,
        allow_overwrite: bool = False,
        timeout: int | None = None,
    ) -> None:
        """Write the result to a ``SavedDatasetFileStorage``: a Delta table for ``DeltaFormat``
        (the natural one here: transactional, read back by this store), parquet otherwise;
        a relative path is relative to the feature repo. Without ``allow_overwrite`` an
        existing location is an error."""
        if not isinstance(storage, SavedDatasetFileStorage):
            raise ValueError(
                f"persist to a SavedDatasetFileStorage (Delta or parquet), got {type(storage)}"
            )
        fmt = storage.file_options.file_format
        if not isinstance(fmt, DeltaFormat | ParquetFormat):
            raise ValueError(f"persist writes Delta or parquet, got {fmt!r}")
        kind = "delta" if isinstance(fmt, DeltaFormat) else "parquet"
        path = resolve_path(storage.file_options.uri, self._repo_path)
        mode = "overwrite" if allow_overwrite else "errorifexists"
        self.to_spark_df().write.format(kind).mode(mode).save(path)


class StreamBackfillOfflineStore(OfflineStore):
    @staticmethod
    def get_historical_features(
        config: RepoConfig,
        feature_views: list,
        feature_refs: list[str],
        entity_df: pd.DataFrame | str | DataFrame | None,
        registry: BaseRegistry,
        project: str,
        full_feature_names: bool = False,
        **kwargs: Any,
    ) -> RetrievalJob:
        """Per entity row and view: a stream view's last emission with ``emit_time <= t``, a
        batch view's latest row with event time ``<= t`` (Feast's rule), within the view's ttl.

        Without an entity_df (``start_date``/``end_date``), the rows are every ``(key,
        instant)`` at which a requested view's value changed in the range, in time order.
        """
        spark = spark_for(config)
        views = []
        for view in feature_views:
            prefix = view.projection.name_to_use()
            wanted = [r.split(":", 1)[1] for r in feature_refs if r.split(":", 1)[0] == prefix]
            views.append((view, prefix, wanted, _view_rows(config, view, wanted)))
        if entity_df is None:
            start, end = compute_non_entity_date_range(
                feature_views, kwargs.get("start_date"), kwargs.get("end_date")
            )
            ts = DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
            entity = _date_range_spine([rows for *_, rows in views], start, end, ts)
            keys = [c for c in entity.columns if c != ts]
            order, metadata = [ts, *keys], RetrievalMetadata(feature_refs, keys, start, end)
        else:
            entity = _entity_frame(spark, entity_df)
            ts = _timestamp_column(entity)
            if isinstance(entity.schema[ts].dataType, TimestampNTZType):
                entity = entity.withColumn(ts, F.col(ts).cast("timestamp"))
            keys = [c for c in entity.columns if c not in (ts, _ROW)]
            order, metadata = [_ROW], RetrievalMetadata(feature_refs, keys)
        result = entity
        for view, prefix, wanted, rows in views:
            missing = [k for k in rows.keys if k not in entity.columns]
            if missing:
                raise ValueError(
                    f"feature view {view.name!r} joins on {rows.keys}; entity_df lacks {missing}"
                )
            names = [f"{prefix}__{f}" if full_feature_names else f for f in wanted]
            ttl = view.ttl.total_seconds() if view.ttl else None
            if rows.streaming:
                values = as_of_values(
                    entity, rows.frame, rows.keys, ts, wanted, ttl_seconds=ttl, output_names=names
                )
            else:
                # Feast's rule for a batch view: the latest row with timestamp <= t; among
                # equal timestamps the latest created wins, a null created losing (Feast sorts
                # nulls first and keeps the last): the same sort, by other columns.
                values = as_of_values(
                    entity,
                    rows.frame,
                    rows.keys,
                    ts,
                    wanted,
                    emission_time=rows.time,
                    sequence=rows.created,
                    ttl_seconds=ttl,
                    output_names=names,
                )
            result = result.join(values, on=[*rows.keys, ts], how="left")
        return StreamBackfillRetrievalJob(
            result,
            full_feature_names,
            order=order,
            metadata=metadata,
            entity=entity,
            timestamp=ts,
            repo_path=config.repo_path,
            on_demand_feature_views=OnDemandFeatureView.get_requested_odfvs(
                feature_refs, project, registry
            ),
        )

    @staticmethod
    def pull_latest_from_table_or_query(
        config: RepoConfig,
        data_source: Any,
        join_key_columns: list[str],
        feature_name_columns: list[str],
        timestamp_field: str,
        created_timestamp_column: str | None,
        start_date: datetime,
        end_date: datetime,
    ) -> RetrievalJob:
        """Per key, the latest row with ``start_date <= timestamp <= end_date`` (ties by the
        created timestamp), source column names as given: what materializing a batch view
        writes."""
        columns = [*join_key_columns, *feature_name_columns, timestamp_field]
        if created_timestamp_column:
            columns.append(created_timestamp_column)
        rows = read_file_source(config, data_source, f"data source {data_source.name!r}")
        latest = state_at(
            rows.select(*columns),
            join_key_columns,
            end_date,
            start_date,
            time=timestamp_field,
            sequence=created_timestamp_column,
        )
        return StreamBackfillRetrievalJob(latest.select(*columns), False)

    @staticmethod
    def pull_all_from_table_or_query(
        config: RepoConfig,
        data_source: Any,
        join_key_columns: list[str],
        feature_name_columns: list[str],
        timestamp_field: str,
        created_timestamp_column: str | None = None,
        start_date: datetime | None = None,
        end_date: datetime | None = None,
    ) -> RetrievalJob:
        """Every row with ``start_date <= timestamp <= end_date``; reads saved datasets back."""
        columns = [*join_key_columns, *feature_name_columns, timestamp_field]
        if created_timestamp_column:
            columns.append(created_timestamp_column)
        rows = read_file_source(config, data_source, f"data source {data_source.name!r}")
        rows = rows.select(*columns)
        if start_date is not None:
            rows = rows.where(F.col(timestamp_field) >= F.lit(start_date))
        if end_date is not None:
            rows = rows.where(F.col(timestamp_field) <= F.lit(end_date))
        return StreamBackfillRetrievalJob(rows, False)
