"""Feast offline store: training sets joined as of when the job would have written.

``feature_store.yaml``::

    offline_store:
      type: feast_stream_backfill.feast_plugin.offline_store.StreamBackfillOfflineStore
      emission_log_path: data/emission_log     # Delta tables, one per feature view
      spark_conf: {spark.master: "local[*]"}   # any Spark setting; a cluster's master here
"""

from __future__ import annotations

from typing import Any, Literal

import pandas as pd
import pyarrow as pa
from feast import StreamFeatureView
from feast.infra.offline_stores.offline_store import OfflineStore, RetrievalJob
from feast.infra.offline_stores.offline_utils import DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
from feast.infra.registry.base_registry import BaseRegistry
from feast.repo_config import FeastConfigBaseModel, RepoConfig
from feast.saved_dataset import SavedDatasetStorage
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from feast_stream_backfill.emission_store import ensure_emission_log
from feast_stream_backfill.feast_plugin.definitions import resolve_path, stream_job
from feast_stream_backfill.spark import get_spark
from feast_stream_backfill.training_join import as_of_join

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


class StreamBackfillRetrievalJob(RetrievalJob):
    """A lazy Spark result; rows come back in the entity_df's order."""

    def __init__(self, df: DataFrame, full_feature_names: bool) -> None:
        self._df = df
        self._full_feature_names = full_feature_names

    def to_spark_df(self) -> DataFrame:
        return self._df.drop(_ROW)

    def _to_df_internal(self, timeout: int | None = None) -> pd.DataFrame:
        return self._to_arrow_internal(timeout).to_pandas()

    def _to_arrow_internal(self, timeout: int | None = None) -> pa.Table:
        return self._df.orderBy(_ROW).drop(_ROW).toArrow()

    @property
    def full_feature_names(self) -> bool:
        return self._full_feature_names

    @property
    def on_demand_feature_views(self) -> list:
        return []

    @property
    def metadata(self) -> None:
        return None

    def persist(
        self,
        storage: SavedDatasetStorage,
        allow_overwrite: bool = False,
        timeout: int | None = None,
    ) -> None:
        path = storage.file_options.uri  # SavedDatasetFileStorage
        mode = "overwrite" if allow_overwrite else "errorifexists"
        self.to_spark_df().write.format("delta").mode(mode).save(path)


class StreamBackfillOfflineStore(OfflineStore):
    @staticmethod
    def get_historical_features(
        config: RepoConfig,
        feature_views: list,
        feature_refs: list[str],
        entity_df: pd.DataFrame | str | None,
        registry: BaseRegistry,
        project: str,
        full_feature_names: bool = False,
        **kwargs: Any,
    ) -> RetrievalJob:
        """Per entity row, each feature's last emission with ``emit_time <=`` its timestamp."""
        if entity_df is None:
            raise ValueError("give an entity_df: the date-range mode is not supported yet")
        spark = spark_for(config)
        result = _entity_frame(spark, entity_df)
        ts = _timestamp_column(result)
        for view in feature_views:
            if not isinstance(view, StreamFeatureView):
                raise ValueError(
                    f"feature view {view.name!r}: this store serves stream feature views "
                    "(batch feature views are not supported yet)"
                )
            wanted = [r.split(":", 1)[1] for r in feature_refs if r.split(":", 1)[0] == view.name]
            keys = [view.projection.join_key_map.get(e.name, e.name) for e in view.entity_columns]
            emissions = emissions_for(config, view)
            if keys != [e.name for e in view.entity_columns]:
                emissions = emissions.toDF(
                    *[view.projection.join_key_map.get(c, c) for c in emissions.columns]
                )
            names = [
                f"{view.projection.name_to_use()}__{f}" if full_feature_names else f for f in wanted
            ]
            ttl = view.ttl.total_seconds() if view.ttl else None
            result = as_of_join(
                result, emissions, keys, ts, wanted, ttl_seconds=ttl, output_names=names
            )
        return StreamBackfillRetrievalJob(result, full_feature_names)
