"""Where a topic's archived records are and how they are read: one small class per layout.

Teams keep Kafka archives in several shapes; each class here reads one shape into a DataFrame
with the topic's columns (partition, offset, event time, payload), which
:class:`~feast_stream_backfill.records.ArchivedTopic` then checks and normalizes the same way
whatever the layout. Each also says which version of its data it read (:meth:`version`), so a
stored emission log is reused only while the archive is unchanged
(:func:`feast_stream_backfill.emission_store.fingerprint`).

- :class:`DeltaArchive`: a Delta table by path (the original layout).
- :class:`DataFrameArchive`: any Spark DataFrame (no version: the log is always recomputed).
- :class:`SinkConnectorArchive`: the files a Kafka Connect object-storage sink (Confluent's
  S3 / GCS sink) leaves, ``topics/<topic>/.../<topic>+<partition>+<startOffset>.<ext>``.
- :class:`TableArchive`: a table of the session's catalog (Hive, Iceberg, Delta by name, ...)
  or a path with a Spark format (parquet, orc, ...).

Parquet is read by :func:`read_parquet`, which also reads what pandas and pyarrow write by
default (nanosecond timestamps, which Spark refuses).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StringType, TimestampType

from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.files import file_listing_digest, listed_files, read_parquet


class Archive(Protocol):
    """Where a topic's records are and how they are read."""

    @property
    def where(self) -> str:
        """The archive as an error message names it (a path, a table name)."""
        ...

    def read(self, spark: SparkSession) -> DataFrame:
        """The records, lazily: partition, offset and event-time columns and the payload.
        Raises :class:`BadArchiveError` (without the topic's name) when they cannot be read."""
        ...

    def version(self, spark: SparkSession) -> str | None:
        """What identifies the data read now (a table version, a file listing's digest);
        None when nothing tells whether it changed."""
        ...


@dataclass(frozen=True)
class DeltaArchive:
    """A Delta table (local or ``s3a://``); its version is Delta's commit version.

    ``as_of`` reads that commit version (time travel) rather than the latest: a DataFrame over
    the latest version reads whatever is the latest at each Spark action, so a backfill's
    actions could otherwise see different versions
    (:func:`~feast_stream_backfill.emission_store.pinned`)."""

    path: str
    as_of: int | None = None

    @property
    def where(self) -> str:
        return self.path if self.as_of is None else f"{self.path} at version {self.as_of}"

    def read(self, spark: SparkSession) -> DataFrame:
        reader = spark.read.format("delta")
        if self.as_of is not None:
            reader = reader.option("versionAsOf", self.as_of)
        try:
            return reader.load(self.path)
        except Exception as exc:  # Spark raises AnalysisException with a long JVM trace
            raise BadArchiveError(f"cannot read it as a Delta table: {exc}") from exc

    def version(self, spark: SparkSession) -> str | None:
        if self.as_of is not None:
            return f"delta:{self.as_of}"
        return f"delta:{DeltaTable.forPath(spark, self.path).history(1).first()['version']}"

    def pinned(self, version: str) -> DeltaArchive:
        """This table at ``version`` (what :meth:`version` said)."""
        return DeltaArchive(self.path, int(version.removeprefix("delta:")))


@dataclass(frozen=True)
class DataFrameArchive:
    """Any Spark DataFrame already holding the topic's columns."""

    dataframe: DataFrame = field(compare=False, repr=False)

    @property
    def where(self) -> str:
        return "DataFrame"

    def read(self, spark: SparkSession) -> DataFrame:
        return self.dataframe

    def version(self, spark: SparkSession) -> str | None:
        return None


SinkFormat = Literal["json", "parquet", "avro"]
#: Spark's data source per sink format. Spark 4.2 has Avro's reader and writer built in
#: (``spark-sql``) but registers the name ``avro`` only with the spark-avro jar, which Maven
#: Central has no 4.2 build of: the class name needs no jar.
SPARK_FORMATS = {
    "json": "json",
    "parquet": "parquet",
    "avro": "org.apache.spark.sql.avro.AvroFileFormat",
}
#: Formats whose Spark reader gives each row's place in its file (``_metadata.row_index``).
_ROW_INDEX_FORMATS = ("parquet",)


