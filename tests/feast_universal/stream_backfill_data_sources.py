"""Feast's ``DataSourceCreator`` for this plugin: its universal tests build sources through it.

Imported by Feast's test harness (``sdk/python/tests`` of Feast's source, on ``sys.path`` as
``tests``), never by this repo's own suite. Parquet sources reuse Feast's ``FileDataSourceCreator``
(a single parquet file per source, as for Feast's file store); Delta sources are written by Spark
with delta-spark, as a user of this plugin writes them (not by the ``deltalake`` package, which the
plugin does not install). Emission logs go in a temp folder removed at teardown.
"""

from __future__ import annotations

import shutil
import tempfile

import pandas as pd
import pyarrow as pa
from feast import FileSource
from feast.data_format import DeltaFormat
from feast.data_source import DataSource
from feast.infra.offline_stores.file_source import SavedDatasetFileStorage
from tests.universal.feature_repos.universal.data_sources.file import FileDataSourceCreator

from feast_stream_backfill.feast_plugin.offline_store import StreamBackfillOfflineStoreConfig
from feast_stream_backfill.spark import get_spark

#: Small local Spark: the universal data is a few thousand rows, the machine may be shared.
SPARK_CONF = {
    "spark.master": "local[2]",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}


class StreamBackfillDataSourceCreator(FileDataSourceCreator):
    """Parquet ``FileSource``s read by the plugin's offline store."""

    def __init__(self, project_name: str, *args, **kwargs) -> None:
        super().__init__(project_name, *args, **kwargs)
        self.emission_log_root = tempfile.mkdtemp(prefix=f"{project_name}_emission_log_")

    def create_offline_store_config(self) -> StreamBackfillOfflineStoreConfig:
        return StreamBackfillOfflineStoreConfig(
            emission_log_path=self.emission_log_root, spark_conf=SPARK_CONF
        )

    def teardown(self) -> None:
        super().teardown()
        shutil.rmtree(self.emission_log_root, ignore_errors=True)


class StreamBackfillDeltaDataSourceCreator(StreamBackfillDataSourceCreator):
    """Delta ``FileSource``s written by Spark; saved datasets are Delta too."""

    def create_data_source(
        self,
        df: pd.DataFrame,
        destination_name: str,
        created_timestamp_column="created_ts",
        field_mapping: dict[str, str] | None = None,
        timestamp_field: str | None = "ts",
    ) -> DataSource:
        path = tempfile.mkdtemp(prefix=f"{self.get_prefixed_table_name(destination_name)}_")
        self.dirs.append(path)
        spark = get_spark(SPARK_CONF)
        table = pa.Table.from_pandas(df, preserve_index=False)
        spark.createDataFrame(table).write.format("delta").mode("overwrite").save(path)
        return FileSource(
            file_format=DeltaFormat(),
            path=path,
            timestamp_field=timestamp_field,
            created_timestamp_column=created_timestamp_column,
            field_mapping=field_mapping or {"ts_1": "ts"},
        )

    def create_saved_dataset_destination(self) -> SavedDatasetFileStorage:
        path = tempfile.mkdtemp(prefix=self.project_name)
        self.dirs.append(path)
        return SavedDatasetFileStorage(path=path, file_format=DeltaFormat())
