"""Files as Spark lists and reads them: listings (an archive's version) and parquet.

A folder's files are listed from Spark's own file index in one call (:func:`file_listing_digest`).
pandas and pyarrow write nanosecond timestamps by default, which Spark refuses; every
parquet read of the plugin (archives in a sink connector's files or at a path, entity
dataframes, state tables) goes through :func:`read_parquet`, which reads them exactly and
names a column it cannot read, with its file and the rewrite that fixes it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.errors import AnalysisException, PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from feast_stream_backfill.errors import BadArchiveError

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
    first = min(file for file, _, _ in listed_files(frame))
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
    return [file for file, _, _ in listed_files(listing)]


#: A Hadoop ``FileStatus`` as its ``toString`` prints it: path, length, modification time.
_FILE_STATUS = re.compile(r"path=(.*?); isDirectory=false; length=(\d+);.*?modification_time=(\d+)")


def file_listing_digest(spark: SparkSession, folder: str, glob: str = "*") -> str | None:
    """A digest of every file under ``folder`` named ``glob``: paths, sizes, modification
    times, from Spark's own listing (:func:`listed_files`): no Spark job, no call per file, so
    100k files cost a listing. None when the folder cannot be listed: the read says why."""
    reader = spark.read.format("binaryFile").options(
        recursiveFileLookup="true", pathGlobFilter=glob
    )
    try:
        files = sorted(listed_files(reader.load(folder)))
    except Exception:  # AnalysisException: no such folder
        return None
    digest = hashlib.sha256(repr(files).encode()).hexdigest()
    return f"files:{len(files)}:{digest}"


def listed_files(files: DataFrame) -> list[tuple[str, str, str]]:
    """``(path, length, modification time)`` of each file Spark listed for a file source's
    read, from its file index in one call to the JVM (pyspark's ``inputFiles()`` makes one
    per file)."""
    return _FILE_STATUS.findall(_file_index(files).allFiles().mkString("\n"))


def _file_index(files: DataFrame):  # a py4j JavaObject
    """The file index of the file source ``files`` reads (through projections of it)."""
    return files._jdf.queryExecution().analyzed().collectLeaves().head().relation().location()
