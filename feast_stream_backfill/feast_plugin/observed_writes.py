"""The live job's writes and served requests declared the Feast way, and the view's calibration
kept beside its log.

The output topic as archived is an ordinary Feast ``FileSource`` (Delta or parquet) in the
feature repo: its ``timestamp_field`` is the write time, its ``field_mapping`` renames columns
to the view's feature names, as for any source, and :func:`observed_writes_tags` says where the
window bounds and the job's firing stamp are. The view names it with the tag
``stream_backfill.observed_writes`` (:func:`calibration_tags`). ``feast apply`` registers
both; ``feast-stream-backfill calibrate VIEW`` reads them back from the registry.

The requests are Feast's own feature logging: every feature service that serves the view and
logs to a ``FileLoggingDestination`` (``LoggingConfig``) is read as the view's served
requests (:func:`observed_serves`), under its projection's name and join-key mapping.
"""

from __future__ import annotations

from functools import reduce

import pyarrow.fs
from feast import FeatureStore, FileSource, StreamFeatureView
from feast.feature_logging import LOG_TIMESTAMP_FIELD
from feast.infra.offline_stores.file_source import FileLoggingDestination
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill import emission_store
from feast_stream_backfill.calibration import ObservedServes, ObservedWrites
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
) -> ObservedWrites | None:
    """The view's writes as declared (None: the view names none); a ``ValueError`` says what
    is wrong with a declaration."""
    where = f"stream feature view {view.name!r}"
    name = view.tags.get(OBSERVED_WRITES)
    if not name:
        return None
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
        return tags.get(PREFIX + option, default) or default or None

    renamed = {feature: column for column, feature in (source.field_mapping or {}).items()}
    return ObservedWrites(
        path=path if kind == "delta" else None,
        dataframe=None if kind == "delta" else spark.read.parquet(path),
        write_time=source.timestamp_field,
        processing_time=column("processing_time_column", ""),
        window_start=column("window_start_column", "window_start"),
        window_end=column("window_end_column", "window_end"),
        features=renamed,
    )


def view_calibration_path(store: FeatureStore, view: StreamFeatureView) -> str:
    """Where the view's calibration is kept: beside its emission log."""
    root = project_logs(store.config, store.config.project)
    if root is None:
        raise ValueError("the offline store keeps no emission logs (emission_log_path)")
    return emission_store.calibration_path(f"{root}/{view.name}")


def observed_serves(
    store: FeatureStore, view: StreamFeatureView, spark: SparkSession
) -> ObservedServes | None:
    """The requests Feast logged for the view, from every feature service that serves it and
    logs to files (None: none has logged yet). A feature service logging only some of the
    view's features is refused, named: a request is placed by all its values."""
    frames: list[DataFrame] = []
    keys = [c.name for c in view.entity_columns]
    features = [f.name for f in view.features if f.name not in keys]
    for service in store.list_feature_services():
        logging = service.logging_config
        if logging is None or not isinstance(logging.destination, FileLoggingDestination):
            continue
        for projection in service.feature_view_projections:
            if projection.name != view.name:
                continue
            logged = {f.name for f in projection.features}
            if not set(features) <= logged:
                raise ValueError(
                    f"feature service {service.name!r} logs {sorted(logged)} of view "
                    f"{view.name!r}; calibration compares all of {features}"
                )
            path = resolve_path(logging.destination.path, store.config.repo_path)
            if not _logged_yet(path):
                continue
            served = projection.name_to_use()
            frames.append(
                spark.read.parquet(path).select(
                    *(F.col(projection.join_key_map.get(k, k)).alias(k) for k in keys),
                    LOG_TIMESTAMP_FIELD,
                    *(
                        F.col(f"{served}__{f}{suffix}").alias(f"{view.name}__{f}{suffix}")
                        for f in features
                        for suffix in ("", "__status")
                    ),
                )
            )
    if not frames:
        return None
    return ObservedServes(view=view.name, dataframe=reduce(DataFrame.unionByName, frames))


def _logged_yet(path: str) -> bool:
    """Whether the destination exists (Feast creates it at the first logged request)."""
    files, root = pyarrow.fs.FileSystem.from_uri(path.replace("s3a://", "s3://", 1))
    return files.get_file_info(root).type != pyarrow.fs.FileType.NotFound
