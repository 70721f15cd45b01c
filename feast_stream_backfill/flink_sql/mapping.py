"""A read Flink SQL script as the plugin's :class:`StreamJob`, where the mapping is exact.

What Flink's source says, and so what is mapped (Flink 2.3):

- The watermark. A Kafka table's ``WATERMARK`` is pushed into the source
  (``PushWatermarkIntoTableSourceScanRuleBase.getNewScan``): each partition's generator is
  ``GeneratedWatermarkGeneratorSupplier.DefaultWatermarkGenerator`` (flink-table-runtime,
  ``org/apache/flink/table/runtime/generated/GeneratedWatermarkGeneratorSupplier.java``),
  whose ``onEvent`` sets ``currentWatermark`` to the expression of *this* record,
  ``ts - B``, with no ``- 1``, and whose ``onPeriodicEmit`` emits it; the source keeps only
  rises (``WatermarkOutputMultiplexer``'s ``setWatermark``). The DataStream
  ``BoundedOutOfOrdernessWatermarks`` the plugin models emits ``max(ts) - B' - 1``. So:
  SQL's bound B is the plugin's ``B' = B - 1`` (B = 0 is refused: ``B' = -1`` is not a
  bound); with ``'scan.watermark.emit.strategy' = 'on-event'`` each record emits, the
  rises only are kept, and the two agree on every archive. Emitted periodically, SQL's
  watermark is the *last* record's ``ts - B`` at the tick, not the highest: the two agree
  where every partition's event times never decrease with the offset, which
  :func:`job_from_sql` checks on the archive, refusing it otherwise.
- ``pipeline.auto-watermark-interval`` is the periodic tick (``interval_ms``; Flink's
  default 200 ms). At 0 the periodic generator is never asked to emit: refused.
- ``scan.watermark.idle-timeout`` (else ``table.exec.source.idle-timeout``; 0 is off) is
  ``WatermarkStrategy.withIdleness`` on the pushed-down strategy: ``idle_timeout_ms``.
- ``AVG`` keeps its argument's type (an integer division for integer columns): mapped onto
  the plugin's double ``mean`` only for a ``DOUBLE`` column.
- The window TVF aggregation fires a window when the watermark reaches ``window_end - 1``
  (``TimeWindowUtil.isWindowFired``), once, and drops a record whose windows have all
  fired: the plugin's ``EventTimeTrigger`` with no allowed lateness. ``CUMULATE`` is
  :class:`CumulativeWindows`: its slices share the first one's state
  (``SliceAssigners.CumulativeSliceAssigner``), so a record late for some of its windows
  joins those not yet fired, and each window end fires the next
  (``nextTriggerWindow``) up to the size, whether or not a record came in between.
- A window TVF whose ``DESCRIPTOR`` names the table's ``PROCTIME()`` column runs the same
  ``WindowAggOperator`` by its clock (``isEventTime`` false): a record goes to the slice of
  the operator's processing time when it comes (``SliceAssigners``' ``assignSliceEnd``, read
  through ``ClockService``), which sets a processing-time timer for the slice end - 1
  (``SlicingWindowTimerServiceImpl``). That timer fires the window; a ``HOP`` or ``CUMULATE``
  firing sets the next window's (``nextTriggerWindow``), an empty window writes nothing, and
  nothing is late. ``SESSION`` (``UnsliceAssigners.SessionUnsliceAssigner``) opens ``[pt, pt +
  gap)``, merges it with the session it overlaps and fires a session by a timer at its
  ``maxTimestamp``. The windows align in ``table.local-time-zone``
  (``TimeWindowUtil.getShiftTimeZone``: ``PROCTIME()`` is a ``TIMESTAMP_LTZ``), the JVM's
  when not set: mapped with ``'UTC'``. That is the same window in the processing domain with
  :class:`ProcessingTimeTrigger`, no watermark read.
- An unbounded ``GROUP BY keys`` (``GroupAggFunction``) updates its key's result with every
  record, at the record's processing time, and with ``table.exec.state.ttl`` set emits
  every update, changed or not. Its state lives under processing-time TTL
  (``StateConfigUtil.createTtlConfig``: updated on create and write, expired ones never
  returned): a record read at or after the last write plus the TTL starts afresh. That is a
  processing-time session of gap TTL fired by every record: :class:`SessionWindows` in the
  processing domain with :class:`PerRecordTrigger`, whose session ends (its timer at
  ``maxTs + 1 = last + TTL``) before that millisecond's records. Without a TTL the session
  never ends (:data:`NEVER_EXPIRES`), and Flink skips an update equal to the key's previous
  result (``GroupAggHelper``: state cleaning off, the generated ``RecordEqualiser``):
  ``PerRecordTrigger(skip_unchanged=True)``, set with a ``COUNT(*)`` too (no update is then
  skipped, every one counting one more record).
- An ``OVER`` from ``UNBOUNDED PRECEDING`` ordered by a ``PROCTIME()`` column, ``ROWS`` or
  ``RANGE`` alike, runs ``ProcTimeUnboundedPrecedingFunction``: each record adds to its key's
  accumulator and is written at once with it, every one (no update is skipped), the
  accumulator under the same processing-time TTL as ``GroupAggFunction``'s. That is the
  unbounded ``GROUP BY``'s mapping with every update written: a processing-time session of gap
  TTL (:data:`NEVER_EXPIRES` without one) fired by each record.
- A bounded ``OVER`` ordered by a ``PROCTIME()`` column is :class:`OverWindows` in the
  processing domain with :class:`ProcessingTimeTrigger`: a ``RANGE`` of ``p``
  (``ProcTimeRangeBoundedPrecedingFunction``) keeps the rows a key reads in a millisecond
  ``t`` until a timer set for ``t + 1`` writes them, each with the key's rows read in ``[t -
  p, t]``; it takes no state TTL. ``ROWS`` ``n`` (``ProcTimeRowsBoundedPrecedingFunction``)
  writes each row as it is read with the ``n`` read before it; with ``table.exec.state.ttl``
  over 1 ms (``KeyedProcessFunctionWithCleanupState.stateCleaningEnabled``) a key's state is
  cleared by a timer at ``1.5`` TTL after the row that last moved it (``state_ttl_ms``).
- An ``OVER`` aggregation ordered by the rowtime (``StreamExecOverAggregate`` picks its
  function by frame) keeps each row until the watermark reaches its time (an event-time timer
  at it), then writes it with the aggregate of its frame among its key's rows. With a ``RANGE``
  of ``p`` before the current row (``RowTimeRangeBoundedPrecedingFunction``) the frame is the
  rows in ``[t - p, t]``, the rows of one time written together, each with all of them; with
  ``ROWS`` ``n`` before it (``RowTimeRowsBoundedPrecedingFunction``, ``precedingOffset = n +
  1``) the last ``n + 1`` rows in time and then arrival order, each row written with the rows
  up to it. Both drop a row no later than the key's last timer (``lastTriggeringTs``, 0
  before the first). From ``UNBOUNDED PRECEDING``, ``RANGE`` (SQL's frame when none is
  written) or ``ROWS``, Flink 2.3 runs ``RowTimeUnboundedPrecedingOverFunctionV2``
  (``table.exec.unbounded-over.version`` 2, its default): a row the operator's watermark has
  reached is dropped, each timer adds its time's rows to an accumulator never taken from, and
  ``RANGE`` writes each with the value after all of them, ``ROWS`` each with the value after
  it. :class:`OverWindows` (``preceding_ms``; ``frame="rows"``, ``preceding_rows``; None for
  ``UNBOUNDED``) with ``EventTimeTrigger(0)``: the same rules, modelled. With
  ``table.exec.state.ttl`` each of them clears a key's state on processing-time timers
  (``KeyedProcessFunctionWithCleanupState``), not modelled: refused, as is ``SET`` of the
  unbounded version (with any other option).
- ``WHERE`` is a filter after the source, before the aggregation: filtered records still
  pass the source's watermark generator. ``StreamJob.where``, with the predicate in Spark SQL
  (:mod:`feast_stream_backfill.flink_sql.expressions`).
- A view is a projection and a filter (a ``Calc``) between the source and the aggregation,
  computed per record: the topic's ``transform`` computes its columns, and its ``WHERE``
  marks the records it keeps (:data:`VIEW_KEEPS`), which ``StreamJob.where`` reads. Time
  attributes pass through a view's projection, renamed or not; a computed one is refused.
- A view's ``UNION ALL`` of Kafka tables (``StreamExecUnion``: one stream of both sources,
  each with its own pushed-down watermark strategy, the operator after it taking the lower
  watermark) is a job of several topics, each with its table's bound. One emission strategy
  and no idleness across them are modelled (the valve's handling of an idle source is not):
  the others are refused.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from pyspark.sql import Column as PySparkColumn
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, FloatType

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import EVENT_TIME, OFFSET, PARTITION, VIEW_KEEPS
from feast_stream_backfill.enrichment import Lookup, StateSource, expression_columns
from feast_stream_backfill.errors import BadArchiveError, UnsupportedSqlError
from feast_stream_backfill.flink_sql.expressions import FLOATING
from feast_stream_backfill.flink_sql.reader import (
    AGGREGATES,
    ROWS,
    Aggregate,
    AggregatingInsert,
    Column,
    LookupJoin,
    Projection,
    Script,
    SetOption,
    Table,
    TableOption,
    View,
    lookup_column,
    read_script,
)
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.records import ArchivedTopic, RecordTransform, read_records
from feast_stream_backfill.triggers import (
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)
from feast_stream_backfill.watermarks import WatermarkStrategy
from feast_stream_backfill.windows import (
    CumulativeWindows,
    Domain,
    OverWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)

AUTO_WATERMARK_INTERVAL = "pipeline.auto-watermark-interval"
SOURCE_IDLE_TIMEOUT = "table.exec.source.idle-timeout"
SCAN_IDLE_TIMEOUT = "scan.watermark.idle-timeout"
EMIT_STRATEGY = "scan.watermark.emit.strategy"
STATE_TTL = "table.exec.state.ttl"
LOCAL_TIME_ZONE = "table.local-time-zone"
#: The session time zone in which Flink aligns processing-time windows as the plugin does, on
#: the epoch.
UTC = "UTC"
#: The session gap of an unbounded GROUP BY's state that never expires (no TTL): a century of
#: processing time, beyond any archive's span (its sessions end, in the emission log, a century
#: after their last update).
NEVER_EXPIRES = 100 * 365 * 86_400_000
#: Flink's ``PipelineOptions.AUTO_WATERMARK_INTERVAL`` default.
DEFAULT_INTERVAL_MS = 200
#: Options that shape the watermark or what is read, beyond those mapped: refused.
REFUSED_TABLE_OPTIONS = ("topic-pattern", "scan.watermark.")
#: A lookup table's options that change which version a lookup reads: a cache answers with a
#: row read earlier (Flink's ``lookup.cache``, ``lookup.partial-cache.*``,
#: ``lookup.full-cache.*``, the JDBC connector's ``lookup.cache.*``); ``lookup.async``
#: answers when the database does. Refused.
REFUSED_LOOKUP_OPTIONS = (
    "lookup.cache",
    "lookup.partial-cache.",
    "lookup.full-cache.",
    "lookup.async",
)
#: Flink's ``TimeUtils`` duration units, in milliseconds.
_UNITS = {
    **dict.fromkeys(("", "ms", "milli", "millis", "millisecond", "milliseconds"), 1),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1_000),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60_000),
    **dict.fromkeys(("h", "hour", "hours"), 3_600_000),
    **dict.fromkeys(("d", "day", "days"), 86_400_000),
}


def job_from_sql(
    spark: SparkSession | None,
    script: str,
    archives: Mapping[str, ArchivedTopic | str],
    insert: str | None = None,
    states: Mapping[str, StateSource] | None = None,
) -> StreamJob:
    """The job ``script`` runs, over ``archives``: per Kafka table name (or per topic), an
    :class:`ArchivedTopic` or the path of a Delta table of the topic's records.

    ``insert`` names the target table of the ``INSERT`` to map when the script has several.
    ``states``: per lookup table a view joins (by name), where its history is
    (:class:`~feast_stream_backfill.enrichment.ScdTable`, ``CdcLog``, ``DeltaHistory``): the
    lookup reads the version valid when the job processes the record.
    Raises :class:`UnsupportedSqlError` naming construct, line and column for anything not
    mapped exactly. With periodic watermarks, ``spark`` reads the archive to check that each
    partition's event times never decrease (where they do, SQL's periodic watermark is not
    the one the plugin models); without ``spark`` (checking a declaration before any data is
    read) that check is left to a later call with one.
    """
    read = read_script(script)
    chosen = _insert(read, insert)
    settings = _settings(read.options)
    paths = _sources(read, chosen)
    types = _relation(read, chosen.source).types
    topics = [_projected(_topic(path.table, archives), path) for path in paths]
    lookups = _lookups(read, paths, chosen, states or {})
    _check_types(chosen, types)
    keys = list(chosen.keys)
    aggregations = [
        # COUNT(*) counts rows; a key column is never null (the backfill refuses null keys),
        # so counting it counts rows.
        Aggregation(_argument(a) if a.expression else a.column or keys[0], a.function, a.name)
        for a in chosen.aggregates
    ]
    derived = {_argument(a): a.expression for a in chosen.aggregates if a.expression}
    where = _where(chosen, paths)
    if settings.state_ttl is not None and not (
        chosen.unbounded or chosen.over and chosen.processing_time
    ):
        raise _refused(
            settings.state_ttl,
            f"SET {STATE_TTL!r} with {'an OVER' if chosen.over else 'a window'} aggregation",
            "the state TTL is modelled for an unbounded GROUP BY and a processing-time OVER only",
        )
    if not chosen.watermarked:
        window, trigger = _driven_by_clock(chosen, settings)
        if spark is not None:
            for topic in topics:
                _check_no_nan(spark, topic, chosen, types, lookups)
        return StreamJob(
            topics=topics,
            keys=keys,
            window=window,
            aggregations=aggregations,
            trigger=trigger,
            lookups=lookups,
            derived=derived,
            where=where,
        )
    watermark, topics = _watermarks(settings, paths, topics)
    if spark is not None:
        for path, topic in zip(paths, topics, strict=True):
            if watermark.emission == "periodic":
                _check_in_order(spark, topic, path.table)
            _check_no_nan(spark, topic, chosen, types, lookups)
    return StreamJob(
        topics=topics,
        keys=keys,
        window=_window(chosen),
        aggregations=aggregations,
        trigger=EventTimeTrigger(),
        watermark=watermark,
        lookups=lookups,
        derived=derived,
        where=where,
    )


def lookup_keys(script: str) -> dict[str, list[str]]:
    """Each table the script's views look up, and the columns of it their ``ON`` compares
    (the keys its history must have)."""
    return {
        branch.lookup.table: [column for _, column in branch.lookup.on]
        for view in read_script(script).views
        for branch in view.branches
        if branch.lookup is not None
    }


@dataclass(frozen=True)
class _Settings:
    """The script's ``SET`` options the mapping reads: the periodic tick, the source idle
    timeout (0: off), the state TTL and the session time zone (None: not set)."""

    interval_ms: int = DEFAULT_INTERVAL_MS
    idle_ms: int = 0
    idle_option: SetOption | None = None
    state_ttl: SetOption | None = None
    time_zone: SetOption | None = None


def _settings(options: tuple[SetOption, ...]) -> _Settings:
    """The ``SET`` options, refusing any other."""
    settings = _Settings()
    for option in options:
        if option.key == AUTO_WATERMARK_INTERVAL:
            settings = replace(settings, interval_ms=_duration_ms(option))
        elif option.key == SOURCE_IDLE_TIMEOUT:
            settings = replace(settings, idle_ms=_duration_ms(option), idle_option=option)
        elif option.key == STATE_TTL:
            settings = replace(settings, state_ttl=option)
        elif option.key == LOCAL_TIME_ZONE:
            settings = replace(settings, time_zone=option)
        else:
            raise _refused(option, f"SET {option.key!r}")
    return settings


def _driven_by_clock(
    insert: AggregatingInsert, settings: _Settings
) -> tuple[
    TumblingWindows | SlidingWindows | CumulativeWindows | SessionWindows | OverWindows,
    PerRecordTrigger | ProcessingTimeTrigger,
]:
    """The window and trigger of an insert that reads no watermark. A per-record aggregation
    is a processing-time session of gap the state TTL (none: it never ends) fired by every
    record; without a TTL a ``GROUP BY``'s ``GroupAggHelper`` skips an unchanged update, the
    ``OVER``'s ``ProcTimeUnboundedPrecedingFunction`` writes every one. A bounded ``OVER``
    ordered by processing time (:func:`_processing_over`) and a window over the ``PROCTIME()``
    column (:func:`_processing_window`) are fired by their timers."""
    if insert.over and not insert.per_record:
        return _processing_over(insert, settings), ProcessingTimeTrigger()
    if not insert.per_record:
        return _processing_window(insert, settings), ProcessingTimeTrigger()
    ttl = _state_ttl(settings)
    window = SessionWindows(gap_ms=ttl or NEVER_EXPIRES, domain="processing")
    return window, PerRecordTrigger(skip_unchanged=not ttl and not insert.processing_time)


def _processing_window(
    insert: AggregatingInsert, settings: _Settings
) -> TumblingWindows | SlidingWindows | CumulativeWindows | SessionWindows:
    """A window table-valued function over the ``PROCTIME()`` column: the event-time mapping's
    window in the processing domain. ``PROCTIME()`` is a ``TIMESTAMP_LTZ``, so Flink aligns the
    windows in ``table.local-time-zone`` (``TimeWindowUtil.getShiftTimeZone``), the JVM's own
    zone when not set: mapped where the script sets it to ``'UTC'``, whose windows start on
    the epoch's grid as the plugin's do."""
    zone = settings.time_zone
    if zone is None or zone.value != UTC:
        at = zone.at if zone is not None else insert.time_at or insert.at
        raise UnsupportedSqlError(
            f"a {insert.window} over the PROCTIME() column {insert.time_column} "
            + (f"in the time zone {zone.value!r}" if zone else f"without SET {LOCAL_TIME_ZONE!r}"),
            at.line,
            at.column,
            "Flink aligns processing-time windows in the session time zone, the JVM's unless "
            f"set: SET {LOCAL_TIME_ZONE!r} = {UTC!r} is mapped",
        )
    return _window(insert, "processing")


def _state_ttl(settings: _Settings) -> int:
    """``table.exec.state.ttl`` in milliseconds; 0 where not set (Flink's default, state kept
    forever)."""
    return _duration_ms(settings.state_ttl) if settings.state_ttl is not None else 0


def _insert(read: Script, target: str | None) -> AggregatingInsert:
    chosen = [i for i in read.inserts if target is None or i.target == target]
    if len(chosen) == 1:
        return chosen[0]
    if not chosen:
        named = f" into {target}" if target else ""
        raise UnsupportedSqlError(f"a script without an INSERT{named}", 1, 1)
    second = chosen[1].at
    raise UnsupportedSqlError(
        "a second INSERT", second.line, second.column, "name the one to map with insert="
    )


@dataclass(frozen=True)
class _Path:
    """A Kafka table the ``INSERT`` reads, and the views' projections between them, the
    table's first (none: the table itself)."""

    table: Table
    steps: tuple[tuple[View, Projection], ...] = ()


