"""Archived Kafka records, in any layout of :mod:`~feast_stream_backfill.archives`: their
schema checked when read, their values on the first pass over them, before any result is
written."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    NumericType,
    ShortType,
    TimestampNTZType,
    TimestampType,
)

from feast_stream_backfill.archives import Archive, DataFrameArchive, DeltaArchive
from feast_stream_backfill.columns import EVENT_TIME, OFFSET, PARTITION, TOPIC
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.stages import stage


@dataclass(frozen=True)
class RecordTransform:
    """A transformation of a topic's records as loaded, before anything reads them (a Feast
    udf): ``code`` identifies it (in the emission log's fingerprint), ``apply`` runs it."""

    code: str
    apply: Callable[[DataFrame], DataFrame] = field(compare=False, repr=False)


@dataclass(frozen=True)
class ArchivedTopic:
    """A Kafka topic's archived records: partition, offset, event time, keys, payload.

    Where they are, one of: ``path`` (a Delta table, local or ``s3a://``); ``archive``, any
    layout of :mod:`feast_stream_backfill.archives`::

        ArchivedTopic("transactions", path="s3a://bucket/transactions")            # Delta
        ArchivedTopic("transactions", archive=SinkConnectorArchive(
            "s3a://bucket", "transactions", "json", timestamp_field="event_time"))
        ArchivedTopic("transactions", archive=TableArchive(table="kafka.transactions"))
        ArchivedTopic("transactions", archive=TableArchive(path="/x", format="parquet"))

    or, to use the core on any Spark data, ``dataframe``. The columns named by
    ``partition_col``, ``offset_col`` and ``timestamp_col`` (a TIMESTAMP) must be in what the
    archive reads. ``out_of_orderness_ms`` overrides the job's B for this topic's partitions.
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
    archive: Archive | None = None

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.path, self.dataframe, self.archive)) > 1:
            raise ValueError(
                f"archived topic {self.name!r}: give a path, an archive or a DataFrame"
            )

    @property
    def source(self) -> Archive | None:
        """Where the records are (None when nothing was given)."""
        if self.archive is not None:
            return self.archive
        if self.dataframe is not None:
            return DataFrameArchive(self.dataframe)
        return None if self.path is None else DeltaArchive(self.path)

    @property
    def where(self) -> str:
        source = self.source
        return f"archived topic {self.name!r} ({'DataFrame' if source is None else source.where})"

    def load(self, spark: SparkSession) -> DataFrame:
        records = self._read(spark)
        return records if self.transform is None else self.transform.apply(records)

    def _read(self, spark: SparkSession) -> DataFrame:
        source = self.source
        if source is None:
            raise BadArchiveError(
                f"{self.where}: give a Delta table path, an archive or a DataFrame"
            )
        try:
            return source.read(spark)
        except BadArchiveError as exc:
            raise BadArchiveError(f"{self.where}: {exc}") from exc


#: Kafka's partitions are int32 and its offsets int64: any narrower integer type holds them.
_INTEGERS = (ByteType, ShortType, IntegerType, LongType)
_PARTITION_MAX = 2**31 - 1


def read_records(
    spark: SparkSession,
    topic: ArchivedTopic,
    required: Sequence[str] = (),
    *,
    keys: Sequence[str] = (),
    numeric: Sequence[str] = (),
) -> DataFrame:
    """The topic's records with normalized ``_topic, _partition, _offset, _et`` (epoch ms) added.

    Raises :class:`BadArchiveError` naming the table and column for a missing column, a
    timestamp that is not an instant (naive), a partition or offset column that is not an
    integer, a ``numeric`` column (summed or averaged) that is not a number, null
    partition/offset/timestamp values, null ``keys`` (Flink's ``keyBy`` fails the job on a
    null key; the caller leaves them out when the job drops such records), negative
    partitions or offsets, or an empty archive; value problems with their count and the first
    record's partition and offset. The value checks cost a pass over the table here;
    :func:`observed_records` makes them ride on the caller's own first pass.
    """
    records, checks = observed_records(spark, topic, required, keys=keys, numeric=numeric)
    with stage("validation"):
        checks.observe(records).count()
    checks.verify()
    return records


@dataclass
class RecordChecks:
    """A topic's value checks (:func:`read_records`) on its normalized ``records``, counted as
    Spark observed metrics: an aggregate taken while an action reads the records, at no pass
    of its own, so that refusing bad data before it silently becomes wrong features costs
    next to nothing. Only when a problem is found is a pass spent, to name where it first is.
    ``problems``: (what, the records it affects)."""

    where: str
    topic: str
    records: DataFrame
    problems: list[tuple[str, Column]]
    observation: Observation = field(default_factory=Observation)

    def observe(self, records: DataFrame) -> DataFrame:
        """``records`` (any records with the normalized columns, the topic's among them) with
        the checks observed on the topic's; call :meth:`verify` after an action reads them."""
        mine = F.col(TOPIC) == self.topic
        return records.observe(
            self.observation,
            F.count_if(mine).alias("_rows"),
            *[F.count_if(mine & bad).alias(f"_n{i}") for i, (_, bad) in enumerate(self.problems)],
        )

    def verify(self) -> None:
        """Raise :class:`BadArchiveError` for every problem found, or an empty archive. Call
        it after the first action that read every record (it waits for that action)."""
        found = dict(self.observation.get)
        first = [_first_at(bad, i) for i, (_, bad) in enumerate(self.problems) if found[f"_n{i}"]]
        if found["_rows"] and first:
            found |= self.records.agg(*first).first().asDict()
        _refuse(self.where, found, [what for what, _ in self.problems])

    def refuse_problems(self) -> None:
        """:meth:`verify` by a pass of its own that counts every problem and names the first,
        for a caller that does not observe the checks: the observed metrics stop Spark's
        generated code, which cost a pass without a sort half its time (1.2-2.8 s at 16M
        records), so that caller reads the signs of a problem from its own aggregates and
        spends this pass only where it sees one."""
        counted = [F.count_if(bad).alias(f"_n{i}") for i, (_, bad) in enumerate(self.problems)]
        first = [_first_at(bad, i) for i, (_, bad) in enumerate(self.problems)]
        found = self.records.agg(F.count(F.lit(1)).alias("_rows"), *counted, *first).first()
        _refuse(self.where, found.asDict(), [what for what, _ in self.problems])


def _first_at(bad: Column, i: int) -> Column:
    """The partition and offset of the first record of problem ``i`` (``bad``), as ``_at<i>``."""
    place = F.struct(F.col(PARTITION).alias("partition"), F.col(OFFSET).alias("offset"))
    return F.min(F.when(bad, place)).alias(f"_at{i}")


def _refuse(where: str, found: Mapping, problems: Sequence[str]) -> None:
    """``found``: ``_rows``, and per problem ``i`` its count ``_n<i>`` and first place."""
    if not found.get("_rows"):
        raise BadArchiveError(f"{where}: the archive is empty, there is nothing to backfill")
    listed = [
        f"{found[f'_n{i}']} {what} (of {found['_rows']} records), e.g. partition "
        f"{found[f'_at{i}']['partition']} offset {found[f'_at{i}']['offset']}"
        for i, what in enumerate(problems)
        if found[f"_n{i}"]
    ]
    if listed:
        raise BadArchiveError(f"{where}: " + "; ".join(listed))


def observed_records(
    spark: SparkSession,
    topic: ArchivedTopic,
    required: Sequence[str] = (),
    *,
    keys: Sequence[str] = (),
    numeric: Sequence[str] = (),
) -> tuple[DataFrame, RecordChecks]:
    """:func:`read_records` with the value checks left to the caller: it observes them
    (:meth:`RecordChecks.observe`) on its first action over every record, then verifies.
    Nothing fails on bad values before the checks can say why (a bigint partition beyond
    Kafka's range, which would not fit, is refused now, by a pass over that column)."""
    df = topic.load(spark)
    columns = [topic.partition_col, topic.offset_col, topic.timestamp_col, *required, *keys]
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
    _check_types(df, topic, numeric)
    if isinstance(df.schema[topic.partition_col].dataType, LongType):
        _refuse_partitions_beyond_kafka(df, topic)
    records = df.select(
        F.lit(topic.name).alias(TOPIC),
        F.col(topic.partition_col).cast("int").alias(PARTITION),
        F.col(topic.offset_col).cast("long").alias(OFFSET),
        F.unix_millis(F.col(topic.timestamp_col)).alias(EVENT_TIME),
        *[F.col(c) for c in df.columns],
    )
    return records, _value_checks(topic, records, keys)


def _check_types(df: DataFrame, topic: ArchivedTopic, numeric: Sequence[str]) -> None:
    """Partition and offset are integers, summed and averaged columns numbers: from the
    schema, no data read (a sample value is read only to name it in the error)."""
    partition, offset = topic.partition_col, topic.offset_col
    for column, other, what in ((partition, offset, "partition"), (offset, partition, "offset")):
        kind = df.schema[column].dataType
        if not isinstance(kind, _INTEGERS):
            sample = df.where(F.col(column).isNotNull()).select(column, other).first()
            example = "" if sample is None else f", e.g. {sample[0]!r} at {other} {sample[1]!r}"
            raise BadArchiveError(
                f"{topic.where}: column {column!r} has type {kind.simpleString()}, not an "
                f"integer type (int or bigint) as Kafka's {what} is{example}; cast it or "
                f"name the right column"
            )
    for column in dict.fromkeys(numeric):
        kind = df.schema[column].dataType
        if not isinstance(kind, NumericType):
            raise BadArchiveError(
                f"{topic.where}: column {column!r} has type {kind.simpleString()}, but it is "
                "summed or averaged: it must be a number"
            )


def _value_checks(topic: ArchivedTopic, records: DataFrame, keys: Sequence[str]) -> RecordChecks:
    """Every value problem, on the normalized columns, named by the archive's."""
    problems = [
        (f"null value(s) in column {name!r}", F.col(column).isNull())
        for name, column in (
            (topic.partition_col, PARTITION),
            (topic.offset_col, OFFSET),
            (topic.timestamp_col, EVENT_TIME),
        )
    ]
    problems += [
        (
            f"null value(s) in key column {c!r} (Flink's keyBy fails the job on a null key; "
            "null_keys='drop' drops such records, as a filter before keyBy would)",
            F.col(c).isNull(),
        )
        for c in dict.fromkeys(keys)
    ]
    problems += [
        (f"negative value(s) in column {topic.partition_col!r}", F.col(PARTITION) < 0),
        (f"negative value(s) in column {topic.offset_col!r}", F.col(OFFSET) < 0),
    ]
    return RecordChecks(topic.where, topic.name, records, problems)


def _refuse_partitions_beyond_kafka(df: DataFrame, topic: ArchivedTopic) -> None:
    """A bigint partition column's values beyond Kafka's int32 range, which no int holds."""
    partition, offset = F.col(topic.partition_col), F.col(topic.offset_col)
    beyond = partition > _PARTITION_MAX
    place = F.struct(partition.alias("partition"), offset.alias("offset"))
    found = df.agg(
        F.count(F.lit(1)).alias("_rows"),
        F.count_if(beyond).alias("_n0"),
        F.min(F.when(beyond, place)).alias("_at0"),
    ).first()
    what = f"value(s) in column {topic.partition_col!r} beyond Kafka's largest partition number"
    _refuse(topic.where, found.asDict(), [f"{what} ({_PARTITION_MAX})"])