@dataclass(frozen=True)
class SinkConnectorArchive:
    """The files a Kafka Connect object-storage sink wrote for one topic.

    Confluent's S3 / GCS sink writes ``<root>/<topics_dir>/<topic>/<encoded partition>/
    <topic>+<kafkaPartition>+<startOffset>.<ext>``, one file per flush, the records in offset
    order; ``format`` is ``"json"`` (JSON lines, ``.json`` or ``.json.gz``), ``"parquet"`` or
    ``"avro"``. Every file under the topic's folder whose name starts ``<topic>+`` is read,
    whatever the partitioner's folders (default, field- or time-based), in one distributed
    read; Spark lists them (``s3a://`` too) and the listing is the only driver-side work.

    The result has the payload fields, ``partition`` (from the file name, replacing a stored
    field of that name) and ``offset``:
    the field ``offset_field`` when an ``InsertField`` transform stored the Kafka offset
    (``offset.field``), otherwise the file's start offset plus the row's place in the file.
    The latter is exact only when a file's offsets are contiguous: with compaction or
    transactions (offset holes inside a flush) store the offset. Holes between files are fine
    either way. Files a connector restart wrote twice hold the same offsets: the backfill
    counts identical copies once and refuses copies that differ.

    ``timestamp_field`` names a field to turn into a TIMESTAMP: epoch milliseconds (how
    Connect's JsonConverter writes a ``Timestamp``, e.g. InsertField's ``timestamp.field``,
    the Kafka record's timestamp) or an ISO-8601 string. Avro and Parquet carry timestamps
    as such. ``schema`` (a Spark DDL string) skips JSON's schema inference, a full pass.
    """

    root: str
    topic: str
    format: SinkFormat
    topics_dir: str = "topics"
    offset_field: str | None = None
    timestamp_field: str | None = None
    schema: str | None = None

    def __post_init__(self) -> None:
        if self.format not in ("json", "parquet", "avro"):
            raise ValueError(f"sink format must be json, parquet or avro, got {self.format!r}")

    @property
    def folder(self) -> str:
        return posixpath.join(self.root.rstrip("/"), self.topics_dir, self.topic)

    @property
    def where(self) -> str:
        return f"{self.format} sink-connector files under {self.folder}"

    @property
    def _glob(self) -> str:
        return f"{self.topic}+*+*"

    def read(self, spark: SparkSession) -> DataFrame:
        options = {"recursiveFileLookup": "true", "pathGlobFilter": self._glob}
        if self.format == "parquet":
            files = read_parquet(spark, self.folder, options, self.schema)
        else:
            files = self._read_files(spark, options)
        self._check_names([path for path, _, _ in listed_files(files)])
        payload = files.columns
        if self.offset_field is None and "offset" in payload:
            raise BadArchiveError(
                "the records have a field 'offset': if it is the Kafka offset, stored by an "
                "InsertField transform, name it as offset_field"
            )
        if self.offset_field is not None and self.offset_field not in payload:
            raise BadArchiveError(f"offset_field {self.offset_field!r} is not in {payload}")
        name = F.col("_metadata.file_name")
        pattern = rf"^\Q{self.topic}\E\+(\d+)\+(\d+)\."
        located = files.select(
            *payload,
            F.regexp_extract(name, pattern, 1).cast("int").alias("_sink_partition"),
            F.regexp_extract(name, pattern, 2).cast("long").alias("_sink_start"),
            *self._row_position(),
        )
        if self.offset_field is None:
            offset = F.col("_sink_start") + self._row_index(located)
        else:
            offset = F.col(self.offset_field).cast("long")
        kept = [c for c in payload if c not in ("partition", "offset")]
        return located.select(
            F.col("_sink_partition").alias("partition"),
            offset.alias("offset"),
            *[self._converted(located, c) for c in kept],
        )

    def _read_files(self, spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
        reader = spark.read.format(SPARK_FORMATS[self.format]).options(**options)
        if self.format == "json":
            reader = reader.option("mode", "FAILFAST")
        if self.schema is not None:
            reader = reader.schema(self.schema)
        try:
            return reader.load(self.folder)
        except Exception as exc:
            raise BadArchiveError(f"cannot read the files (are there any?): {exc}") from exc

    def _check_names(self, paths: list[str]) -> None:
        """The listing Spark made: every file is named ``<topic>+<partition>+<offset>.``."""
        if not paths:
            raise BadArchiveError(f"no file named {self._glob} under {self.folder}")
        pattern = re.compile(rf"{re.escape(self.topic)}\+\d+\+\d+\.")
        bad = [p for p in paths if not pattern.match(posixpath.basename(p))]
        if bad:
            raise BadArchiveError(
                f"{len(bad)} file(s) not named <topic>+<partition>+<startOffset>.<ext> as a "
                f"sink connector names them, e.g. {bad[0]}"
            )

    def _row_position(self) -> list[Column]:
        """What places a row in its file: Spark's row index where the reader gives one, else
        the file, the split's start and the row's order within its task (rows of one split
        are read in file order by one task)."""
        if self.format in _ROW_INDEX_FORMATS:
            return [F.col("_metadata.row_index").alias("_sink_row")]
        return [
            F.col("_metadata.file_path").alias("_sink_file"),
            F.col("_metadata.file_block_start").alias("_sink_block"),
            F.monotonically_increasing_id().alias("_sink_order"),
        ]

    def _row_index(self, located: DataFrame) -> Column:
        if "_sink_row" in located.columns:
            return F.col("_sink_row")
        in_file = Window.partitionBy("_sink_file").orderBy("_sink_block", "_sink_order")
        return F.row_number().over(in_file) - 1

    def _converted(self, df: DataFrame, column: str) -> Column:
        if column != self.timestamp_field:
            return F.col(column)
        kind = df.schema[column].dataType
        if isinstance(kind, IntegralType):
            return F.timestamp_millis(F.col(column)).alias(column)
        if isinstance(kind, StringType):
            # Unparsable text becomes null, which read_records reports with its place.
            return F.try_to_timestamp(F.col(column)).alias(column)
        if isinstance(kind, TimestampType):
            return F.col(column)
        raise BadArchiveError(
            f"timestamp_field {column!r} has type {kind.simpleString()}: expected epoch "
            "milliseconds, an ISO-8601 string or a timestamp"
        )

    def version(self, spark: SparkSession) -> str | None:
        return file_listing_digest(spark, self.folder, self._glob)


@dataclass(frozen=True)
class TableArchive:
    """A table the session's catalog knows (``table``: Hive, Iceberg, Delta by name, ...) or
    a path read with a Spark ``format`` (``"parquet"``, ``"orc"``, ``"delta"``, ``"avro"``
    (Spark's built-in class, see :data:`SPARK_FORMATS`), ...) and reader ``options``.

    Version: Delta's commit version for Delta tables, otherwise a digest of the files under
    the table's location (names, sizes, modification times); None for a catalog object
    without a location (a view): its log is then recomputed on every use.
    """

    table: str | None = None
    path: str | None = None
    format: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.table is None) == (self.path is None):
            raise ValueError("a TableArchive needs a table name or a path, not both")
        if self.path is not None and self.format is None:
            raise ValueError(f"a TableArchive at {self.path!r} needs its format (parquet, ...)")
        object.__setattr__(self, "options", dict(self.options))  # equal however given

    @property
    def where(self) -> str:
        return f"table {self.table}" if self.table else f"{self.format} table at {self.path}"

    def read(self, spark: SparkSession) -> DataFrame:
        try:
            if self.table is not None:
                return spark.read.options(**self.options).table(self.table)
            if self.format == "parquet":
                return read_parquet(spark, self.path, self.options)
            reader = spark.read.format(SPARK_FORMATS.get(self.format, self.format))
            return reader.options(**self.options).load(self.path)
        except BadArchiveError:
            raise
        except Exception as exc:
            raise BadArchiveError(f"cannot read it: {exc}") from exc

    def version(self, spark: SparkSession) -> str | None:
        if self.path is not None:
            if self.format == "delta":
                return DeltaArchive(self.path).version(spark)
            return file_listing_digest(spark, self.path)
        details = {
            row["col_name"]: row["data_type"]
            for row in spark.sql(f"DESCRIBE TABLE EXTENDED {self.table}").collect()
        }
        if details.get("Provider", "").lower() == "delta":
            last = DeltaTable.forName(spark, self.table).history(1).first()
            return f"delta:{last['version']}"
        location = details.get("Location")
        return None if not location else file_listing_digest(spark, location)