def _relation(read: Script, name: str) -> Table | View:
    relation = next((r for r in (*read.tables, *read.views) if r.name == name), None)
    assert relation is not None, name  # the reader refuses a query of an undeclared one
    return relation


def _sources(read: Script, insert: AggregatingInsert) -> list[_Path]:
    """Each Kafka table the ``INSERT`` reads (several through a ``UNION ALL``), checked, with
    the views it reads it through. The time column it names must be each table's watermarked
    column, passed through the views (renamed or not), of ``TIMESTAMP(3)``."""
    paths = _paths(read, insert.source, insert)
    for path in paths:
        _check_source(path, insert)
    return paths


def _paths(read: Script, name: str, insert: AggregatingInsert) -> list[_Path]:
    """The tables relation ``name`` reads, each with its views' projections; a table read
    twice (a ``UNION ALL`` of itself) is refused: one archive gives each record once."""
    table = next((t for t in read.tables if t.name == name), None)
    if table is not None:
        return [_Path(table)]
    view = next((v for v in read.views if v.name == name), None)
    if view is None:
        at = insert.at
        raise UnsupportedSqlError(
            f"the table {name}", at.line, at.column, "not declared in the script"
        )
    paths: list[_Path] = []
    for branch in view.branches:
        for path in _paths(read, branch.source, insert):
            joined = next((v for v, b in path.steps if b.lookup is not None), None)
            if joined is not None:
                raise UnsupportedSqlError(
                    f"the view {view.name} of view {joined.name}, which joins a lookup table",
                    view.at.line,
                    view.at.column,
                    "the INSERT reads a lookup join's view directly",
                )
            if any(p.table == path.table for p in paths):
                raise UnsupportedSqlError(
                    f"the view {view.name} reading table {path.table.name} twice",
                    view.at.line,
                    view.at.column,
                    "each of its records would be read twice; one archive gives it once",
                )
            paths.append(replace(path, steps=(*path.steps, (view, branch))))
    return paths


