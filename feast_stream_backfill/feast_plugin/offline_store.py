"""Feast offline store: training sets joined as of when the job would have written.

``feature_store.yaml``::

    offline_store:
      type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
      emission_log_path: data/emission_log     # Delta tables, one per feature view
      spark_conf: {spark.master: "local[*]"}   # any Spark setting; a cluster's master here

``get_historical_features`` serves the plugin's windowed stream feature views (as of
``emit_time``, from their emission logs) and every other view over Delta or parquet
``FileSource``s (as of event time, Feast's rule: ordinary ``FeatureView``s, stream views without
aggregations, push sources), several in one call, all by the sort-based as-of join of
:mod:`feast_stream_backfill.training_join`.

``filter_by_created_timestamp`` asks Feast's question "what had been written by t?": only rows
created at or before t count. A windowed view's value is always that (its ``emit_time`` is when
the job wrote it: the online store's content at t); for a batch view the flag keeps, among the
rows with event time and created timestamp at or before t, the latest by (event time, created),
which is what Feast's online store held at t if each row was written when it was created.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.dataset
import pyarrow.fs
import pyarrow.parquet
from feast import FeatureView, OnDemandFeatureView
from feast.errors import SavedDatasetLocationAlreadyExists
from feast.feature_logging import LoggingConfig, LoggingSource
from feast.feature_view import DUMMY_ENTITY_ID, DUMMY_ENTITY_VAL
from feast.infra.offline_stores.file_source import FileLoggingDestination, SavedDatasetFileStorage
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
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import TimestampNTZType

from feast_stream_backfill.calibration import load_calibration
from feast_stream_backfill.emission_store import calibration_path
from feast_stream_backfill.feast_plugin.conventions import resolve_path
from feast_stream_backfill.feast_plugin.definitions import check_supported
from feast_stream_backfill.feast_plugin.entity_rows import (
    ENTITY_ROW,
    date_range_spine,
    entity_frame,
    timestamp_column,
)
from feast_stream_backfill.feast_plugin.view_rows import (
    ViewRows,
    file_kind,
    project_logs,
    read_file_source,
    spark_for,
    spark_format,
    view_rows,
)
from feast_stream_backfill.online_state import state_at
from feast_stream_backfill.training_join import as_of_join

_VISIBLE, _LATEST = "_fsb_visible", "_fsb_latest"
#: The name of a view's probability column, after ``<view>__``.
PROBABILITY = "visible_probability"


class StreamBackfillOfflineStoreConfig(FeastConfigBaseModel):
    type: Literal["feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"] = (
        "feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore"
    )
    emission_log_path: str = "data/emission_log"
    """Root of the emission logs (Delta), relative to the feature repo unless absolute/s3a://."""
    spark_conf: dict[str, str] | None = None


def _created_by_then(rows: ViewRows, features: list[str]) -> tuple[DataFrame, list[str]]:
    """``filter_by_created_timestamp`` as an as-of join: a row counts from ``max(time,
    created)`` on, and the value at t is the latest by (time, created) of the rows counting by
    t, a running maximum in that order (peers at one instant together)."""
    so_far = (
        Window.partitionBy(*rows.keys)
        .orderBy(_VISIBLE)
        .rangeBetween(Window.unboundedPreceding, Window.currentRow)
    )
    order = F.struct(rows.time, rows.created)
    values = F.struct(F.col(rows.time).alias(_LATEST), *[F.col(f) for f in features])
    frame = (
        rows.frame.where(F.col(rows.created).isNotNull())
        .withColumn(_VISIBLE, F.greatest(rows.time, rows.created))
        .withColumn("_fsb_max", F.max_by(values, order).over(so_far))
        .select(*rows.keys, _VISIBLE, "_fsb_max.*")
    )
    return frame, [*features, _LATEST]


