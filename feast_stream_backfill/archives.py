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

import hashlib
import posixpath
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal, Protocol

from delta.tables import DeltaTable
from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, LongType, StringType, TimestampType

from feast_stream_backfill.errors import BadArchiveError


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
        self._check_names([path for path, _, _ in _listing(files)])
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


#: A Hadoop ``FileStatus`` as its ``toString`` prints it: path, length, modification time.
_FILE_STATUS = re.compile(r"path=(.*?); isDirectory=false; length=(\d+);.*?modification_time=(\d+)")


def file_listing_digest(spark: SparkSession, folder: str, glob: str = "*") -> str | None:
    """A digest of every file under ``folder`` named ``glob``: paths, sizes, modification
    times, from Spark's own listing (:func:`_listing`): no Spark job, no call per file, so
    100k files cost a listing. None when the folder cannot be listed: the read says why."""
    reader = spark.read.format("binaryFile").options(
        recursiveFileLookup="true", pathGlobFilter=glob
    )
    try:
        files = sorted(_listing(reader.load(folder)))
    except Exception:  # AnalysisException: no such folder
        return None
    digest = hashlib.sha256(repr(files).encode()).hexdigest()
    return f"files:{len(files)}:{digest}"


def _listing(files: DataFrame) -> list[tuple[str, str, str]]:
    """``(path, length, modification time)`` of each file Spark listed for a file source's
    read, from its file index in one call to the JVM (pyspark's ``inputFiles()`` makes one
    per file: 4.7 s at 100k files)."""
    return _FILE_STATUS.findall(_file_index(files).allFiles().mkString("\n"))


def _file_index(files: DataFrame):  # a py4j JavaObject
    """The file index of the file source ``files`` reads (through projections of it)."""
    return files._jdf.queryExecution().analyzed().collectLeaves().head().relation().location()


#: Spark's setting that reads ``INT64 TIMESTAMP(NANOS, ...)`` as bigint instead of refusing
#: it. It is session-wide: :func:`read_parquet` sets it only while Spark infers a schema.
NANOS_AS_LONG = "spark.sql.legacy.parquet.nanosAsLong"
_NANOS_SETTING = threading.Lock()
#: The rewrite that gives Spark microsecond timestamps, for the messages.
_MICROSECONDS = (
    "write them as microseconds (pandas: to_parquet(..., coerce_timestamps='us', "
    "allow_truncated_timestamps=True); pyarrow: pq.write_table(..., coerce_timestamps='us'))"
)


@dataclass(frozen=True)
class ParquetColumn:
    """A leaf of a parquet file's schema as its footer declares it: ``path`` from the top-level
    column down, physical type (``INT64``), logical type (``TIMESTAMP(NANOS,true)``) if any."""

    path: tuple[str, ...]
    physical: str
    logical: str | None

    @property
    def name(self) -> str:
        return ".".join(self.path)

    @property
    def declared(self) -> str:
        return self.physical if self.logical is None else f"{self.physical} ({self.logical})"

    @property
    def nanos(self) -> bool:
        return (self.logical or "").startswith("TIMESTAMP(NANOS,")

    @property
    def instant(self) -> bool:
        """A timestamp adjusted to UTC (pandas: timezone-aware), not a wall-clock time."""
        return (self.logical or "").endswith(",true)")

    def unreadable(self) -> str | None:
        """Why Spark cannot read this column and what to write instead, or None."""
        logical = self.logical or ""
        if logical.startswith("TIME("):
            return (
                "a time of day, which Spark has no type for: write it as a string or as an "
                "integer (e.g. microseconds since midnight)"
            )
        if logical == "UUID":
            return "a UUID, which Spark has no type for: write it as a string"
        if logical == "FLOAT16":
            return "a half-precision float, which Spark has no type for: write it as a float32"
        found = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", logical)
        if found and int(found[1]) > 38:
            return (
                f"a decimal of {found[1]} digits, Spark's hold 38 at most: write it as "
                f"decimal(38,{found[2]}) or as a double"
            )
        if self.nanos and len(self.path) > 1:
            return (
                "nanosecond timestamps inside a struct, list or map, which Spark reads only as "
                f"numbers: {_MICROSECONDS}"
            )
        return None