def _check_source(path: _Path, insert: AggregatingInsert) -> None:
    """A Kafka table the mapping reads exactly, and its time column the ``INSERT``'s."""
    table = path.table
    connector = table.option("connector")
    if connector is None or connector.value != "kafka":
        where = connector.at if connector else table.at
        found = connector.value if connector else "none"
        raise UnsupportedSqlError(
            f"the connector {found!r}", where.line, where.column, "the 'kafka' connector is mapped"
        )
    for option in table.options:
        if option.key.startswith(REFUSED_TABLE_OPTIONS) and option.key not in (
            SCAN_IDLE_TIMEOUT,
            EMIT_STRATEGY,
        ):
            raise _refused(option, f"the option {option.key!r}")
    if not insert.watermarked:
        return
    if table.watermark is None:
        raise UnsupportedSqlError(
            f"the table {table.name} without a WATERMARK",
            table.at.line,
            table.at.column,
            "OVER is mapped ordered by event time"
            if insert.over
            else "the windows are event-time windows",
        )
    at = insert.time_at or insert.at
    named = ("ORDER BY {}" if insert.over else "DESCRIPTOR({})").format(insert.time_column)
    time_column = insert.time_column
    for view, branch in reversed(path.steps):
        column = next(c for c in branch.columns if c.name == time_column)
        if column.passes is None:
            raise UnsupportedSqlError(
                named,
                at.line,
                at.column,
                f"the view {view.name} computes {time_column}: the watermarked column "
                f"{table.watermark.column} of {table.name} is the event time",
            )
        time_column = column.passes
    if time_column != table.watermark.column:
        raise UnsupportedSqlError(
            named,
            at.line,
            at.column,
            f"not the watermark's column {table.watermark.column}"
            + (f" (it is {table.name}'s {time_column})" if path.steps else ""),
        )
    time = next(c for c in table.columns if c.name == table.watermark.column)
    if time.type != "TIMESTAMP(3)":
        raise _refused(
            time,
            f"the event-time type {time.type}",
            "TIMESTAMP(3) is mapped (TIMESTAMP_LTZ windows follow table.local-time-zone)",
        )


