"""A stream feature view's udf, applied to its archived records before anything reads them, as
Feast's Spark stream processor applies it to the topic (``sfv.udf(df)``, then the job).

``mode="spark"``: the udf takes and returns a Spark DataFrame (what Feast's
``SparkKafkaProcessor`` passes it). ``mode="pandas"``: it takes and returns a pandas DataFrame
and is applied to each Arrow batch of records (``mapInPandas``), so it must work record by
record, as a transformation of each micro-batch does; its output types are those of its result
on the archive's first records (a column null there keeps its input type). Its output must keep
the archive's partition, offset and event-time columns: the backfill orders and times the
records by them (it may filter records, derive columns or rewrite the event time). The
watermark sees the udf's output, as Spark's ``withWatermark`` or Flink's
``assignTimestampsAndWatermarks`` after a map or filter would.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import dill
import pandas as pd
import pyarrow as pa
from feast import StreamFeatureView
from feast.transformation.mode import TransformationMode
from feast.transformation.udf_rehydrate import resolve_udf
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType, TimestampNTZType, TimestampType

from feast_stream_backfill.records import RecordTransform

MODES = ("spark", "pandas")
_SAMPLE_ROWS = 1000


def view_udf(view: StreamFeatureView) -> Callable[[Any], Any] | None:
    """The view's udf as Feast keeps it: the callable, else rebuilt from the registry's proto
    (a view read with ``skip_udf``) by Feast's own ``resolve_udf``."""
    udf = view.udf or getattr(view.feature_transformation, "udf", None)
    raw = getattr(view, "_raw_udf_proto", None)
    if udf is None and raw is not None:
        udf = resolve_udf(udf_string=raw.body_text, body=raw.body, preferred_name=raw.name)
    return udf


def udf_mode(view: StreamFeatureView) -> str:
    mode = view.mode
    return (mode.value if isinstance(mode, TransformationMode) else str(mode)).lower()


def unsupported_udf(view: StreamFeatureView) -> str | None:
    """Why the view's udf cannot be applied, or None."""
    if view_udf(view) is None or udf_mode(view) in MODES:
        return None
    return (
        f"has a udf with mode={udf_mode(view)!r}; the backfill applies mode='spark' (a Spark "
        "DataFrame in and out, as Feast's Spark stream processor calls it) or mode='pandas'"
    )


def record_transform(
    view: StreamFeatureView, kept: list[str], where: str
) -> RecordTransform | None:
    """The view's udf as a transformation of its archive's records (None without a udf);
    ``kept`` are the columns its output must still have."""
    udf = view_udf(view)
    if udf is None:
        return None
    mode = udf_mode(view)
    body = view.udf_string or hashlib.sha256(dill.dumps(udf, recurse=True)).hexdigest()
    return RecordTransform(
        code=f"{mode}:{body}", apply=partial(_apply, udf, mode, tuple(kept), where)
    )


def _apply(
    udf: Callable[[Any], Any], mode: str, kept: tuple[str, ...], where: str, records: DataFrame
) -> DataFrame:
    if mode == "pandas":
        out = records.mapInPandas(partial(_batches, udf), _pandas_schema(udf, records, where))
    else:
        out = udf(records)
        if not isinstance(out, DataFrame):
            raise TypeError(f"{where}: its udf (mode='spark') returned {type(out).__name__}")
    dropped = [c for c in kept if c not in out.columns]
    if dropped:
        raise ValueError(
            f"{where}: its udf dropped the archive's column(s) {dropped} (it returns "
            f"{out.columns}); keep the Kafka partition, offset and event time: the backfill "
            "orders and times the records by them"
        )
    return out


def _batches(
    udf: Callable[[pd.DataFrame], pd.DataFrame], batches: Iterator[pd.DataFrame]
) -> Iterator[pd.DataFrame]:
    for batch in batches:
        yield udf(batch)


def _pandas_schema(
    udf: Callable[[pd.DataFrame], pd.DataFrame], records: DataFrame, where: str
) -> StructType:
    """The Spark types of the udf's output on the first records; timestamps are instants
    (pandas gets Spark's as naive UTC), a column null there keeps its input type."""
    out = udf(records.limit(_SAMPLE_ROWS).toPandas())
    if not isinstance(out, pd.DataFrame):
        raise TypeError(f"{where}: its udf (mode='pandas') returned {type(out).__name__}")
    arrow = pa.Schema.from_pandas(out, preserve_index=False)
    inputs = {f.name: f.dataType for f in records.schema}
    fields = []
    for column in arrow:
        if pa.types.is_null(column.type):
            if column.name not in inputs:
                raise ValueError(
                    f"{where}: its udf's column {column.name!r} is null in the first "
                    f"{_SAMPLE_ROWS} records, so its type is unknown; give it a typed value"
                )
            fields.append(StructField(column.name, inputs[column.name]))
            continue
        spark_type = from_arrow_schema(pa.schema([column]))[0].dataType
        if isinstance(spark_type, TimestampNTZType):
            spark_type = TimestampType()
        fields.append(StructField(column.name, spark_type))
    return StructType(fields)