class StreamBackfillRetrievalJob(RetrievalJob):
    """A lazy Spark result. ``to_df``/``to_arrow`` return rows in ``order`` (the entity_df's
    order); ``to_spark_df`` is unordered, as Spark DataFrames are.
    :meth:`with_probabilities` is the same training set with how sure each row is."""

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
        probabilities: Callable[[Mapping[str, Sequence[float]]], DataFrame] | None = None,
    ) -> None:
        self._df, self._full_feature_names, self._order = df, full_feature_names, order or []
        self._on_demand = on_demand_feature_views or []
        self._metadata, self._repo_path = metadata, repo_path
        self._entity, self._timestamp = entity, timestamp
        self._probabilities = probabilities

    def with_probabilities(
        self, residual_quantiles: Mapping[str, Sequence[float]] | None = None
    ) -> StreamBackfillRetrievalJob:
        """The same rows with, per windowed stream view, a column ``<view>__visible_probability``:
        the probability that the live job had the row's values of that view visible at the
        row's instant, under the residual distribution ``feast-stream-backfill calibrate`` kept
        for the view (or the quantiles given here per view name, at
        :data:`~feast_stream_backfill.calibration.fit.LEVELS`). A view never calibrated and
        not given is refused, named."""
        if self._probabilities is None:
            raise ValueError("this training set has no windowed stream view to give odds for")
        return StreamBackfillRetrievalJob(
            self._probabilities(residual_quantiles or {}),
            self._full_feature_names,
            order=self._order,
            metadata=self._metadata,
            entity=self._entity,
            timestamp=self._timestamp,
            repo_path=self._repo_path,
            on_demand_feature_views=self._on_demand,
        )

    def to_spark_df(self) -> DataFrame:
        return self._df.drop(ENTITY_ROW)

    def _to_df_internal(self, timeout: int | None = None) -> pd.DataFrame:
        return self._to_arrow_internal(timeout).to_pandas()

    def _to_arrow_internal(self, timeout: int | None = None) -> pa.Table:
        ordered = self._df.orderBy(*self._order) if self._order else self._df
        return ordered.drop(ENTITY_ROW).toArrow()

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
        existing location raises Feast's ``SavedDatasetLocationAlreadyExists``."""
        if not isinstance(storage, SavedDatasetFileStorage):
            raise ValueError(
                f"persist to a SavedDatasetFileStorage (Delta or parquet), got {type(storage)}"
            )
        kind = spark_format(storage.file_options.file_format, "persist")
        uri = storage.file_options.uri
        mode = "overwrite" if allow_overwrite else "errorifexists"
        try:
            self.to_spark_df().write.format(kind).mode(mode).save(
                resolve_path(uri, self._repo_path)
            )
        except AnalysisException as exc:
            if exc.getCondition() in ("PATH_ALREADY_EXISTS", "DELTA_PATH_EXISTS"):
                raise SavedDatasetLocationAlreadyExists(location=uri) from exc
            raise