def _projected(topic: ArchivedTopic, path: _Path) -> ArchivedTopic:
    """The topic as the views give its records: each view's columns computed from the one
    before (after the archive's own ``transform``, if any), beside the archive's columns,
    which the backfill reads for partition, offset and event time. A record a view's
    ``WHERE`` leaves out is kept, marked (:data:`VIEW_KEEPS`): Flink filters it after the
    source, so it still takes processing time and moves the watermark."""
    if not path.steps:
        return topic
    archived = {topic.partition_col, topic.offset_col, topic.timestamp_col}
    for view, branch in path.steps:
        for column in branch.columns:
            if column.name in archived and column.passes != column.name:
                raise UnsupportedSqlError(
                    f"the view {view.name}'s column {column.name}",
                    column.at.line,
                    column.at.column,
                    f"the archive of topic {topic.name!r} reads {column.name} as its "
                    "partition, offset or time column: name the view's column otherwise",
                )
    # A column computed from a lookup table is computed after the lookup (the aggregates read
    # its expression: ``StreamJob.derived``).
    steps = [
        (view, replace(branch, columns=tuple(c for c in branch.columns if not c.enriched)))
        for view, branch in path.steps
    ]
    earlier = topic.transform
    first_view, first = steps[0]
    read = [*(c.expression for c in first.columns), *([first.where] if first.where else [])]
    needed = list(dict.fromkeys(c for e in read for c in expression_columns(e)))

    def project(records: DataFrame) -> DataFrame:
        if earlier is not None:
            records = earlier.apply(records)
        missing = [c for c in needed if c not in records.columns]
        if missing:
            raise BadArchiveError(
                f"{topic.where}: no column {', '.join(missing)}, which the Flink SQL view "
                f"{first_view.name} reads from table {first.source}"
            )
        keeps = F.lit(True)
        for _, branch in steps:
            if branch.where is not None:
                keeps = keeps & F.coalesce(F.expr(branch.where), F.lit(False))
            columns = {c.name: F.expr(c.expression) for c in branch.columns}
            records = records.withColumns({**columns, VIEW_KEEPS: keeps})
            keeps = F.col(VIEW_KEEPS)
        return records

    # What the projections compute, not where the script writes them: the emission log's
    # fingerprint holds it, and a script reformatted computes the same.
    selects = [
        f"SELECT {', '.join(f'{c.expression} AS `{c.name}`' for c in b.columns)} FROM {b.source}"
        + (f" WHERE {b.where}" if b.where else "")
        for _, b in steps
    ]
    code = "; ".join([*([earlier.code] if earlier else []), *selects])
    return replace(topic, transform=RecordTransform(code, project))


