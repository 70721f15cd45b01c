"""Enrichment with external state, as of when the job would have looked it up (SEMANTICS 7).

A Flink job enriches each record before windowing it: a processing-time lookup join
(``JOIN rates FOR SYSTEM_TIME AS OF t.proc_time``) reads the external state as it is when the
record is processed; an event-time temporal join (``FOR SYSTEM_TIME AS OF t.event_time``)
takes the latest version at or before the record's event time. A backfill must read the state
as it was then, or it leaks future state into training.

**State sources.** Each produces a normalized *versions* table: the state key column(s),
``_vt`` (when the version starts, epoch ms), ``_seq`` (order of versions at the same
instant), ``_deleted`` (a tombstone: from then on there is no state), ``_valid_to`` (epoch
ms or null: the version is not valid at ``t >= _valid_to``) and the attribute columns.

- :class:`ScdTable`: SCD type II, one row per version, ``valid_from`` [, ``valid_to``).
- :class:`CdcLog`: a change log (upserts and deletes, with the change time) over an optional
  snapshot: the snapshot is the whole state at ``snapshot_time_ms`` (it includes every
  change at or before it, so those log rows are skipped); before it the state is unknown.
- :class:`DeltaHistory`: a Delta table whose versions are the history, each commit at its
  commit timestamp (``DeltaTable.history()``): read from the change data feed where
  ``delta.enableChangeDataFeed`` is set, otherwise by reading every version (time travel)
  and diffing consecutive ones per key.

**Lookup at time t** (``t = _pt + delay_ms`` for ``time="processing"``, ``t = _et`` for
``time="event"``): the version of the key with the largest ``(_vt, _seq)`` such that
``_vt <= t`` (a version written at t is visible at t); if it is a tombstone, or ``t >=
_valid_to``, there is no state. No state: null attributes (``how="left"``, Flink's ``LEFT
JOIN``) or the record is removed (``how="inner"``). A null record key never matches.

**Sort-based, never a join of all versions per key.** Records and versions are unioned and
sorted per key by ``(t, versions first, _seq)``; one window carries the last version forward
to each record. Cost ~ (records + versions) log, whatever the number of versions per key:
state tables far larger than the archive are fine. A key's records and versions meet in one
task, so a very hot lookup key (a handful of currencies, say) limits parallelism.
(:func:`feast_stream_backfill.training_join.as_of_join` is the same idea, but it joins the
values back to the rows, a second shuffle that carrying the whole record avoids.)

**Derived columns** (``StreamJob.derived``, e.g. ``{"amount_usd": "amount * rate"}``) are
Spark SQL expressions evaluated after every lookup, over the record and its enrichment (not
over each other); an aggregation can then aggregate them. They may use ``_et`` and ``_pt``.

**Decisions where the model is silent.**

- *The watermark comes from all records.* In Flink the lookup join runs after the source,
  so the source's watermark reflects every record read, including those an inner join then
  removes: they never reach the window operator, but they advanced the watermark. The
  backfill feeds the watermark with the un-enriched records and windows only the enriched
  ones (``Backfill.stats["records_without_state"]`` counts those removed).
- *A record keeps its own processing time.* The lookup delay only shifts which version is
  read (a slow lookup, an async I/O round trip, a replica lagging behind: negative); the
  record is windowed at its ``_pt``, as the model has no latency for operators.
- *An event-time temporal join is modelled by its result*, the version at ``et``. Flink also
  buffers each record until the watermark passes its time (and the versioned side's
  watermark, an idle changelog stalls it); that can delay when a record reaches the window
  operator, which this model does not do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from delta.tables import DeltaTable
from pyspark.errors import AnalysisException
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

from feast_stream_backfill.errors import BadStateTableError
from feast_stream_backfill.processing_time import PROCESSING_TIME
from feast_stream_backfill.records import EVENT_TIME

#: The normalized versions table (besides key and attribute columns).
VERSION_TIME, SEQUENCE, DELETED, VALID_TO = "_vt", "_seq", "_deleted", "_valid_to"

_AT, _SIDE, _SEQ, _TIE, _STATE = "_lk_at", "_lk_side", "_lk_seq", "_lk_tie", "_lk_state"


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
        times = spark.createDataFrame(commits, "_commit_version long, _commit_ms long")
        kind = F.col("_change_type")
        order = F.when(kind == "delete", 0).when(kind == "insert", 1).otherwise(2)
        changes = feed.where(kind != "update_preimage").join(F.broadcast(times), "_commit_version")
        return _versions(
            changes,
            self.keys,
            attributes,
            F.col("_commit_ms"),
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
                    F.lit(i).alias("_i"),
                    F.lit(ms).cast("long").alias("_at"),
                    F.lit(following).cast("long").alias("_next_at"),
                )
            )
        rows = snapshots[0]
        for snapshot in snapshots[1:]:
            rows = rows.unionByName(snapshot)
        # Per key, along the versions it is present in: a new version where it appears or its
        # attributes change; a tombstone at the next commit where it is absent.
        by_version = Window.partitionBy(*self.keys).orderBy("_i")
        content = F.xxhash64(F.struct(*[F.col(a) for a in attributes])) if attributes else F.lit(0)
        marked = rows.withColumn("_h", content).select(
            "*",
            F.lag("_i").over(by_version).alias("_prev_i"),
            F.lag("_h").over(by_version).alias("_prev_h"),
            F.lead("_i").over(by_version).alias("_next_i"),
        )
        appears = F.col("_prev_i").isNull() | (F.col("_prev_i") != F.col("_i") - 1)
        changes = marked.where(appears | (F.col("_prev_h") != F.col("_h")))
        gone = marked.where(
            F.col("_next_at").isNotNull()
            & (F.col("_next_i").isNull() | (F.col("_next_i") != F.col("_i") + 1))
        )
        upserts = _versions(
            changes, self.keys, attributes, F.col("_at"), sequence=F.col("_i") * 2 + 1
        )
        deletes = _versions(
            gone.select(
                *self.keys,
                *[F.lit(None).cast(rows.schema[a].dataType).alias(a) for a in attributes],
                "_i",
                "_next_at",
            ),
            self.keys,
            attributes,
            F.col("_next_at"),
            sequence=(F.col("_i") + 1) * 2,
            deleted=F.lit(True),
        )
        return upserts.unionByName(deletes)


StateSource = ScdTable | CdcLog | DeltaHistory


def _check_keys(source: StateSource) -> None:
    if isinstance(source.keys, str) or not source.keys:
        raise ValueError(f"{source.where}: keys must be a non-empty list of column names")
    object.__setattr__(source, "keys", tuple(source.keys))


@dataclass(frozen=True)
class Lookup:
    """Enrich each record with ``attributes`` of ``source`` (named ``prefix + attribute``).

    ``on`` maps record column(s) to the source's key column(s) (default: same names).
    ``time="processing"``: Flink's lookup join ``FOR SYSTEM_TIME AS OF proc_time``, the
    version valid at the record's processing time plus ``delay_ms``; ``time="event"``: an
    event-time temporal join, the latest version at or before the event time. ``how``:
    ``"left"`` keeps a record without state (null attributes), ``"inner"`` removes it.
    """

    source: StateSource
    attributes: Sequence[str]
    on: Mapping[str, str] | None = None
    time: Literal["processing", "event"] = "processing"
    delay_ms: int = 0
    how: Literal["left", "inner"] = "left"
    prefix: str = ""

    def __post_init__(self) -> None:
        where = f"lookup in {self.source.where}"
        on = dict(self.on) if self.on is not None else {k: k for k in self.source.keys}
        object.__setattr__(self, "on", on)
        if isinstance(self.attributes, str) or not self.attributes:
            raise ValueError(f"{where}: name the attribute column(s) to add")
        object.__setattr__(self, "attributes", tuple(self.attributes))
        if sorted(on.values()) != sorted(self.source.keys):
            raise ValueError(
                f"{where}: `on` must map record columns to each key column {list(self.source.keys)}"
                f" once, got {on}"
            )
        if self.time not in ("processing", "event"):
            raise ValueError(f"{where}: time must be 'processing' or 'event', got {self.time!r}")
        if self.how not in ("left", "inner"):
            raise ValueError(f"{where}: how must be 'left' or 'inner', got {self.how!r}")
        if self.time == "event" and self.delay_ms:
            raise ValueError(f"{where}: a lookup delay applies to processing-time lookups only")
        if len(set(self.outputs)) != len(self.outputs):
            raise ValueError(f"{where}: attributes must be unique, got {self.attributes}")

    @property
    def inputs(self) -> list[str]:
        """The record columns it reads."""
        return list(self.on)

    @property
    def outputs(self) -> list[str]:
        """The columns it adds to the record."""
        return [self.prefix + a for a in self.attributes]

    def lookup_time(self) -> Column:
        if self.time == "event":
            return F.col(EVENT_TIME)
        return F.col(PROCESSING_TIME) + F.lit(self.delay_ms).cast("long")

    def join(self, records: DataFrame) -> DataFrame:
        """``records`` (with ``_pt`` and ``_et``) with the attributes as of the lookup time."""
        spark = records.sparkSession
        where = f"lookup in {self.source.where}"
        missing = [c for c in self.inputs if c not in records.columns]
        if missing:
            raise ValueError(f"{where}: the records have no column(s) {missing}")
        clashes = [c for c in self.outputs if c in records.columns]
        if clashes:
            raise ValueError(f"{where}: the records already have column(s) {clashes}; set prefix")
        versions = self.source.versions(spark, self.attributes)
        record_keys = list(self.on)
        state = F.struct(F.col(DELETED), F.col(VALID_TO), *[F.col(a) for a in self.attributes])
        right = versions.where(_all_not_null(self.on.values())).select(
            *[F.col(s).cast(records.schema[r].dataType).alias(r) for r, s in self.on.items()],
            F.col(VERSION_TIME).alias(_AT),
            F.lit(0).alias(_SIDE),
            F.col(SEQUENCE).alias(_SEQ),
            F.xxhash64(state).alias(_TIE),
            state.alias(_STATE),
        )
        left = records.select(
            "*",
            self.lookup_time().alias(_AT),
            F.lit(1).alias(_SIDE),
            F.lit(0).cast("long").alias(_SEQ),
            F.lit(0).cast("long").alias(_TIE),
            F.lit(None).cast(right.schema[_STATE].dataType).alias(_STATE),
        )
        so_far = (
            Window.partitionBy(*record_keys)
            .orderBy(_AT, _SIDE, _SEQ, _TIE)
            .rowsBetween(Window.unboundedPreceding, Window.currentRow)
        )
        carried = (
            left.unionByName(right, allowMissingColumns=True)
            .withColumn(_STATE, F.last(_STATE, ignorenulls=True).over(so_far))
            .where(F.col(_SIDE) == 1)
        )
        found = (
            F.col(_STATE).isNotNull()
            & ~F.col(_STATE)[DELETED]
            & (F.col(_STATE)[VALID_TO].isNull() | (F.col(_AT) < F.col(_STATE)[VALID_TO]))
        )
        if self.how == "inner":
            carried = carried.where(found)
        return carried.select(
            *records.columns,
            *[
                F.when(found, F.col(_STATE)[a]).alias(out)
                for a, out in zip(self.attributes, self.outputs, strict=True)
            ],
        )


def _all_not_null(columns) -> Column:
    condition = F.lit(True)
    for c in columns:
        condition = condition & F.col(c).isNotNull()
    return condition


def with_derived(records: DataFrame, derived: Mapping[str, str]) -> DataFrame:
    """Add each ``name: expression`` (Spark SQL, over the record and its enrichment)."""
    clashes = [n for n in derived if n in records.columns]
    if clashes:
        raise ValueError(f"derived column(s) {clashes} already exist in the enriched records")
    for name, expression in derived.items():
        try:
            records.select(F.expr(expression))
        except (AnalysisException, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            raise ValueError(
                f"derived column {name!r} = {expression!r}: {first}; the enriched records have "
                f"{[c for c in records.columns if not c.startswith('_')]} (and _et, _pt)"
            ) from exc
    return records.select("*", *[F.expr(e).alias(n) for n, e in derived.items()])


def enrich(
    records: DataFrame, lookups: Sequence[Lookup], derived: Mapping[str, str] | None = None
) -> DataFrame:
    """The records of :func:`feast_stream_backfill.backfill.backfill` (``_pt``, ``_et``,
    payload) enriched by each lookup in turn (a lookup may use the attributes of an earlier
    one), then the derived columns; records an inner lookup finds no state for are removed."""
    for lookup in lookups:
        records = lookup.join(records)
    if derived:
        records = with_derived(records, derived)
    return records


def enrichment_outputs(lookups: Sequence[Lookup], derived: Mapping[str, str]) -> list[str]:
    """The columns enrichment adds: the lookups' attributes, then the derived columns."""
    return [*(c for lookup in lookups for c in lookup.outputs), *derived]


