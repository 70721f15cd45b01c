"""Archived Kafka records: one Delta table per topic, checked before anything is computed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from feast_stream_backfill.columns import EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.errors import BadArchiveError


@dataclass(frozen=True)
class RecordTransform:
    """A transformation of a topic's records as loaded, before anything reads them (a Feast
    udf): ``code`` identifies it (in the emission log's fingerprint), ``apply`` runs it."""

    code: str
    apply: Callable[[DataFrame], DataFrame] = field(compare=False, repr=False)


@dataclass(frozen=True)
class ArchivedTopic:
    """A Kafka topic archived as a table: partition, offset, event time, keys, payload.

    Give ``path`` (a Delta table, local or ``s3a://``) or, to use the core on any Spark data,
    ``dataframe``. ``out_of_orderness_ms`` overrides the job's B for this topic's partitions.
    ``transform`` is applied to the records as loaded: its output is the topic.
    """

    name: str
    path: str | None = None
    partition_col: str = "partition"
    offset_col: str = "offset"
    timestamp_col: str = "event_time"
    out_of_orderness_ms: int | None = None
    dataframe: DataFrame | None = field(default=None, compare=False, repr=False)
    transform: RecordTransform | None = None

    @property
    def where(self) -> str:
        return f"archived topic {self.name!r} ({self.path or 'DataFrame'})"

    def load(self, spark: SparkSession) -> DataFrame:
        records = self._read(spark)
        return records if self.transform is None else self.transform.apply(records)

    def _read(self, spark: SparkSession) -> DataFrame:
        if self.dataframe is not None:
            return self.dataframe
        if self.path is None:
            raise BadArchiveError(f"{self.where}: give a Delta table path or a DataFrame")
        try:
            return spark.read.format("delta").load(self.path)
        except Exception as exc:  # Spark raises AnalysisException with a long JVM trace
            raise BadArchiveError(f"{self.where}: cannot read it as a Delta table: {exc}") from exc


def read_records(
    spark: SparkSession, topic: ArchivedTopic, required: Sequence[str] = ()
) -> DataFrame:
    """The topic's records with normalized ``_topic, _partition, _offset, _et`` (epoch ms) added.

    Raises :class:`BadArchiveError` naming the table and column for a missing column, a
    timestamp that is not an instant (naive), null partition/offset/timestamp values, or an
    empty archive. This costs one pass over the table: cheap next to the backfill, and the
    only way to refuse bad data before it silently becomes wrong features.
    """
    df = topic.load(spark)
    columns = [topic.partition_col, topic.offset_col, topic.timestamp_col, *required]
    missing = [c for c in dict.fromkeys(columns) if c not in df.columns]
    if missing:
        raise BadArchiveError(
            f"{topic.where}: missing column(s) {missing}; the table has {df.columns}"
        )
    ts_type = df.schema[topic.timestamp_col].dataType
    if isinstance(ts_type, TimestampNTZType):
        raise BadArchiveError(
            f"{topic.where}: column {topic.timestamp_col!r} is a naive TIMESTAMP_NTZ; event "
            "times must be instants (TIMESTAMP, UTC), as Kafka's record timestamps are"
        )
    if not isinstance(ts_type, TimestampType):
        raise BadArchiveError(
            f"{topic.where}: column {topic.timestamp_col!r} has type {ts_type.simpleString()}, "
            "expected TIMESTAMP"
        )
    _check_not_empty_nor_null(df, topic, columns[:3])
    return df.select(
        F.lit(topic.name).alias(TOPIC),
        F.col(topic.partition_col).cast("int").alias(PARTITION),
        F.col(topic.offset_col).cast("long").alias(OFFSET),
        F.unix_millis(F.col(topic.timestamp_col)).alias(EVENT_TIME),
        *[F.col(c) for c in df.columns],
    )


def _check_not_empty_nor_null(df: DataFrame, topic: ArchivedTopic, columns: list[str]) -> None:
    def nulls(c: str) -> Column:
        return F.sum(F.col(c).isNull().cast("long")).alias(c)

    row = df.agg(F.count(F.lit(1)).alias("_rows"), *[nulls(c) for c in columns]).first()
    if row is None or row["_rows"] == 0:
        raise BadArchiveError(f"{topic.where}: the archive is empty, there is nothing to backfill")
    bad = {c: row[c] for c in columns if row[c]}
    if bad:
        detail = ", ".join(f"{n} null value(s) in column {c!r}" for c, n in bad.items())
        raise BadArchiveError(f"{topic.where}: {detail} (of {row['_rows']} records)")