def _lookups(
    read: Script, paths: list[_Path], insert: AggregatingInsert, states: Mapping[str, StateSource]
) -> list[Lookup]:
    """The lookup join of the view the ``INSERT`` reads, if it has one, as the plugin's
    processing-time :class:`Lookup` of the table's history in ``states``: the version valid
    when the job processes the record (Flink's lookup join asks the database then; no cache),
    of the columns the aggregates read (named :func:`lookup_column`)."""
    joins = [(v, b.lookup) for path in paths for v, b in path.steps if b.lookup is not None]
    if not joins:
        return []
    (view, join), *_ = joins
    table = _relation(read, join.table)
    assert isinstance(table, Table)  # the reader takes a lookup join of tables only
    _check_lookup_table(table, join)
    source = states.get(join.table)
    if source is None:
        raise ValueError(
            f"no state given for the lookup table {join.table!r} of view {view.name}: pass "
            f"states={{{join.table!r}: ScdTable(...) | CdcLog(...) | DeltaHistory(...)}}"
        )
    on = dict(join.on)
    if sorted(on.values()) != sorted(source.keys):
        raise UnsupportedSqlError(
            f"the lookup join on {', '.join(on.values())}",
            join.at.line,
            join.at.column,
            f"the {source.where} is keyed by {', '.join(source.keys)}: the join's ON must "
            "compare each of its keys, once",
        )
    aggregated = [
        c for a in insert.aggregates if a.expression for c in expression_columns(a.expression)
    ]
    keys = set(on.values())
    columns = [c.name for c in table.columns if c.name not in keys]
    attributes = [c for c in columns if lookup_column(table.name, c) in aggregated]
    if not attributes and not columns:
        raise UnsupportedSqlError(
            f"the lookup table {table.name} of key columns only",
            table.at.line,
            table.at.column,
            "a lookup reads a column beside the keys",
        )
    return [
        Lookup(
            source,
            attributes or columns[:1],  # an inner join that only filters reads one
            on=on,
            time="processing",
            how="inner" if join.inner else "left",
            prefix=lookup_column(table.name, ""),
        )
    ]