def enrichment_inputs(lookups: Sequence[Lookup], derived: Mapping[str, str]) -> list[str]:
    """The record columns enrichment reads (some may be outputs of an earlier lookup)."""
    read = [*(c for lookup in lookups for c in lookup.inputs)]
    read += [c for expression in derived.values() for c in expression_columns(expression)]
    return list(dict.fromkeys(read))


_TOKENS = re.compile(
    r"""
      (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
    | `(?P<quoted>(?:[^`]|``)+)`
    | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?[A-Za-z]*|\.\d+(?:[eE][+-]?\d+)?[A-Za-z]*)
    | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<symbol>::|->|\S)
    """,
    re.VERBOSE,
)

#: Words of Spark SQL expressions that are not column names (keywords, types, time units).
_NOT_COLUMNS = frozenset(
    """
    and or not is null true false case when then else end in like ilike rlike regexp between
    distinct as from for escape any some all exists div unknown to nulls first last
    interval year years month months week weeks day days hour hours minute minutes second
    seconds millisecond milliseconds microsecond microseconds
    boolean byte tinyint short smallint int integer long bigint float real double decimal dec
    numeric string varchar char binary date timestamp timestamp_ntz timestamp_ltz array map
    struct void x
    """.split()
)


def expression_columns(expression: str) -> list[str]:
    """The columns a Spark SQL expression reads, as far as its words tell: names outside
    string literals that are not called (``round(``), not struct fields (``a.b`` reads
    ``a``), not SQL keywords, types or time units, not lambda parameters; ``backquoted``
    names always. Internal columns (``_et``, ``_pt``) are left out."""
    tokens = [(m.lastgroup, m.group(m.lastgroup)) for m in _TOKENS.finditer(expression)]
    parameters = set()  # of lambdas: `x -> ...`, `(x, y) -> ...`
    for j, (_, text) in enumerate(tokens):
        if text == "->" and j > 0:
            k = j - 1
            if tokens[k][1] == ")":
                while k > 0 and tokens[k][1] != "(":
                    k -= 1
                    parameters.add(tokens[k][1])
            else:
                parameters.add(tokens[k][1])
    found: list[str] = []
    for i, (kind, text) in enumerate(tokens):
        if kind == "quoted":
            found.append(text.replace("``", "`"))
            continue
        if kind != "name" or text.lower() in _NOT_COLUMNS or text in parameters:
            continue
        before = tokens[i - 1][1] if i > 0 else ""
        after = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
        if after[1] in ("(", "->") or after[0] == "string" or before in (".", "::"):
            continue
        found.append(text)
    return [c for c in dict.fromkeys(found) if not c.startswith("_")]
