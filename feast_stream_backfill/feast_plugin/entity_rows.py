"""The entity side of a training join: the entity rows Feast was given (pandas, Spark or SQL)
numbered in their order, their time column, or the rows of Feast's date-range mode."""

from __future__ import annotations

from datetime import datetime
from functools import reduce

import pandas as pd
from feast.infra.offline_stores.offline_utils import DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from feast_stream_backfill.feast_plugin.view_rows import ViewRows

#: The column numbering the entity rows in the order given.
ENTITY_ROW = "_fsb_row"


def entity_frame(spark: SparkSession, entity_df: pd.DataFrame | str | DataFrame) -> DataFrame:
    """The entity rows as Spark reads them, each numbered in :data:`ENTITY_ROW` (the result
    keeps their order)."""
    if isinstance(entity_df, DataFrame):
        return entity_df.withColumn(ENTITY_ROW, F.monotonically_increasing_id())
    if isinstance(entity_df, str):
        return spark.sql(entity_df).withColumn(ENTITY_ROW, F.monotonically_increasing_id())
    if isinstance(entity_df, pd.DataFrame):
        rows = _in_microseconds(entity_df).assign(**{ENTITY_ROW: range(len(entity_df))})
        return spark.createDataFrame(rows)
    raise TypeError(
        f"entity_df must be a pandas DataFrame, a Spark DataFrame or SQL, got {type(entity_df)}"
    )


def _in_microseconds(entity_df: pd.DataFrame) -> pd.DataFrame:
    """The entity_df with its datetime columns in microseconds, floored. Spark timestamps are
    microseconds: given pandas' default nanoseconds, ``createDataFrame``'s Arrow conversion
    fails on any instant with sub-microsecond digits, and Spark warns and falls back to
    converting row by row. Flooring keeps an entity row's time at or before the one asked."""
    stamps = [
        c
        for c, kind in entity_df.dtypes.items()
        if pd.api.types.is_datetime64_any_dtype(kind) and getattr(kind, "unit", "us") != "us"
    ]
    if not stamps:
        return entity_df
    return entity_df.assign(**{c: entity_df[c].dt.floor("us").dt.as_unit("us") for c in stamps})


def timestamp_column(df: DataFrame) -> str:
    """The entity rows' time: Feast's ``event_timestamp``, or their one timestamp column."""
    if DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL in df.columns:
        return DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL
    stamps = [f.name for f in df.schema if isinstance(f.dataType, TimestampType | TimestampNTZType)]
    if len(stamps) != 1:
        raise ValueError(
            f"entity_df needs an '{DEFAULT_ENTITY_DF_EVENT_TIMESTAMP_COL}' column or exactly one "
            f"timestamp column; it has {df.columns}"
        )
    return stamps[0]


def date_range_spine(views: list[ViewRows], start: datetime, end: datetime, ts: str) -> DataFrame:
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