def _check_lookup_table(table: Table, join: LookupJoin) -> None:
    """A table the mapping looks up as its history says: not a Kafka table, no cache."""
    connector = table.option("connector")
    if connector is not None and connector.value == "kafka":
        raise UnsupportedSqlError(
            f"the lookup join of the Kafka table {table.name}",
            join.at.line,
            join.at.column,
            "a lookup table is a database's",
        )
    for option in table.options:
        if option.key.startswith(REFUSED_LOOKUP_OPTIONS):
            raise _refused(
                option,
                f"the lookup table's option {option.key!r}",
                "a cache (or an asynchronous lookup) answers with a row other than the one "
                "valid when the record is processed: the backfill reads that one",
            )


def _where(insert: AggregatingInsert, paths: list[_Path]) -> str | None:
    """The records the aggregation reads: those every view's ``WHERE`` and the ``INSERT``'s
    keep."""
    if not any(b.where for path in paths for _, b in path.steps):
        return insert.where
    kept = f"`{VIEW_KEEPS}`"
    return kept if insert.where is None else f"{kept} AND ({insert.where})"


def _argument(aggregate: Aggregate) -> str:
    """The derived column holding an aggregate's expression, per record."""
    return f"{aggregate.name}_argument"


#: The SQL types of an aggregate's expression the plugin's functions give Flink's results for:
#: Flink's SUM keeps its argument's type (an INT wraps past 2^31, a DECIMAL keeps its scale),
#: AVG too (of a BIGINT, an integer division), MIN and MAX any number but a FLOAT's.
_EXACT_TYPES = {
    "sum": ("DOUBLE", "BIGINT"),
    "mean": ("DOUBLE",),
    "min": ("DOUBLE", "BIGINT", "INT"),
    "max": ("DOUBLE", "BIGINT", "INT"),
}


def _check_types(insert: AggregatingInsert, types: Mapping[str, str]) -> None:
    """Flink's aggregates keep their argument's type (``SumAggFunction`` of an INT wraps past
    2^31; ``AvgAggFunction`` of a BIGINT divides as longs, AVG(3, 8) = 5); the plugin's sum is
    a long or a double, its mean a double. An aggregate of a column or an expression (of a
    table or view, ``types``) is mapped where its type gives the plugin's result
    (:data:`_EXACT_TYPES`)."""
    for aggregate in insert.aggregates:
        allowed = _EXACT_TYPES.get(aggregate.function)
        if aggregate.expression is not None:
            found = aggregate.expression_type
            what = f"an expression of type {found}"
        else:
            found = types.get(aggregate.column or "")
            what = f"the {found} column {aggregate.column}"
        if allowed is None or found is None or found in allowed:
            continue
        hint = (
            "to count the records a condition holds for, COUNT(CASE WHEN condition THEN 1 END)"
            if aggregate.expression is not None
            else "declare the column " + " or ".join(allowed)
        )
        raise UnsupportedSqlError(
            f"{_SQL_NAMES[aggregate.function]} of {what}",
            aggregate.at.line,
            aggregate.at.column,
            f"Flink's result keeps that type; {', '.join(allowed)} are mapped ({hint})",
        )


#: SQL's name of each aggregate function.
_SQL_NAMES = {function: name for name, function in AGGREGATES.items()}


def _topic(table: Table, archives: Mapping[str, ArchivedTopic | str]) -> ArchivedTopic:
    """The table's archive, reading its event time from the watermark's column (without a
    ``WATERMARK``, from the archive's own time column: processing times are inferred from
    it)."""
    name = table.option("topic")
    if name is None:
        raise UnsupportedSqlError(
            f"the table {table.name} without a 'topic'",
            table.at.line,
            table.at.column,
            "one topic per table is mapped ('topic-pattern' and lists are not)",
        )
    given = archives.get(table.name, archives.get(name.value))
    if given is None:
        raise ValueError(
            f"no archive given for the Kafka table {table.name!r} (topic {name.value!r})"
        )
    topic = ArchivedTopic(name.value, path=given) if isinstance(given, str) else given
    if topic.name != name.value:
        raise ValueError(
            f"table {table.name!r} reads topic {name.value!r}, its archive is of topic "
            f"{topic.name!r}"
        )
    if table.watermark is None:
        return topic
    return replace(topic, timestamp_col=table.watermark.column)