class StreamBackfillOfflineStore(OfflineStore):
    supports_filter_by_created_timestamp = True

    @staticmethod
    def get_historical_features(
        config: RepoConfig,
        feature_views: list,
        feature_refs: list[str],
        entity_df: pd.DataFrame | str | DataFrame | None,
        registry: BaseRegistry,
        project: str,
        full_feature_names: bool = False,
        filter_by_created_timestamp: bool = False,
        **kwargs: Any,
    ) -> RetrievalJob:
        """Per entity row and view: a windowed stream view's last emission with ``emit_time <=
        t``, any other view's latest row with event time ``<= t`` (Feast's rule; with
        ``filter_by_created_timestamp`` also created ``<= t``), within the view's ttl. An
        entityless view joins on time alone (Feast's ``__dummy_id``, not in the result).

        Without an entity_df (``start_date``/``end_date``), the rows are every ``(key,
        instant)`` at which a requested view's value changed in the range (closed: a range of
        one instant gives the changes at that instant), in time order; a start after the end is
        refused before anything is computed.
        """
        check_supported(feature_views)
        start, end = compute_non_entity_date_range(
            feature_views, kwargs.get("start_date"), kwargs.get("end_date")
        )
        if entity_df is None and start > end:
            raise ValueError(f"get_historical_features: start_date {start} is after end_date {end}")
        spark = spark_for(config)
        views = []
        for view in feature_views:
            prefix = view.projection.name_to_use()
            wanted = [r.split(":", 1)[1] for r in feature_refs if r.split(":", 1)[0] == prefix]
            views.append((view, prefix, wanted, view_rows(config, view, wanted)))
        if entity_df is None:
            ts = DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
            entity = date_range_spine([rows for *_, rows in views], start, end, ts)
            keys = [c for c in entity.columns if c not in (ts, DUMMY_ENTITY_ID)]
            order, metadata = [ts, *keys], RetrievalMetadata(feature_refs, keys, start, end)
        else:
            entity = entity_frame(spark, entity_df)
            ts = timestamp_column(entity)
            if isinstance(entity.schema[ts].dataType, TimestampNTZType):
                entity = entity.withColumn(ts, F.col(ts).cast("timestamp"))
            keys = [c for c in entity.columns if c not in (ts, ENTITY_ROW)]
            order, metadata = [ENTITY_ROW], RetrievalMetadata(feature_refs, keys)
        entityless = any(DUMMY_ENTITY_ID in rows.keys for *_, rows in views)
        if entityless and DUMMY_ENTITY_ID not in entity.columns:
            entity = entity.withColumn(DUMMY_ENTITY_ID, F.lit(DUMMY_ENTITY_VAL))

        def joined(quantiles: Mapping[str, Sequence[float]] | None) -> DataFrame:
            result = entity
            for view, prefix, wanted, rows in views:
                missing = [k for k in rows.keys if k not in entity.columns]
                if missing:
                    raise ValueError(
                        f"feature view {view.name!r} joins on {rows.keys}; entity_df lacks "
                        f"{missing}"
                    )
                names = [f"{prefix}__{f}" if full_feature_names else f for f in wanted]
                ttl = view.ttl.total_seconds() if view.ttl else None
                chance = None
                if quantiles is not None and rows.streaming:
                    chance = (quantiles[view.name], f"{prefix}__{PROBABILITY}")
                result = _as_of(
                    result, rows, ts, wanted, names, ttl, filter_by_created_timestamp, chance
                )
            return result.drop(DUMMY_ENTITY_ID) if entityless else result

        def with_probabilities(given: Mapping[str, Sequence[float]]) -> DataFrame:
            streams = [view for view, *_, rows in views if rows.streaming]
            quantiles = {v.name: given.get(v.name) or _stored_quantiles(config, v) for v in streams}
            return joined(quantiles)

        return StreamBackfillRetrievalJob(
            joined(None),
            full_feature_names,
            order=order,
            metadata=metadata,
            entity=entity,
            timestamp=ts,
            repo_path=config.repo_path,
            on_demand_feature_views=OnDemandFeatureView.get_requested_odfvs(
                feature_refs, project, registry
            ),
            probabilities=with_probabilities,
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
        created timestamp), source column names as given; no join keys (an entityless view):
        the latest row, with Feast's ``__dummy_id``."""
        columns = [*join_key_columns, *feature_name_columns, timestamp_field]
        if created_timestamp_column:
            columns.append(created_timestamp_column)
        rows = read_file_source(config, data_source, f"data source {data_source.name!r}")
        rows = rows.select(*columns).withColumn(DUMMY_ENTITY_ID, F.lit(DUMMY_ENTITY_VAL))
        keys = join_key_columns or [DUMMY_ENTITY_ID]
        latest = state_at(
            rows,
            keys,
            end_date,
            start_date,
            time=timestamp_field,
            sequence=created_timestamp_column,
        )
        selected = columns if join_key_columns else [*columns, DUMMY_ENTITY_ID]
        return StreamBackfillRetrievalJob(latest.select(*selected), False)

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
        """Every row with ``start_date <= timestamp <= end_date``; reads saved datasets and
        feature logs back. No feature columns: every column (Feast's convention)."""
        columns = [*join_key_columns, *feature_name_columns, timestamp_field]
        if created_timestamp_column:
            columns.append(created_timestamp_column)
        rows = read_file_source(config, data_source, f"data source {data_source.name!r}")
        if feature_name_columns:
            rows = rows.select(*columns)
        if start_date is not None:
            rows = rows.where(F.col(timestamp_field) >= F.lit(start_date))
        if end_date is not None:
            rows = rows.where(F.col(timestamp_field) <= F.lit(end_date))
        return StreamBackfillRetrievalJob(rows, False)

    def get_table_column_names_and_types_from_data_source(
        self, config: RepoConfig, data_source: Any
    ) -> list[tuple[str, str]]:
        """A source's columns with pyarrow type names (as Feast's ``FileSource`` gives them),
        read through Spark: a Delta table needs no ``deltalake`` package."""
        frame = read_file_source(config, data_source, f"data source {data_source.name!r}")
        return [(f.name, str(f.type)) for f in to_arrow_schema(frame.schema, timezone="UTC")]

    @staticmethod
    def offline_write_batch(
        config: RepoConfig,
        feature_view: FeatureView,
        table: pa.Table,
        progress: Any,
    ) -> None:
        """Append ``table`` to the view's batch source (``push(to=PushMode.OFFLINE)``): one
        Delta transaction, its columns cast to the table's types, or parquet in the existing
        files' Arrow types, written by pyarrow as Feast's file store does (Spark cannot write
        the nanosecond timestamps pandas writes; :func:`_append_parquet`). Its columns must be the
        source's (any order). Pushing the same rows again appends copies, which change no
        value: equal rows tie and are alike."""
        source = feature_view.batch_source
        where = f"feature view {feature_view.name!r} (source {getattr(source, 'path', None)!r})"
        existing = read_file_source(config, source, where)
        missing = sorted(set(existing.columns) - set(table.column_names))
        extra = sorted(set(table.column_names) - set(existing.columns))
        if missing or extra:
            raise ValueError(
                f"{where}: the rows to write lack {missing} and have {extra} beyond the source's "
                f"columns {existing.columns}"
            )
        path = resolve_path(source.path, config.repo_path)
        if file_kind(source, where) == "delta":
            rows = spark_for(config).createDataFrame(table)
            rows = rows.select(*[F.col(f.name).cast(f.dataType) for f in existing.schema])
            rows.write.format("delta").mode("append").save(path)
        else:
            _append_parquet(path, table)
        if progress:
            progress(table.num_rows)

    @staticmethod
    def write_logged_features(
        config: RepoConfig,
        data: pa.Table | Path,
        source: LoggingSource,
        logging_config: LoggingConfig,
        registry: BaseRegistry,
    ) -> None:
        """Append logged features to a ``FileLoggingDestination`` as parquet (partitioned by
        its ``partition_by``), as Feast's file store does; read back by
        ``pull_all_from_table_or_query``."""
        destination = logging_config.destination
        if not isinstance(destination, FileLoggingDestination):
            raise ValueError(
                f"feature logging writes to a FileLoggingDestination, got {type(destination)}"
            )
        spark = spark_for(config)
        logs = (
            spark.read.parquet(str(data)) if isinstance(data, Path) else spark.createDataFrame(data)
        )
        writer = logs.write.mode("append").partitionBy(*(destination.partition_by or []))
        writer.parquet(resolve_path(destination.path, config.repo_path))


