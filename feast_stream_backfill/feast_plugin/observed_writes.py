"""The live job's writes declared the Feast way, and the view's calibration kept beside its log.

The output topic as archived is an ordinary Feast ``FileSource`` (Delta or parquet) in the
feature repo: its ``timestamp_field`` is the write time, its ``field_mapping`` renames columns
to the view's feature names, as for any source, and :func:`observed_writes_tags` says where the
window bounds and the job's firing stamp are. The view names it with the tag
``stream_backfill.observed_writes`` (:func:`calibration_tags`). ``feast apply`` registers
both; ``feast-stream-backfill calibrate VIEW`` reads them back from the registry.
"""

from __future__ import annotations

from feast import FeatureStore, FileSource, StreamFeatureView
from pyspark.sql import SparkSession

from feast_stream_backfill import emission_store
from feast_stream_backfill.calibration import ObservedWrites
from feast_stream_backfill.feast_plugin.conventions import PREFIX, resolve_path
from feast_stream_backfill.feast_plugin.view_rows import project_logs, spark_format

OBSERVED_WRITES = PREFIX + "observed_writes"


def calibration_tags(observed_writes: str) -> dict[str, str]:
    """Tags for a ``StreamFeatureView``: the name of the ``FileSource`` holding the live job's
    writes."""
    return {OBSERVED_WRITES: observed_writes}


def observed_writes_tags(
    *,
    window_start_column: str = "window_start",
    window_end_column: str | None = "window_end",
    processing_time_column: str | None = None,
) -> dict[str, str]:
    """Tags for the writes' ``FileSource``: the window's bounds (no end: ``None``) and the
    column where the job stamps its firing's processing time, where it writes one."""
    return {
        PREFIX + "window_start_column": window_start_column,
        PREFIX + "window_end_column": window_end_column or "",
        PREFIX + "processing_time_column": processing_time_column or "",
    }


def observed_writes(
    store: FeatureStore, view: StreamFeatureView, spark: SparkSession
) -> ObservedWrites:
    """The view's writes as declared; a ``ValueError`` says what is missing."""
    where = f"stream feature view {view.name!r}"
    name = view.tags.get(OBSERVED_WRITES)
    if not name:
        raise ValueError(
            f"{where}: no {OBSERVED_WRITES!r} tag naming the FileSource of the live job's "
            "writes (calibration_tags)"
        )
    try:
        source = store.get_data_source(name)
    except Exception as exc:  # Feast raises its own not-found errors
        raise ValueError(f"{where}: observed writes {name!r}: {exc}") from exc
    if not isinstance(source, FileSource):
        raise ValueError(f"{where}: observed writes {name!r} must be a FileSource")
    path = resolve_path(source.path, store.config.repo_path)
    kind = spark_format(source.file_format, f"observed writes {name!r}")
    tags = source.tags

    def column(option: str, default: str) -> str | None:
        return tags.get(PREFIX + option, default) or None

    renamed = {feature: column for column, feature in (source.field_mapping or {}).items()}
    return ObservedWrites(
        path=path if kind == "delta" else None,
        dataframe=None if kind == "delta" else spark.read.parquet(path),
        write_time=source.timestamp_field,
        processing_time=column("processing_time_column", ""),
        window_start=column("window_start_column", "window_start") or "window_start",
        window_end=column("window_end_column", "window_end"),
        features=renamed,
    )


def view_calibration_path(store: FeatureStore, view: StreamFeatureView) -> str:
    """Where the view's calibration is kept: beside its emission log."""
    root = project_logs(store.config, store.config.project)
    if root is None:
        raise ValueError("the offline store keeps no emission logs (emission_log_path)")
    return emission_store.calibration_path(f"{root}/{view.name}")