def _watermarks(
    settings: _Settings, paths: list[_Path], topics: list[ArchivedTopic]
) -> tuple[WatermarkStrategy, list[ArchivedTopic]]:
    """The job's watermark strategy, the first table's, and the topics, each with its own
    table's bound where it differs. Each table's source makes its own watermarks; the plugin
    models one emission and one idle timeout for all of them: tables that differ in either
    are refused."""
    strategies = [_watermark(settings, path.table) for path in paths]
    job = strategies[0]
    for path, strategy in zip(paths[1:], strategies[1:], strict=True):
        for option, name in ((EMIT_STRATEGY, "emission"), (SCAN_IDLE_TIMEOUT, "idle_timeout_ms")):
            if getattr(strategy, name) != getattr(job, name):
                at = path.table.option(option) or paths[0].table.option(option) or path.table
                raise UnsupportedSqlError(
                    f"the tables {paths[0].table.name} and {path.table.name} with different "
                    f"{option!r}",
                    at.at.line,
                    at.at.column,
                    "one watermark emission and idle timeout for all the tables is modelled",
                )
    if len(paths) > 1 and job.idle_timeout_ms:
        table = paths[0].table
        at = (table.option(SCAN_IDLE_TIMEOUT) or settings.idle_option or table).at
        raise UnsupportedSqlError(
            f"an idle timeout with the {len(paths)} tables of a UNION ALL",
            at.line,
            at.column,
            "idleness across sources (Flink's StatusWatermarkValve) is not modelled yet: one "
            "table, or no idleness",
        )
    bounds = [s.out_of_orderness_ms for s in strategies]
    return job, [
        replace(t, out_of_orderness_ms=None if b == job.out_of_orderness_ms else b)
        for t, b in zip(topics, bounds, strict=True)
    ]


def _watermark(settings: _Settings, table: Table) -> WatermarkStrategy:
    interval_ms, idle_ms = settings.interval_ms, settings.idle_ms
    scan_idle = table.option(SCAN_IDLE_TIMEOUT)
    if scan_idle is not None:
        idle_ms = _duration_ms(scan_idle)
    emit = table.option(EMIT_STRATEGY)
    emission = "periodic"
    if emit is not None:
        if emit.value not in ("on-event", "on-periodic"):
            raise _refused(emit, f"{EMIT_STRATEGY} {emit.value!r}")
        emission = "on_event" if emit.value == "on-event" else "periodic"
    assert table.watermark is not None
    bound = table.watermark
    if bound.bound_ms < 1:
        raise UnsupportedSqlError(
            f"the watermark bound of {bound.bound_ms} ms",
            bound.at.line,
            bound.at.column,
            "Flink SQL's watermark is ts - B where DataStream's is max(ts) - B' - 1, so "
            "B' = B - 1, and B' must be >= 0",
        )
    if emission == "periodic" and interval_ms == 0:
        raise UnsupportedSqlError(
            f"{AUTO_WATERMARK_INTERVAL} = 0 with periodic watermarks",
            bound.at.line,
            bound.at.column,
            "Flink never asks the generator to emit: no window fires",
        )
    return WatermarkStrategy(
        out_of_orderness_ms=bound.bound_ms - 1,
        interval_ms=interval_ms,
        emission=emission,
        idle_timeout_ms=idle_ms or None,
    )


def _processing_over(insert: AggregatingInsert, settings: _Settings) -> OverWindows:
    """A bounded ``OVER`` ordered by processing time; the state TTL clears a ``ROWS`` frame's
    keys only, and only above 1 ms (Flink's cleaning is off at 0 and 1)."""
    if insert.frame != ROWS:
        return OverWindows(preceding_ms=insert.preceding_ms, domain="processing")
    ttl = _state_ttl(settings)
    return OverWindows(
        frame="rows",
        preceding_rows=insert.preceding_rows,
        domain="processing",
        state_ttl_ms=ttl if ttl > 1 else None,
    )


def _window(
    insert: AggregatingInsert, domain: Domain = "event"
) -> TumblingWindows | SlidingWindows | CumulativeWindows | SessionWindows | OverWindows:
    """The insert's window: a window TVF's placed by ``domain``'s time, an ``OVER``'s ordered
    by event time (:func:`_processing_over` maps those ordered by processing time)."""
    if insert.over and insert.frame == ROWS:
        return OverWindows(frame="rows", preceding_rows=insert.preceding_rows)
    if insert.over:
        return OverWindows(preceding_ms=insert.preceding_ms)
    if insert.window == "SESSION":
        return SessionWindows(gap_ms=insert.size_ms, domain=domain)
    if insert.slide_ms is None:
        return TumblingWindows(size_ms=insert.size_ms, domain=domain)
    if insert.size_ms % insert.slide_ms:
        what = "slide" if insert.window == "HOP" else "step"
        raise UnsupportedSqlError(
            f"a {insert.window} of size {insert.size_ms} ms and {what} {insert.slide_ms} ms",
            insert.at.line,
            insert.at.column,
            f"Flink's sliced {insert.window} windows need the {what} to divide the size",
        )
    if insert.window == "CUMULATE":
        return CumulativeWindows(size_ms=insert.size_ms, step_ms=insert.slide_ms, domain=domain)
    return SlidingWindows(size_ms=insert.size_ms, slide_ms=insert.slide_ms, domain=domain)


