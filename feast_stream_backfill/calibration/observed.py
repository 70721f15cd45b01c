"""What the live job wrote: its output topic as archived, one row per write.

A sink that writes windowed features usually writes the key, the window's bounds and the
values; the topic's record timestamp (Kafka's ``LogAppendTime``) or a column the job adds says
when. Some jobs also stamp the firing's own processing time (``ctx.currentProcessingTime()``
in a ``ProcessWindowFunction``): with it, the delay from firing to write (D3) is told apart
from how late the job read its records (D2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import NumericType, TimestampNTZType, TimestampType

from feast_stream_backfill.archives import Archive, DataFrameArchive, DeltaArchive
from feast_stream_backfill.errors import BadArchiveError

#: The columns :meth:`ObservedWrites.read` gives, besides the job's keys and features.
WRITE_MS, STAMP_MS, START_MS, END_MS = "_write_ms", "_stamp_ms", "_start_ms", "_end_ms"


@dataclass(frozen=True)
class ObservedWrites:
    """The live job's writes: a Delta table at ``path`` or a ``dataframe``.

    ``write_time``: when each value was written (a TIMESTAMP); ``processing_time``: the job's
    own stamp of its firing, where its sink writes one (None: not written); ``window_start`` and
    ``window_end``: the window's bounds (``window_end`` may be None where the sink writes the
    start alone); ``features``: the table's column per feature of the job, where they are named
    otherwise (a feature not mapped is read from the column of its own name)."""

    path: str | None = None
    dataframe: DataFrame | None = field(default=None, compare=False, repr=False)
    write_time: str = "write_time"
    processing_time: str | None = None
    window_start: str = "window_start"
    window_end: str | None = "window_end"
    features: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        table_of(self.path, self.dataframe, "observed writes")

    @property
    def archive(self) -> Archive:
        return table_of(self.path, self.dataframe, "observed writes")

    @property
    def where(self) -> str:
        return f"observed writes {self.archive.where}"

    def read(self, spark: SparkSession, keys: Sequence[str], features: Sequence[str]) -> DataFrame:
        """The writes with the job's key and feature names, and epoch-ms :data:`WRITE_MS`,
        :data:`STAMP_MS` (null without a stamp), :data:`START_MS`, :data:`END_MS` (null without
        an end). A missing column, one of the wrong type, or a null write time is refused,
        named."""
        source = {feature: self.features.get(feature, feature) for feature in features}
        times = [self.write_time, self.window_start]
        times += [c for c in (self.processing_time, self.window_end) if c is not None]
        df = read_checked(spark, self.archive, self.where, keys, times, list(source.values()))
        nulls = df.filter(F.col(self.write_time).isNull()).count()
        if nulls:
            raise BadArchiveError(
                f"{self.where}: {nulls:,} write(s) with a null {self.write_time!r}: when each "
                "value was written is what calibration compares"
            )
        return df.select(
            *keys,
            *(F.col(column).alias(feature) for feature, column in source.items()),
            _ms(self.write_time).alias(WRITE_MS),
            (_ms(self.processing_time) if self.processing_time else F.lit(None).cast("long")).alias(
                STAMP_MS
            ),
            _ms(self.window_start).alias(START_MS),
            (_ms(self.window_end) if self.window_end else F.lit(None).cast("long")).alias(END_MS),
        )


def table_of(path: str | None, dataframe: DataFrame | None, what: str) -> Archive:
    """The live job's table given by ``path`` (Delta) or ``dataframe``: exactly one."""
    if (path is None) == (dataframe is None):
        raise ValueError(f"{what} need a path or a DataFrame, exactly one")
    return DeltaArchive(path) if path else DataFrameArchive(dataframe)


def read_checked(
    spark: SparkSession,
    archive: Archive,
    where: str,
    keys: Sequence[str],
    times: Sequence[str],
    values: Sequence[str],
) -> DataFrame:
    """The table, refused (named) where a key, time or value column is missing, a time is
    not a timestamp or a value not a number."""
    try:
        df = archive.read(spark)
    except BadArchiveError as exc:
        raise BadArchiveError(f"{where}: {exc}") from exc
    missing = [c for c in [*keys, *values, *times] if c not in df.columns]
    if missing:
        raise BadArchiveError(f"{where}: no column {missing[0]!r} (it has {sorted(df.columns)})")
    for column in times:
        kind = df.schema[column].dataType
        if not isinstance(kind, TimestampType | TimestampNTZType):
            raise BadArchiveError(
                f"{where}: column {column!r} is {kind.simpleString()}, not a timestamp"
            )
    for column in values:
        kind = df.schema[column].dataType
        if not isinstance(kind, NumericType):
            raise BadArchiveError(
                f"{where}: feature column {column!r} is {kind.simpleString()}, not a number"
            )
    return df


def _ms(column: str) -> Column:
    return F.unix_millis(F.col(column).cast("timestamp"))
