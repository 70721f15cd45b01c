"""Where state versions come from: each source yields one normalized *versions* table.

The table has the state key column(s), ``_vt`` (when the version starts, epoch ms), ``_seq``
(order of versions at the same instant), ``_deleted`` (a tombstone: from then on there is no
state), ``_valid_to`` (epoch ms or null: the version is not valid at ``t >= _valid_to``) and
the attribute columns; :mod:`feast_stream_backfill.enrichment.lookup` reads nothing else, so
a new kind of source only has to produce it.

- :class:`ScdTable`: SCD type II, one row per version, ``valid_from`` [, ``valid_to``).
- :class:`CdcLog`: a change log (upserts and deletes, with the change time) over an optional
  snapshot: the snapshot is the whole state at ``snapshot_time_ms`` (it includes every
  change at or before it, so those log rows are skipped); before it the state is unknown.
- :class:`DeltaHistory`: a Delta table whose versions are the history, each commit at its
  commit timestamp (``DeltaTable.history()``): read from the change data feed where
  ``delta.enableChangeDataFeed`` is set, otherwise by reading every version (time travel)
  and diffing consecutive ones per key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from delta.tables import DeltaTable
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    IntegerType,
    LongType,
    ShortType,
    TimestampNTZType,
    TimestampType,
)

from feast_stream_backfill.columns import DELETED, SEQUENCE, VALID_TO, VERSION_TIME
from feast_stream_backfill.errors import BadStateTableError


def _load(spark: SparkSession, where: str, path: str | None, df: DataFrame | None) -> DataFrame:
    if df is not None:
        return df
    if path is None:
        raise BadStateTableError(f"{where}: give a Delta table path or a DataFrame")
    try:
        return spark.read.format("delta").load(path)
    except Exception as exc:  # AnalysisException with a JVM trace
        raise BadStateTableError(f"{where}: cannot read it as a Delta table: {exc}") from exc


def _require(where: str, df: DataFrame, columns: Sequence[str | None]) -> None:
    missing = [c for c in dict.fromkeys(columns) if c is not None and c not in df.columns]
    if missing:
        raise BadStateTableError(
            f"{where}: missing column(s) {missing}; the table has {df.columns}"
        )


def _epoch_ms(where: str, df: DataFrame, column: str) -> Column:
    """A version time as epoch ms: a TIMESTAMP (an instant) or an integral epoch ms."""
    kind = df.schema[column].dataType
    if isinstance(kind, TimestampType):
        return F.unix_millis(F.col(column))
    if isinstance(kind, LongType | IntegerType | ShortType | ByteType):
        return F.col(column).cast("long")
    if isinstance(kind, TimestampNTZType):
        raise BadStateTableError(
            f"{where}: column {column!r} is a naive TIMESTAMP_NTZ; version times must be "
            "instants (TIMESTAMP, UTC) or epoch milliseconds"
        )
    raise BadStateTableError(
        f"{where}: column {column!r} has type {kind.simpleString()}, expected TIMESTAMP or "
        "epoch milliseconds (BIGINT)"
    )


def _refuse_null_times(where: str, df: DataFrame, columns: Sequence[str]) -> None:
    """One pass over the time column(s): a version without a time cannot be placed."""
    row = df.agg(*[F.sum(F.col(c).isNull().cast("long")).alias(c) for c in columns]).first()
    bad = {c: row[c] for c in columns if row is not None and row[c]}
    if bad:
        detail = ", ".join(f"{n} null value(s) in column {c!r}" for c, n in bad.items())
        raise BadStateTableError(f"{where}: {detail}")


def _versions(
    df: DataFrame,
    keys: Sequence[str],
    attributes: Sequence[str],
    time: Column,
    sequence: Column | None = None,
    deleted: Column | None = None,
    valid_to: Column | None = None,
) -> DataFrame:
    return df.select(
        *[F.col(k) for k in keys],
        time.alias(VERSION_TIME),
        (sequence if sequence is not None else F.lit(0)).cast("long").alias(SEQUENCE),
        (deleted if deleted is not None else F.lit(False)).alias(DELETED),
        (valid_to if valid_to is not None else F.lit(None)).cast("long").alias(VALID_TO),
        *[F.col(a) for a in attributes],
    )


def _where(kind: str, name: str, path: str | None) -> str:
    return f"{kind} {name!r} ({path or 'DataFrame'})"


@dataclass(frozen=True)
class ScdTable:
    """An SCD type II table: one row per version of a key, valid from ``valid_from`` and, if
    ``valid_to`` is given, until ``valid_to`` (exclusive; null: still valid). Times are
    TIMESTAMP or epoch-ms columns. Give ``path`` (Delta) or ``dataframe``."""

    name: str
    keys: Sequence[str]
    path: str | None = None
    valid_from: str = "valid_from"
    valid_to: str | None = None
    dataframe: DataFrame | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_keys(self)

    @property
    def where(self) -> str:
        return _where("state table", self.name, self.path)

    def delta_paths(self) -> list[str] | None:
        """The Delta tables it reads (None for a DataFrame: nothing tells if it changed)."""
        return None if self.dataframe is not None else [p for p in [self.path] if p]

    def versions(self, spark: SparkSession, attributes: Sequence[str]) -> DataFrame:
        df = _load(spark, self.where, self.path, self.dataframe)
        _require(self.where, df, [*self.keys, self.valid_from, self.valid_to, *attributes])
        start = _epoch_ms(self.where, df, self.valid_from)
        end = _epoch_ms(self.where, df, self.valid_to) if self.valid_to else None
        _refuse_null_times(self.where, df, [self.valid_from])
        return _versions(df, self.keys, attributes, start, valid_to=end)


@dataclass(frozen=True)
class CdcLog:
    """A change-data-capture log: one row per change of a key at ``time``; ``op`` in
    ``delete_ops`` is a delete, any other value an upsert (insert or update) carrying the
    attributes. ``sequence`` (a log sequence number) orders changes of the same instant.

    Over an optional snapshot (``snapshot_path`` or ``snapshot_dataframe``: key and attribute
    columns), the whole state at ``snapshot_time_ms``: it includes every change at or before
    that instant (those log rows are skipped), and before it the state is unknown (no state).
    Without a snapshot the log is replayed from its first change.
    """

    name: str
    keys: Sequence[str]
    path: str | None = None
    time: str = "change_time"
    op: str = "op"
    delete_ops: Sequence[str] = ("delete",)
    sequence: str | None = None
    snapshot_path: str | None = None
    snapshot_time_ms: int | None = None
    dataframe: DataFrame | None = field(default=None, compare=False, repr=False)
    snapshot_dataframe: DataFrame | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        _check_keys(self)
        object.__setattr__(self, "delete_ops", tuple(self.delete_ops))
        has_snapshot = self.snapshot_path is not None or self.snapshot_dataframe is not None
        if has_snapshot != (self.snapshot_time_ms is not None):
            raise ValueError(
                f"{self.where}: a snapshot needs its snapshot_time_ms, and only a snapshot has one"
            )

    @property
    def where(self) -> str:
        return _where("state table", self.name, self.path)

    @property
    def snapshot_where(self) -> str:
        return f"snapshot of state table {self.name!r} ({self.snapshot_path or 'DataFrame'})"

    def delta_paths(self) -> list[str] | None:
        if self.dataframe is not None or self.snapshot_dataframe is not None:
            return None
        return [p for p in (self.path, self.snapshot_path) if p]

    def versions(self, spark: SparkSession, attributes: Sequence[str]) -> DataFrame:
        log = _load(spark, self.where, self.path, self.dataframe)
        _require(self.where, log, [*self.keys, self.time, self.op, self.sequence, *attributes])
        changed = _epoch_ms(self.where, log, self.time)
        _refuse_null_times(self.where, log, [self.time])
        changes = _versions(
            log,
            self.keys,
            attributes,
            changed,
            sequence=F.col(self.sequence) if self.sequence else None,
            deleted=F.coalesce(F.col(self.op).isin(*self.delete_ops), F.lit(False)),
        )
        if self.snapshot_time_ms is None:
            return changes
        snapshot = _load(spark, self.snapshot_where, self.snapshot_path, self.snapshot_dataframe)
        _require(self.snapshot_where, snapshot, [*self.keys, *attributes])
        at = F.lit(self.snapshot_time_ms).cast("long")
        return _versions(snapshot, self.keys, attributes, at).unionByName(
            changes.where(F.col(VERSION_TIME) > at)
        )


@dataclass(frozen=True)
class DeltaHistory:
    """A Delta table whose history is the state's: each commit is a new version of the rows
    it changed, at its commit timestamp (``DeltaTable.history()``); the keys are unique in
    every version. ``change_data_feed``: read the changes from Delta's change data feed
    (cheap; it must have been on since the table's first version still in the history) or
    by reading every version and diffing them (``False``; cost ~ versions x rows); ``None``:
    the feed when the table has ``delta.enableChangeDataFeed`` set."""

    name: str
    keys: Sequence[str]
    path: str
    change_data_feed: bool | None = None

    def __post_init__(self) -> None:
        _check_keys(self)

    @property
    def where(self) -> str:
        return _where("state table", self.name, self.path)

    def delta_paths(self) -> list[str] | None:
        return [self.path]

    def commits(self, spark: SparkSession) -> list[tuple[int, int]]:
        """``(version, commit timestamp in epoch ms)`` of the history, oldest first."""
        table = self._table(spark)
        rows = table.history().select("version", F.unix_millis("timestamp").alias("ms"))
        return sorted((r["version"], r["ms"]) for r in rows.collect())

    def _table(self, spark: SparkSession) -> DeltaTable:
        try:
            return DeltaTable.forPath(spark, self.path)
        except Exception as exc:
            raise BadStateTableError(
                f"{self.where}: cannot read it as a Delta table: {exc}"
            ) from exc

    def uses_change_data_feed(self, spark: SparkSession) -> bool:
        if self.change_data_feed is not None:
            return self.change_data_feed
        properties = self._table(spark).detail().first()["properties"] or {}
        return properties.get("delta.enableChangeDataFeed", "false").lower() == "true"

    def versions(self, spark: SparkSession, attributes: Sequence[str]) -> DataFrame:
        latest = self._table(spark).toDF()
        _require(self.where, latest, [*self.keys, *attributes])
        commits = self.commits(spark)
        if self.uses_change_data_feed(spark):
            return self._from_change_feed(spark, attributes, commits)
        return self._from_snapshots(spark, attributes, commits)

    def _from_change_feed(
        self, spark: SparkSession, attributes: Sequence[str], commits: list[tuple[int, int]]
    ) -> DataFrame:
        try:
            feed = (
                spark.read.format("delta")
                .option("readChangeFeed", "true")
                .option("startingVersion", commits[0][0])
                .load(self.path)
            )
        except Exception as exc:
            raise BadStateTableError(
                f"{self.where}: cannot read its change data feed from version {commits[0][0]} "
                f"(use change_data_feed=False to read every version instead): {exc}"
            ) from exc
        times = spark.createDataFrame(commits, "_commit_version long, _dh_commit_ms long")
        kind = F.col("_change_type")
        order = F.when(kind == "delete", 0).when(kind == "insert", 1).otherwise(2)
        changes = feed.where(kind != "update_preimage").join(F.broadcast(times), "_commit_version")
        return _versions(
            changes,
            self.keys,
            attributes,
            F.col("_dh_commit_ms"),
            sequence=F.col("_commit_version") * 3 + order,
            deleted=kind == "delete",
        )

    def _from_snapshots(
        self, spark: SparkSession, attributes: Sequence[str], commits: list[tuple[int, int]]
    ) -> DataFrame:
        snapshots = []
        for i, (version, ms) in enumerate(commits):
            following = commits[i + 1][1] if i + 1 < len(commits) else None
            try:
                snapshot = spark.read.format("delta").option("versionAsOf", version).load(self.path)
                _require(f"{self.where} at version {version}", snapshot, [*self.keys, *attributes])
            except BadStateTableError:
                raise
            except Exception as exc:
                raise BadStateTableError(
                    f"{self.where}: cannot read version {version} (vacuumed?): {exc}"
                ) from exc
            snapshots.append(
                snapshot.select(
                    *self.keys,
                    *attributes,
                    F.lit(i).alias("_dh_i"),
                    F.lit(ms).cast("long").alias("_dh_at"),
                    F.lit(following).cast("long").alias("_dh_next_at"),
                )
            )
        rows = snapshots[0]
        for snapshot in snapshots[1:]:
            rows = rows.unionByName(snapshot)
        # Per key, along the versions it is present in: a new version where it appears or its
        # attributes change; a tombstone at the next commit where it is absent.
        by_version = Window.partitionBy(*self.keys).orderBy("_dh_i")
        content = F.xxhash64(F.struct(*[F.col(a) for a in attributes])) if attributes else F.lit(0)
        marked = rows.withColumn("_dh_h", content).select(
            "*",
            F.lag("_dh_i").over(by_version).alias("_dh_prev_i"),
            F.lag("_dh_h").over(by_version).alias("_dh_prev_h"),
            F.lead("_dh_i").over(by_version).alias("_dh_next_i"),
        )
        appears = F.col("_dh_prev_i").isNull() | (F.col("_dh_prev_i") != F.col("_dh_i") - 1)
        changes = marked.where(appears | (F.col("_dh_prev_h") != F.col("_dh_h")))
        gone = marked.where(
            F.col("_dh_next_at").isNotNull()
            & (F.col("_dh_next_i").isNull() | (F.col("_dh_next_i") != F.col("_dh_i") + 1))
        )
        upserts = _versions(
            changes, self.keys, attributes, F.col("_dh_at"), sequence=F.col("_dh_i") * 2 + 1
        )
        deletes = _versions(
            gone.select(
                *self.keys,
                *[F.lit(None).cast(rows.schema[a].dataType).alias(a) for a in attributes],
                "_dh_i",
                "_dh_next_at",
            ),
            self.keys,
            attributes,
            F.col("_dh_next_at"),
            sequence=(F.col("_dh_i") + 1) * 2,
            deleted=F.lit(True),
        )
        return upserts.unionByName(deletes)


StateSource = ScdTable | CdcLog | DeltaHistory


def _check_keys(source: StateSource) -> None:
    if isinstance(source.keys, str) or not source.keys:
        raise ValueError(f"{source.where}: keys must be a non-empty list of column names")
    object.__setattr__(source, "keys", tuple(source.keys))