def _check_in_order(spark: SparkSession, topic: ArchivedTopic, table: Table) -> None:
    """Refuse an archive with a partition whose event time decreases from one offset to the
    next: there, SQL's periodic watermark (the last record's) is below the highest's."""
    records = read_records(spark, topic, [topic.timestamp_col])
    previous = F.lag(EVENT_TIME).over(Window.partitionBy(PARTITION).orderBy(OFFSET))
    back = records.withColumn("_previous_et", previous).where(
        F.col(EVENT_TIME) < F.col("_previous_et")
    )
    late = back.orderBy(PARTITION, OFFSET).first()
    if late is not None:
        raise UnsupportedSqlError(
            "periodic watermarks over out-of-order records",
            table.at.line,
            table.at.column,
            f"topic {topic.name!r} partition {late[PARTITION]} offset {late[OFFSET]} goes "
            "back in event time, where Flink SQL's periodic watermark (the last record's "
            "ts - B) is not the highest record's: set 'scan.watermark.emit.strategy' = "
            "'on-event', or backfill it as a DataStream job",
        )


def _check_no_nan(
    spark: SparkSession,
    topic: ArchivedTopic,
    insert: AggregatingInsert,
    types: Mapping[str, str],
    lookups: list[Lookup],
) -> None:
    """Refuse an archive with a NaN in a floating-point column that ``MIN`` or ``MAX`` reads.
    Flink SQL's ``MIN`` keeps a value only if it is below the current one (``operand <
    min``), so a NaN that comes first sticks and one that comes later is skipped; the
    plugin's, as a DataStream job's ``Math.min``, makes any NaN the result. Of a value computed
    from a lookup table (known only once each record's version is), the archive's columns and
    the table's history it reads must hold no NaN and no infinity (whose products can be
    NaN)."""
    read = [
        a
        for a in insert.aggregates
        if a.function in ("min", "max")
        and (a.expression_type or types.get(a.column or "", "")).startswith(FLOATING)
    ]
    added = {c for lookup in lookups for c in lookup.outputs}
    enriched = [a for a in read if a.expression and added & set(expression_columns(a.expression))]
    for aggregate in enriched:
        _check_finite(spark, topic, aggregate, lookups)
    read = [a for a in read if a not in enriched]
    if not read:
        return
    values = [F.expr(a.expression) if a.expression else F.col(a.column) for a in read]
    columns = list(
        dict.fromkeys(
            c
            for a in read
            for c in (expression_columns(a.expression) if a.expression else [a.column])
        )
    )
    records = read_records(spark, topic, columns)
    nan = F.lit(False)
    for value in values:
        nan = nan | F.isnan(value)
    found = records.where(nan).orderBy(PARTITION, OFFSET).first()
    if found is not None:
        at = read[0].at
        raise UnsupportedSqlError(
            f"{read[0].function.upper()} of {read[0].column or read[0].expression} over an "
            "archive with NaN",
            at.line,
            at.column,
            f"topic {topic.name!r} partition {found[PARTITION]} offset {found[OFFSET]} has a NaN "
            f"in {', '.join(columns)}: Flink SQL's MIN and MAX keep a NaN that comes first and "
            "skip one that comes later, which the plugin does not model",
        )


def _check_finite(
    spark: SparkSession, topic: ArchivedTopic, aggregate: Aggregate, lookups: list[Lookup]
) -> None:
    """Refuse NaN and infinite values in what ``aggregate``'s expression reads of the archive
    and of the lookup tables' histories."""
    assert aggregate.expression is not None
    read = set(expression_columns(aggregate.expression))
    prefixes = tuple(lookup.prefix for lookup in lookups)
    records = read_records(spark, topic, sorted(c for c in read if not c.startswith(prefixes)))
    row = records.where(_not_finite(records, read)).orderBy(PARTITION, OFFSET).first()
    found = None
    if row is not None:
        found = f"topic {topic.name!r} partition {row[PARTITION]} offset {row[OFFSET]}"
    for lookup in lookups:
        attributes = [
            a for a, o in zip(lookup.attributes, lookup.outputs, strict=True) if o in read
        ]
        versions = lookup.source.versions(spark, attributes)
        if found is None and versions.where(_not_finite(versions, attributes)).first():
            found = f"the {lookup.source.where}"
    if found is not None:
        at = aggregate.at
        raise UnsupportedSqlError(
            f"{aggregate.function.upper()} of {aggregate.expression} over NaN or infinite values",
            at.line,
            at.column,
            f"{found} has one: Flink SQL's MIN and MAX keep a NaN that comes first and skip "
            "one that comes later, which the plugin does not model",
        )


def _not_finite(df: DataFrame, columns: Collection[str]) -> PySparkColumn:
    """True where one of ``columns`` (its floating-point ones) is NaN or infinite."""
    bad = F.lit(False)
    for field in df.schema.fields:
        if field.name in columns and isinstance(field.dataType, DoubleType | FloatType):
            bad = bad | F.isnan(field.name) | (F.abs(field.name) == float("inf"))
    return bad


def _duration_ms(option: SetOption | TableOption) -> int:
    """A Flink duration (``TimeUtils.parseDuration``: ``200ms``, ``1 min``, ``5 s``)."""
    text = option.value.strip().lower()
    digits = len(text) - len(text.lstrip("0123456789"))
    unit = text[digits:].strip()
    if not digits or unit not in _UNITS:
        raise _refused(option, f"the duration {option.value!r}")
    return int(text[:digits]) * _UNITS[unit]


def _refused(
    item: SetOption | TableOption | Column, construct: str, why: str = ""
) -> UnsupportedSqlError:
    return UnsupportedSqlError(construct, item.at.line, item.at.column, why)