def _append_parquet(path: str, table: pa.Table) -> None:
    """One new file in a directory source; a single-file source (Feast's own, ``feast init``'s)
    is rewritten with the old and new rows, as Feast's file store does, through a temporary
    file moved over it."""
    files, root = pyarrow.fs.FileSystem.from_uri(path.replace("s3a://", "s3://", 1))
    dataset = pyarrow.dataset.dataset(root, filesystem=files, format="parquet")
    schema = dataset.schema.remove_metadata()
    rows = table.select(schema.names).cast(schema)
    if files.get_file_info(root).type != pyarrow.fs.FileType.File:
        pyarrow.parquet.write_table(rows, f"{root}/{uuid.uuid4().hex}.parquet", filesystem=files)
        return
    old = dataset.to_table().replace_schema_metadata(None)
    temporary = f"{root}.{uuid.uuid4().hex}.tmp"
    pyarrow.parquet.write_table(pa.concat_tables([old, rows]), temporary, filesystem=files)
    files.move(temporary, root)


def _stored_quantiles(config: RepoConfig, view: FeatureView) -> Sequence[float]:
    """The residual quantiles ``calibrate`` kept for the view; a ValueError where none."""
    root = project_logs(config, config.project)
    found = None
    if root is not None:
        found = load_calibration(spark_for(config), calibration_path(f"{root}/{view.name}"))
    if found is None or found.delays is None:
        raise ValueError(
            f"stream feature view {view.name!r} has no calibration against the live job: run "
            f"`feast-stream-backfill calibrate {view.name}` (or give its residual quantiles)"
        )
    return found.delays.quantiles


def _as_of(
    result: DataFrame,
    rows: ViewRows,
    ts: str,
    wanted: list[str],
    names: list[str],
    ttl: float | None,
    filter_by_created_timestamp: bool,
    chance: tuple[Sequence[float], str] | None = None,
) -> DataFrame:
    """``result`` with one view's values as of ``ts`` (columns as from a left join on the
    view's keys and ``ts``): its rows go through the view's sort themselves. ``chance``: for
    a stream view, its residual quantiles and the probability column's name."""
    if rows.streaming:  # written at emit_time: created by then already
        quantiles, name = chance if chance else (None, PROBABILITY)
        return as_of_join(
            result,
            rows.frame,
            rows.keys,
            ts,
            wanted,
            ttl_seconds=ttl,
            output_names=names,
            residual_quantiles=quantiles,
            probability_name=name,
        )
    if filter_by_created_timestamp and rows.created:
        frame, carried = _created_by_then(rows, wanted)
        joined = as_of_join(
            result, frame, rows.keys, ts, carried, emission_time=_VISIBLE, sequence=None
        )
        fresh = F.lit(True)
        if ttl:
            fresh = F.col(_LATEST) >= F.col(ts) - F.make_interval(secs=F.lit(ttl))
        return joined.select(
            *joined.columns[: -len(carried)],
            *[F.when(fresh, F.col(f)).alias(n) for f, n in zip(wanted, names, strict=True)],
        )
    # Feast's rule for a batch view: the latest row with timestamp <= t; among equal
    # timestamps the latest created wins, a null created losing (Feast sorts nulls first and
    # keeps the last): the same sort, by other columns.
    return as_of_join(
        result,
        rows.frame,
        rows.keys,
        ts,
        wanted,
        emission_time=rows.time,
        sequence=rows.created,
        ttl_seconds=ttl,
        output_names=names,
    )