def read_parquet(
    spark: SparkSession,
    path: str,
    options: Mapping[str, str] | None = None,
    schema: str | None = None,
    *,
    naive_as_utc: bool = False,
) -> DataFrame:
    """Parquet files as Spark reads them, including as pandas and pyarrow write them by
    default: with nanosecond timestamps (``INT64 TIMESTAMP(NANOS, ...)``), which Spark refuses.

    Spark infers the schema with :data:`NANOS_AS_LONG` set (such columns become bigint) and
    the setting is then put back as it was: it is session-wide, and left on it would turn
    other reads' nanosecond timestamps into numbers instead of an error. The read keeps that
    schema, so Spark reads those columns as bigint whatever the setting says later. The footer
    of the file Spark inferred the schema from (the first by path) says which bigint columns
    are nanosecond timestamps: they become TIMESTAMP (timezone-aware ones; naive ones too when
    ``naive_as_utc``, Feast's reading of a naive time) or TIMESTAMP_NTZ (naive ones, as Spark
    reads naive microsecond timestamps), truncated to the microsecond, Spark's precision.
    ``schema`` (Spark DDL) is used as given, with no inference.

    Raises :class:`BadArchiveError` naming the file, the column and what to write instead for
    a column Spark cannot read (nested nanosecond timestamps, times of day, UUIDs, ...)."""
    reader = spark.read.format("parquet").options(**(options or {}))
    if schema is not None:
        try:
            return reader.schema(schema).load(path)
        except AnalysisException as exc:
            raise BadArchiveError(f"cannot read the parquet files at {path}: {exc}") from exc
    try:
        with _nanos_as_long(spark):
            frame = reader.load(path)
    except PySparkException as exc:  # inferring reads a footer in a task: any Spark error
        raise _unreadable(spark, path, options or {}, exc) from exc
    if "bigint" not in frame.schema.simpleString():  # nothing can be a nanosecond timestamp
        return frame
    first = min(file for file, _, _ in _listing(frame))
    columns = parquet_columns(spark, first, options or {})
    refused = [c for c in columns if c.unreadable()]
    if refused:
        raise _refusal(first, refused)
    nanos = {c.name: c for c in columns if c.nanos and c.name in frame.columns}
    return frame.withColumns(
        {
            name: _from_nanos(name, column.instant or naive_as_utc)
            for name, column in nanos.items()
            if isinstance(frame.schema[name].dataType, LongType)
        }
    )


@contextmanager
def _nanos_as_long(spark: SparkSession) -> Iterator[None]:
    """:data:`NANOS_AS_LONG` on for the block, then as it was (set or not)."""
    with _NANOS_SETTING:
        before = spark.conf.getAll.get(NANOS_AS_LONG)
        spark.conf.set(NANOS_AS_LONG, "true")
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(NANOS_AS_LONG)
            else:
                spark.conf.set(NANOS_AS_LONG, before)


def _from_nanos(name: str, instant: bool) -> Column:
    """Nanoseconds since the epoch as a timestamp, floored to the microsecond (exactly: a
    double would round nanoseconds of today's instants to 256)."""
    micros = F.floor(F.col(name).cast("decimal(20,0)") / 1000).cast("long")
    if instant:
        return F.timestamp_micros(micros)
    epoch = F.lit("1970-01-01 00:00:00").cast("timestamp_ntz")
    return epoch + micros * F.expr("INTERVAL '0.000001' SECOND")


def parquet_columns(
    spark: SparkSession, file: str, options: Mapping[str, str] | None = None
) -> list[ParquetColumn]:
    """Every leaf column of one parquet file's footer, read by the JVM's parquet reader with
    the session's Hadoop settings (and ``options``), so wherever Spark can read the file."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    for key, value in (options or {}).items():
        conf.set(key, value)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(file)
    source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf)
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
    try:
        schema = reader.getFooter().getFileMetaData().getSchema()
    finally:
        reader.close()
    return list(_leaves(schema, ()))


def _leaves(group, prefix: tuple[str, ...]) -> Iterator[ParquetColumn]:  # group: py4j
    for i in range(group.getFieldCount()):
        field = group.getType(i)
        path = (*prefix, field.getName())
        if field.isPrimitive():
            logical = field.getLogicalTypeAnnotation()
            physical = field.asPrimitiveType().getPrimitiveTypeName().toString()
            yield ParquetColumn(path, physical, None if logical is None else logical.toString())
        else:
            yield from _leaves(field.asGroupType(), path)


def _refusal(file: str, refused: list[ParquetColumn]) -> BadArchiveError:
    listed = "; ".join(f"column {c.name!r} is {c.declared}, {c.unreadable()}" for c in refused)
    return BadArchiveError(f"Spark cannot read parquet file {file}: {listed}")


def _unreadable(
    spark: SparkSession, path: str, options: Mapping[str, str], exc: PySparkException
) -> BadArchiveError:
    """Why Spark could not infer the schema: the columns it cannot read, from the footer of
    the first file by path (the one it read), or Spark's own message."""
    reason = str(exc).splitlines()[0]
    try:
        listed = _reader_listing(spark, path, options)
    except AnalysisException:  # no such path: Spark's message says so
        listed = []
    if listed:
        first = min(listed)
        refused = [c for c in parquet_columns(spark, first, options) if c.unreadable()]
        if refused:
            return _refusal(first, refused)
    return BadArchiveError(f"cannot read the parquet files at {path}: {reason}")


def _reader_listing(spark: SparkSession, path: str, options: Mapping[str, str]) -> list[str]:
    """The files a file source's read of ``path`` with ``options`` lists (no data read)."""
    listing = spark.read.format("binaryFile").options(**options).load(path)
    return [file for file, _, _ in _listing(listing)]
