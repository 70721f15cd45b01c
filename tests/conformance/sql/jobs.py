"""Flink SQL jobs for the SQL conformance harness: random scripts over random archives, and
hand-written ones.

A job reads one Kafka table ``events (keys..., amount, ts TIMESTAMP(3))`` and inserts a
TUMBLE, HOP, CUMULATE or SESSION aggregation of ``amount``, an unbounded ``GROUP BY`` with
or without a state TTL (its table with or without a WATERMARK; without a TTL, a third of its
amounts 0, so that some updates change nothing), or an ``OVER`` aggregation ordered by
``ts`` (inline or a named ``WINDOW``; a RANGE or ROWS before the current row, or from
UNBOUNDED PRECEDING, with or without ``BETWEEN``, or no frame written). What varies: the
window's size and slide (or step, or SESSION's gap, or the TTL, or OVER's frame), the
watermark bound B (>= 1 ms: B = 0 is refused), the aggregates (SUM, COUNT(*), COUNT, AVG, MIN,
MAX), the emit strategy (periodic by default or named, or on-event), the interval (set or
Flink's 200 ms), idleness (off, ``scan.watermark.idle-timeout``, ``table.exec.source
.idle-timeout``, or both: the table's wins), one or two key columns, one to three partitions,
times near 0 or at a realistic epoch instant. Periodic jobs get archives whose event times never
go back within a partition (``job_from_sql`` refuses the others, rightly); on-event ones also
get shuffled ones. Some partitions stop early or pause, so that idleness acts. Some jobs read
the table through a view that renames the key or time column, computes ``amount`` or filters
(:func:`_with_view`). Some OVERs are ordered by the table's ``PROCTIME()`` column instead:
from UNBOUNDED PRECEDING in place of a GROUP BY (:func:`proc_time_over`), or of a bounded
frame, a ROWS with or without a state TTL (:func:`proc_time_bounded`). Some windows are
over that column (:func:`proc_time_window`), the table with or without its WATERMARK.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import replace

from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from tests.conformance.scenarios import BASE
from tests.conformance.sql.harness import (
    LOOKUP_TABLE,
    SECOND_COLUMNS,
    SECOND_TABLE,
    TABLE,
    LookupTable,
    SqlJob,
    processing_order,
)
from tests.reference_simulator import Record

#: (SQL, output name stem) per aggregate function; COUNT appears with * and with the column.
AGGREGATES = {
    "SUM": "SUM({})",
    "COUNT(*)": "COUNT(*)",
    "COUNT": "COUNT({})",
    "AVG": "AVG({})",
    "MIN": "MIN({})",
    "MAX": "MAX({})",
}


def _interval(ms: int) -> str:
    """An interval literal of ``ms`` milliseconds: MINUTE when whole minutes, else SECOND
    (Flink SQL has no MILLISECOND unit; SECOND's default precision holds up to 99)."""
    if ms % 60_000 == 0:
        return f"INTERVAL '{ms // 60_000}' MINUTE"
    if ms >= 100_000:
        raise ValueError(f"{ms} ms: not a whole number of minutes, above SECOND's 99")
    return f"INTERVAL '{ms / 1000:g}' SECOND"


def script(
    keys: tuple[str, ...],
    value_type: str,
    size: int,
    slide: int,
    bound: int,
    functions: list[str],
    *,
    emit: str | None = None,
    interval: int | None = None,
    scan_idle: int | None = None,
    set_idle: int | None = None,
    cumulate: bool = False,
    session: bool = False,
    ttl: int = 0,
    watermark: bool = True,
    where: str | None = None,
    argument: str = "amount",
    over: int | None = None,
    named_window: bool = True,
    over_rows: int | None = None,
    over_unbounded: str = "",
    frame_style: str = "between",
) -> str:
    """The script: ``SET``s, the Kafka table, the ``INSERT`` (``slide``: CUMULATE's step
    with ``cumulate``, else HOP's; 0: TUMBLE; ``session``: SESSION with gap ``size``,
    partitioned by the keys; ``ttl`` > 0: an unbounded GROUP BY with that state TTL, the
    table's WATERMARK only with ``watermark``; ``where``: a WHERE clause; ``argument``: what
    the aggregates but COUNT(*) take; ``over`` not None: an OVER aggregation of ``RANGE
    BETWEEN over PRECEDING AND CURRENT ROW``, ``over_rows`` not None: of ``ROWS BETWEEN
    over_rows PRECEDING AND CURRENT ROW``, ``over_unbounded`` "range" or "rows": of that
    frame from ``UNBOUNDED PRECEDING``, each selecting ``ts``, its window named by a ``WINDOW``
    clause with ``named_window``, else written in each aggregate; ``frame_style``
    ``"between"`` writes ``BETWEEN ... AND CURRENT ROW``, ``"short"`` the bound alone,
    ``"none"`` no frame, SQL's ``RANGE UNBOUNDED PRECEDING``)."""
    sets = [f"SET 'table.exec.state.ttl' = '{ttl} ms';"] if ttl else []
    if interval is not None:
        sets.append(f"SET 'pipeline.auto-watermark-interval' = '{interval}ms';")
    if set_idle is not None:
        sets.append(f"SET 'table.exec.source.idle-timeout' = '{set_idle} ms';")
    options = ["'connector' = 'kafka'", f"'topic' = '{TABLE}'", "'format' = 'json'"]
    if emit is not None:
        options.append(f"'scan.watermark.emit.strategy' = '{emit}'")
    if scan_idle is not None:
        options.append(f"'scan.watermark.idle-timeout' = '{scan_idle}ms'")
    columns = ", ".join(f"{k} STRING" for k in keys)
    partition = keys[0] if len(keys) == 1 else f"({', '.join(keys)})"
    window = (
        f"SESSION(TABLE {TABLE} PARTITION BY {partition}, DESCRIPTOR(ts), {_interval(size)})"
        if session
        else f"{'CUMULATE' if cumulate else 'HOP'}(TABLE {TABLE}, DESCRIPTOR(ts), "
        f"{_interval(slide)}, {_interval(size)})"
        if slide
        else f"TUMBLE(TABLE {TABLE}, DESCRIPTOR(ts), {_interval(size)})"
    )
    group = ", ".join(keys)
    is_over = over is not None or over_rows is not None or bool(over_unbounded)
    frame = f"PARTITION BY {group} ORDER BY ts"
    frame += _frame(over, over_rows, over_unbounded, frame_style) if is_over else ""
    window_of = "" if not is_over else " OVER w" if named_window else f" OVER ({frame})"
    selected = ", ".join(
        f"{AGGREGATES[f].format(argument)}{window_of} AS a{i}" for i, f in enumerate(functions)
    )
    table = [
        f"CREATE TABLE {TABLE} (",
        f"  {columns}, amount {value_type}, ts TIMESTAMP(3)"
        + (f",\n  WATERMARK FOR ts AS ts - {_interval(bound)}" if watermark else ""),
        f") WITH ({', '.join(options)});",
    ]
    filtered = [f"WHERE {where}"] if where else []
    if is_over:
        query = ["INSERT INTO rolling", f"SELECT {group}, ts, {selected}", f"FROM {TABLE}"]
        query += filtered
        query[-1] += f"\nWINDOW w AS ({frame});" if named_window else ";"
    elif ttl:
        query = ["INSERT INTO totals", f"SELECT {group}, {selected}", f"FROM {TABLE}", *filtered]
        query.append(f"GROUP BY {group};")
    else:
        query = ["INSERT INTO windowed", f"SELECT {group}, window_start, window_end, {selected}"]
        query += [f"FROM TABLE({window})", *filtered]
        query.append(f"GROUP BY {group}, window_start, window_end;")
    return "\n".join([*sets, *table, *query, ""])


def _frame(over: int | None, rows: int | None, unbounded: str, style: str) -> str:
    """An OVER window's frame after its ORDER BY (with its leading space; "" for none)."""
    if unbounded:
        bound, unit = "UNBOUNDED", unbounded.upper()
    else:
        bound, unit = (_interval(over), "RANGE") if over is not None else (str(rows), "ROWS")
    if style == "none":
        assert unit == "RANGE" and bound == "UNBOUNDED", "no frame written is RANGE UNBOUNDED"
        return ""
    if style == "short":
        return f" {unit} {bound} PRECEDING"
    return f" {unit} BETWEEN {bound} PRECEDING AND CURRENT ROW"


Predicate = Callable[[Record], bool]


def _user(r: Record) -> str:
    return r.key.split("|")[0]


def _java(compare: Callable[[float], bool]) -> Callable[[Record], bool]:
    """A comparison of ``amount`` as Java compares doubles: false with a NaN."""
    return lambda r: not math.isnan(r.value) and compare(r.value)


def _where(rng: random.Random) -> tuple[str, Predicate]:
    """A WHERE clause and how Flink evaluates it: comparisons of ``amount`` (a NaN compares
    false, ``<>`` true), of ``user_id``, ``IN``, arithmetic, ``CASE``, ``AND``/``OR``."""
    k, u = rng.randint(2, 8), f"u{rng.randint(0, 2)}"
    simple: list[tuple[str, Predicate]] = [
        (f"amount > {k}", _java(lambda v: v > k)),
        (f"amount <= {k}", _java(lambda v: v <= k)),
        (f"amount <> {k}", lambda r: math.isnan(r.value) or r.value != k),
        (f"amount = {k}", _java(lambda v: v == k)),
        (f"amount * 2 >= {2 * k + 1}", _java(lambda v: v * 2 >= 2 * k + 1)),
        (f"user_id <> '{u}'", lambda r: _user(r) != u),
        (f"user_id IN ('{u}', 'u9')", lambda r: _user(r) == u),
        (
            f"CASE WHEN user_id = '{u}' THEN amount > {k} ELSE amount < {k} END",
            lambda r: _java(lambda v: v > k)(r) if _user(r) == u else _java(lambda v: v < k)(r),
        ),
    ]
    (a, fa), (b, fb) = rng.sample(simple, 2)
    # AND of one amount and one user_id test: two of amount's can contradict, and the planner
    # then replaces the whole query by an empty VALUES (nothing to run).
    (u_test, fu) = rng.choice([c for c in simple if c[0].startswith("user_id")])
    (a_test, famount) = rng.choice([c for c in simple if c[0].startswith("amount")])
    return rng.choice(
        [
            (a, fa),
            (f"{a_test} AND {u_test}", lambda r: famount(r) and fu(r)),
            (f"{a} OR {b}", lambda r: fa(r) or fb(r)),
        ]
    )


def _argument(rng: random.Random) -> tuple[str, Callable[[Record], float]]:
    """An expression the aggregates take instead of ``amount``, and its value as Flink
    computes it (never null; a NaN amount compares false)."""
    k, u = rng.randint(2, 8), f"u{rng.randint(0, 2)}"
    return rng.choice(
        [
            ("amount * 2", lambda r: r.value * 2),
            ("-amount + 1", lambda r: -r.value + 1),
            (
                f"CASE WHEN user_id = '{u}' THEN amount ELSE 0 END",
                lambda r: r.value if _user(r) == u else 0.0,
            ),
            (
                f"CASE WHEN amount > {k} THEN amount ELSE amount * 3 END",
                lambda r: r.value if _java(lambda v: v > k)(r) else r.value * 3,
            ),
        ]
    )


#: The view a job's INSERT may read instead of the table, and its names for ``user_id``
#: and ``ts`` when it renames them.
VIEW, CUSTOMER, EVENT_TS = "viewed", "customer", "event_ts"


def _with_view(job: SqlJob, rng: random.Random) -> SqlJob:
    """``job`` reading the table through a view: ``SELECT *`` with a ``WHERE``, or columns
    renaming ``user_id`` or ``ts``, computing ``amount`` (an expression of the table's, as
    the aggregates take) and with or without a ``WHERE``; the INSERT reads the view's names."""
    where, keep = _where(rng) if rng.random() < 0.6 else (None, None)
    # Beside the INSERT's WHERE, a view's WHERE or computed amount can contradict it: the
    # planner then runs no query. Such a view renames only.
    plain = job.where is not None
    if plain:
        where, keep = None, None
    while keep is not None and sum(map(keep, job.records)) < len(job.records) / 3:
        where, keep = _where(rng)  # one that leaves the windows records to fire with
    if rng.random() < 0.25 and where:
        select, rename_user, rename_ts, value, value_of = "*", False, False, None, None
    else:
        rename_user, rename_ts = rng.random() < 0.5, rng.random() < 0.5
        value, value_of = _argument(rng) if rng.random() < 0.6 and not plain else (None, None)
        columns = [f"user_id AS {CUSTOMER}" if rename_user else "user_id"]
        columns += ["region"] if "region" in job.keys else []
        columns.append(f"{value} AS amount" if value else "amount")
        columns.append(f"ts AS {EVENT_TS}" if rename_ts else "ts")
        select = ", ".join(columns)
    head, insert = job.script.split("INSERT INTO", 1)
    view = [f"CREATE TEMPORARY VIEW {VIEW} AS", f"SELECT {select}", f"FROM {TABLE}"]
    view += [f"WHERE {where}"] if where else []
    insert = re.sub(rf"\b{TABLE}\b", VIEW, insert)
    if rename_user:
        insert = re.sub(r"\buser_id\b", CUSTOMER, insert)
    if rename_ts:
        insert = re.sub(r"\bts\b", EVENT_TS, insert)
    keys = tuple(CUSTOMER if k == "user_id" and rename_user else k for k in job.keys)
    return replace(
        job,
        script=head + "\n".join(view) + ";\nINSERT INTO" + insert,
        view_keys=keys if rename_user else (),
        view_where=keep,
        view_value=value_of,
    )


def _second(sql: str) -> str:
    """``sql`` over ``events``' columns written with the second table's names."""
    for name, second in SECOND_COLUMNS.items():
        sql = re.sub(rf"\b{name}\b", second, sql)
    return sql


def _with_union(job: SqlJob, rng: random.Random) -> SqlJob:
    """``job`` reading two Kafka tables through a view's ``UNION ALL``: some of its partitions
    move to a second table (:data:`SECOND_TABLE`) with its own column names and watermark
    bound (the emission option alike); its branch may compute ``amount`` or filter. A job of
    one partition, or with idleness (refused across tables), is returned as it is."""
    partitions = sorted({r.partition for r in job.records})
    if len(partitions) < 2 or job.idle:  # idleness across tables: refused by the mapping
        return job
    moved = set(rng.sample(partitions, rng.randint(1, len(partitions) - 1)))
    records = [replace(r, topic=SECOND_TABLE) if r.partition in moved else r for r in job.records]
    second = [r for r in records if r.topic == SECOND_TABLE]
    where, keep = _where(rng) if rng.random() < 0.5 else (None, None)
    value, value_of = _argument(rng) if rng.random() < 0.5 else (None, None)
    if job.where is not None:  # beside the INSERT's WHERE, these can contradict it
        where, keep, value, value_of = None, None, None, None
    while keep is not None and sum(map(keep, second)) < len(second) / 3:
        where, keep = _where(rng)
    head, insert = job.script.split("INSERT INTO", 1)
    ddl = re.search(rf"CREATE TABLE {TABLE} \(.*?\) WITH \(.*?\);\n", head, re.S).group(0)
    table = _second(ddl).replace(f"CREATE TABLE {TABLE} ", f"CREATE TABLE {SECOND_TABLE} ")
    table = table.replace(f"'topic' = '{TABLE}'", f"'topic' = '{SECOND_TABLE}'")
    unit = 1000 if job.size >= 5_000 else 1  # a job's lengths are of 5 units or more
    bound = rng.choice([1, 2, 5, 10, 25]) if unit == 1 else rng.choice([1, 500, 5000])
    table = re.sub(r"event_time - INTERVAL '[^']*' \w+", f"event_time - {_interval(bound)}", table)
    keys = ", ".join(job.keys)
    renamed = ", ".join(f"{_second(k)} AS {k}" if _second(k) != k else k for k in job.keys)
    view = [
        f"CREATE TEMPORARY VIEW {VIEW} AS",
        f"SELECT {keys}, amount, ts FROM {TABLE}",
        "UNION ALL",
        f"SELECT {renamed}, {_second(value or 'amount')} AS amount, event_time AS ts "
        f"FROM {SECOND_TABLE}" + (f" WHERE {_second(where)}" if where else ""),
    ]
    insert = re.sub(rf"\b{TABLE}\b", VIEW, insert)
    return replace(
        job,
        script=head + table + "\n".join(view) + ";\nINSERT INTO" + insert,
        records=records,
        view_where=(lambda r: r.topic != SECOND_TABLE or keep(r)) if keep else None,
        view_value=(lambda r: value_of(r) if r.topic == SECOND_TABLE else r.value)
        if value_of
        else None,
    )


#: The view of a lookup join, and the lookup table's connector options (the harness serves the
#: table's versions in place of the database).
SCALED = "scaled"
LOOKUP_OPTIONS = (
    "'connector' = 'jdbc', 'url' = 'jdbc:postgresql://db:5432/features', "
    f"'table-name' = '{LOOKUP_TABLE}'"
)


def lookup_script(job: SqlJob, value: str, inner: bool, where: str | None) -> str:
    """``job``'s script reading ``events`` through a view of its lookup join of
    :data:`LOOKUP_TABLE` at its ``PROCTIME()`` column, the view's ``amount`` ``value`` (over
    ``e`` and ``t``), its ``WHERE`` ``where`` (over ``e``)."""
    head, insert = job.script.split("INSERT INTO", 1)
    head = head.replace("ts TIMESTAMP(3)", "ts TIMESTAMP(3), proc_time AS PROCTIME()", 1)
    table = [
        f"CREATE TABLE {LOOKUP_TABLE} (",
        f"  user_id STRING, factor {job.value_type}, PRIMARY KEY (user_id) NOT ENFORCED",
        f") WITH ({LOOKUP_OPTIONS});",
    ]
    keys = ", ".join(f"e.{k}" for k in job.keys)
    view = [
        f"CREATE TEMPORARY VIEW {SCALED} AS",
        f"SELECT {keys}, {value} AS amount, e.ts",
        f"FROM {TABLE} AS e {'' if inner else 'LEFT '}JOIN {LOOKUP_TABLE} "
        "FOR SYSTEM_TIME AS OF e.proc_time AS t",
        "  ON e.user_id = t.user_id",
        *([f"WHERE {where}"] if where else []),
    ]
    insert = re.sub(rf"\b{TABLE}\b", SCALED, insert)
    return head + "\n".join([*table, *view]) + ";\nINSERT INTO" + insert


def _with_lookup(job: SqlJob, rng: random.Random) -> SqlJob:
    """``job`` reading the table through a view of its lookup join of :data:`LOOKUP_TABLE`
    (a factor per user, inner or LEFT), computing ``amount`` from the factor its lookup finds:
    the INSERT's WHERE moves into the view (over the table's columns: one over the lookup's is
    not mapped), its aggregates' expression stays, over the view's ``amount``. The table's
    history: zero to three versions per user, some at a record's processing time (a version
    is visible from its own instant on), some deletes."""
    timed = processing_order(job)
    pts = sorted({pt for pt, _ in timed})
    users = sorted({_user(r) for r in job.records})
    unit = 1000 if job.size >= 5_000 else 1
    inner = rng.random() < 0.5
    found = 0
    while found < len(timed) / 2:  # most records find a row: the windows have some to fire
        versions = []
        for user in users:
            for seq in range(rng.choice([0, 1, 1, 2, 3])):
                at = (
                    rng.choice(pts)
                    if rng.random() < 0.5
                    else rng.randint(pts[0] - 5 * unit, pts[-1])
                )
                deleted = rng.random() < 0.15
                factor = None if deleted else float(rng.randint(1, 4))
                versions.append((user, at, seq, deleted, factor))
        table = LookupTable(tuple(versions), inner, lambda r, f: r.value)
        found = sum(table.factor_at(_user(r), pt) is not None for pt, r in timed)
    if inner:
        value, of = "e.amount * t.factor", lambda r, f: r.value * f
        if rng.random() < 0.3:
            value, of = "e.amount + t.factor * 2", lambda r, f: r.value + f * 2
    else:
        value = "CASE WHEN t.factor IS NULL THEN e.amount ELSE e.amount * t.factor END"
        of = lambda r, f: r.value if f is None else r.value * f  # noqa: E731
    where = None
    if job.where is not None:
        predicate = re.search(r"\nWHERE (.*)\n", job.script).group(1)
        where = re.sub(r"\b(user_id|region|amount)\b", r"e.\1", predicate)
        job = replace(job, script=job.script.replace(f"\nWHERE {predicate}\n", "\n"))
    return replace(
        job,
        script=lookup_script(job, value, inner, where),
        where=None,
        view_where=job.where,
        lookup=LookupTable(tuple(versions), inner, of),
    )


#: The frames of a processing-time OVER from UNBOUNDED PRECEDING, as a script may write them.
PROC_FRAMES = (
    "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
    "ROWS UNBOUNDED PRECEDING",
    "",
)


def proc_time_over(job: SqlJob, frame: str, ttl: bool) -> SqlJob:
    """``job``, an unbounded ``GROUP BY``, as the ``OVER`` of its aggregates ordered by the
    table's ``PROCTIME()`` column from UNBOUNDED PRECEDING (``frame``, as written), partitioned
    by its keys, with its state TTL or (``ttl`` False) without one."""
    assert job.unbounded and not job.reads_view
    script = job.script.replace("ts TIMESTAMP(3)", "ts TIMESTAMP(3), proc_time AS PROCTIME()", 1)
    keys = ", ".join(job.keys)
    script = re.sub(r"\) AS (a\d+)", r") OVER w AS \1", script)
    script = script.replace("INSERT INTO totals", "INSERT INTO rolling_totals")
    window = f"PARTITION BY {keys} ORDER BY proc_time" + (f" {frame}" if frame else "")
    script = script.replace(f"GROUP BY {keys};", f"WINDOW w AS ({window});")
    if not ttl:
        script = re.sub(r"SET 'table\.exec\.state\.ttl' = '[^']*';\n", "", script)
    frame_name = "rows" if frame.startswith("ROWS") else "range"
    return replace(job, script=script, ttl=job.ttl if ttl else NEVER_EXPIRES, proc_over=frame_name)


def proc_time_bounded(job: SqlJob, preceding: int, ttl: int = 0, watermark: bool = True) -> SqlJob:
    """``job``, an OVER of a bounded frame ordered by ``ts`` reading the table, as the OVER
    of that frame ordered by the table's ``PROCTIME()`` column: RANGE of ``preceding`` ms, or
    ROWS of ``preceding`` rows with the state TTL ``ttl`` (ms; 0: none), selecting the keys
    and aggregates (a processing time selected would be the wall clock's); the table without
    its WATERMARK unless ``watermark``."""
    assert (job.over is not None or job.over_rows is not None) and not job.reads_view
    rows = job.over_rows is not None
    assert not ttl or rows, "the state TTL of a bounded RANGE is not used"
    script = job.script.replace("ts TIMESTAMP(3)", "ts TIMESTAMP(3), proc_time AS PROCTIME()", 1)
    keys = ", ".join(job.keys)
    script = script.replace(f"SELECT {keys}, ts, ", f"SELECT {keys}, ", 1)
    script = script.replace("ORDER BY ts", "ORDER BY proc_time")
    bound = str(preceding) if rows else _interval(preceding)
    script = re.sub(
        r"\b(RANGE|ROWS) (BETWEEN )?(INTERVAL '[^']*' \w+|\d+) PRECEDING",
        lambda m: f"{m.group(1)} {m.group(2) or ''}{bound} PRECEDING",
        script,
    )
    if not watermark:
        script = re.sub(r",\n  WATERMARK FOR ts AS [^\n]*", "", script)
    if ttl:
        script = f"SET 'table.exec.state.ttl' = '{ttl} ms';\n{script}"
    return replace(
        job,
        script=script,
        over=None,
        over_rows=None,
        proc_over="rows" if rows else "range",
        proc_preceding=preceding,
        proc_ttl=ttl,
    )


def _proc_time_bounded(job: SqlJob, rng: random.Random) -> SqlJob:
    """``job`` (an event-time OVER of a bounded frame reading the table) ordered by processing
    time (:func:`proc_time_bounded`): a RANGE of 1 ms to many times the gaps between records
    (some below them), a ROWS of the job's rows, with or without a state TTL of a few times
    those gaps (its cleanups fire between a key's records)."""
    unit = 1000 if job.size >= 5_000 else 1  # a job's lengths are of 5 units or more
    if job.over is not None:
        ranges = [1, 1, 2, 3, 5, 10, 20, 50] if unit == 1 else [1, 200, 500, 1000, 2000, 5000]
        return proc_time_bounded(job, rng.choice(ranges), watermark=rng.random() < 0.7)
    ttls = [1, 2, 3, 5, 10, 20] if unit == 1 else [300, 500, 1000, 2000, 3000, 5000, 10_000]
    ttl = rng.choice(ttls) if rng.random() < 0.6 else 0
    return proc_time_bounded(job, job.over_rows, ttl, watermark=rng.random() < 0.7)


#: The session time zone a script over processing-time windows sets: the one they are mapped in.
UTC_ZONE = "SET 'table.local-time-zone' = 'UTC';\n"


def proc_time_window(job: SqlJob, watermark: bool = True) -> SqlJob:
    """``job``, a window TVF reading the table, over the table's ``PROCTIME()`` column instead
    of ``ts`` (``table.local-time-zone`` set to UTC); the table without its WATERMARK unless
    ``watermark``."""
    assert not (job.unbounded or job.is_over or job.proc_over or job.reads_view)
    script = job.script.replace("ts TIMESTAMP(3)", "ts TIMESTAMP(3), proc_time AS PROCTIME()", 1)
    script = UTC_ZONE + script.replace("DESCRIPTOR(ts)", "DESCRIPTOR(proc_time)")
    if not watermark:
        script = re.sub(r",\n  WATERMARK FOR ts AS [^\n]*", "", script)
    return replace(job, script=script, proc_window=True)


def _without_ttl(job: SqlJob) -> SqlJob:
    """An unbounded ``GROUP BY`` without ``table.exec.state.ttl``: its state never expires,
    and an update equal to its key's previous result is not written (none is, with a
    ``COUNT(*)``: every update counts one more record)."""
    script = re.sub(r"SET 'table\.exec\.state\.ttl' = '[^']*';\n", "", job.script)
    return replace(job, script=script, ttl=NEVER_EXPIRES)


def _with_unchanged_updates(job: SqlJob, rng: random.Random) -> SqlJob:
    """``job``, a GROUP BY, with updates that leave its result as it was: about a third of
    its numeric amounts 0 (a SUM stays), each ``COUNT`` of a column (one more with every
    record, as ``COUNT(*)``) made ``MIN`` or ``MAX`` of it (``SUM`` over an archive with
    NaN, where ``job_from_sql`` refuses ``MIN`` and ``MAX``)."""
    records = [
        replace(r, value=0.0) if not math.isnan(r.value) and rng.random() < 0.3 else r
        for r in job.records
    ]
    nan = any(math.isnan(r.value) for r in records)
    functions = list(job.functions)
    script = job.script
    for i, function in enumerate(functions):
        if function == "COUNT":
            functions[i] = "SUM" if nan else rng.choice(["MIN", "MAX"])
            script = re.sub(
                rf"\bCOUNT\(([^)*][^)]*)\) AS a{i}\b", rf"{functions[i]}(\1) AS a{i}", script
            )
    return replace(job, script=script, records=records, functions=tuple(functions))


def _archive(
    rng: random.Random, partitions: int, unit: int, base: int, keys: int, shuffle: bool, idle: bool
) -> list[Record]:
    """Per partition, event times rising by 0 to 12 units (a pause of 40 to 120 units now and
    then); shuffled within a partition when asked. With idleness, some partitions stop early
    (without it, such a partition holds the watermark back: nothing would fire)."""
    users = [f"u{i}" for i in range(rng.randint(1, 3))]
    regions = [f"r{i}" for i in range(rng.randint(1, 2))]
    records = []
    for p in range(partitions):
        n = rng.randint(5, 25)
        if idle and partitions > 1 and rng.random() < 0.3:
            n = rng.randint(1, 4)  # stops early: idle from then on
        et = rng.randint(0, 20)
        times = []
        for _ in range(n):
            et += rng.randint(40, 120) if rng.random() < 0.1 else rng.randint(0, 12)
            times.append(et)
        if shuffle:
            for i in range(len(times) - 1):
                if rng.random() < 0.3:
                    j = min(len(times) - 1, i + rng.randint(1, 3))
                    times[i], times[j] = times[j], times[i]
        for offset, t in enumerate(times):
            key = rng.choice(users) + (f"|{rng.choice(regions)}" if keys == 2 else "")
            records.append(Record(TABLE, p, offset, base + t * unit, key, float(rng.randint(1, 9))))
    return records


def generated(n: int, seed: int) -> list[SqlJob]:
    """``n`` random jobs from ``seed``."""
    rng = random.Random(seed)
    jobs = []
    for i in range(n):
        unit = rng.choice([1, 1, 1000])  # ms, or seconds (windows of seconds, ticks of 200 ms)
        base = rng.choice([0, BASE, BASE + rng.randint(1, 86_400_000)])
        kinds = ["TUMBLE", "HOP", "CUMULATE", "SESSION", "GROUP BY", "OVER", "OVER"]
        kind = rng.choice(kinds)  # OVER twice: its four frames
        slide = rng.choice([5, 10, 20]) * unit if kind in ("HOP", "CUMULATE") else 0
        size = slide * rng.randint(2, 4) if slide else rng.choice([10, 20, 30, 50]) * unit
        if kind == "SESSION":
            size = rng.choice([5, 10, 20, 40]) * unit  # the gap
        ttl = rng.choice([5, 10, 20, 40, 100]) * unit if kind == "GROUP BY" else 0
        frame = rng.choice(["RANGE", "ROWS", "RANGE UNBOUNDED", "ROWS UNBOUNDED"])
        range_ms, rows = rng.choice([0, 5, 10, 20, 50]) * unit, rng.choice([0, 1, 2, 3, 5, 10])
        styles = ["between", "between", "short", *(["none"] if frame == "RANGE UNBOUNDED" else [])]
        frame_style = rng.choice(styles)
        over = range_ms if kind == "OVER" and frame == "RANGE" else None
        over_rows = rows if kind == "OVER" and frame == "ROWS" else None
        unbounded = kind == "OVER" and frame.endswith("UNBOUNDED")
        over_unbounded = frame.split()[0].lower() if unbounded else ""
        bound = rng.choice([1, 2, 5, 10, 25]) * unit if unit == 1 else rng.choice([1, 500, 5000])
        emission = rng.choice(["periodic", "on-event"])
        emit = {"periodic": rng.choice([None, "on-periodic"]), "on-event": "on-event"}[emission]
        interval = rng.choice([None, 1 * unit, 5 * unit, 10 * unit, 25 * unit])
        idleness = rng.choice(["off", "off", "scan", "set", "both"])
        timeout = rng.choice([5, 20, 60]) * unit
        scan_idle = timeout if idleness in ("scan", "both") else None
        set_idle = {"set": timeout, "both": rng.choice([0, 3 * timeout]), "off": None}.get(
            idleness, rng.choice([None, 0])
        )
        keys = ("user_id",) if rng.random() < 0.7 else ("user_id", "region")
        value_type = rng.choice(["DOUBLE", "DOUBLE", "DOUBLE", "BIGINT"])
        # AVG of a BIGINT is refused by job_from_sql: Flink's is an integer division.
        names = [f for f in AGGREGATES if value_type == "DOUBLE" or f != "AVG"]
        functions = rng.sample(names, rng.randint(1, 4))
        shuffle = emission == "on-event" and rng.random() < 0.6
        idle = bool(scan_idle or set_idle)
        records = _archive(rng, rng.randint(1, 3), unit, base, len(keys), shuffle, idle)
        where, keep = _where(rng) if rng.random() < 0.4 else (None, None)
        argument, value_of = _argument(rng) if rng.random() < 0.3 else ("amount", None)
        # NaN amounts, filtered (not with MIN or MAX: job_from_sql refuses those, rightly)
        if (
            where
            and value_type == "DOUBLE"
            and not {"MIN", "MAX"} & set(functions)
            and rng.random() < 0.6
        ):
            records = [replace(r, value=math.nan) if rng.random() < 0.15 else r for r in records]
        text = script(
            keys,
            value_type,
            size,
            slide,
            bound,
            functions,
            emit=emit,
            interval=interval,
            scan_idle=scan_idle,
            set_idle=set_idle,
            cumulate=kind == "CUMULATE",
            session=kind == "SESSION",
            ttl=ttl,
            watermark=not ttl or rng.random() < 0.5,
            where=where,
            argument=argument,
            over=over,
            named_window=rng.random() < 0.5,
            over_rows=over_rows,
            over_unbounded=over_unbounded,
            frame_style=frame_style,
        )
        job = SqlJob(
            name=f"random_{seed}_{i}",
            script=text,
            records=records,
            keys=keys,
            value_type=value_type,
            size=size,
            slide=slide,
            functions=tuple(functions),
            emission=emission,
            idle=idle,
            cumulate=kind == "CUMULATE",
            session=kind == "SESSION",
            ttl=ttl,
            where=keep,
            argument=value_of,
            over=over,
            over_rows=over_rows,
            over_unbounded=over_unbounded,
        )
        # Views drawn apart, so that the draws above, and the jobs they make, stay as they were.
        views = random.Random(seed * 1_000_003 + i)
        chance = views.random()
        if chance < 0.35:
            job = _with_view(job, views)
        elif chance < 0.9:
            job = _with_union(job, views)
        if job.unbounded and "COUNT(*)" in job.functions and views.random() < 0.5:
            job = _without_ttl(job)
        # Processing-time OVERs, from GROUP BYs, and lookup joins, for jobs that read no
        # view, drawn apart too.
        procs = random.Random(seed * 3_000_003 + i)
        if job.unbounded and not job.reads_view and procs.random() < 0.9:
            ttl = "state.ttl" in job.script and procs.random() < 0.6
            job = proc_time_over(job, procs.choice(PROC_FRAMES), ttl)
        # Bounded OVERs ordered by processing time, from event-time ones that read no view
        # and keep some record (else there is nothing to write), drawn apart too.
        bounded = random.Random(seed * 4_000_003 + i)
        over = job.over is not None or job.over_rows is not None
        kept = over and any(map(job.kept, job.records))
        if kept and not job.reads_view and bounded.random() < 0.9:
            job = _proc_time_bounded(job, bounded)
        # Windows over the PROCTIME() column, from window jobs that read no view, drawn apart
        # too.
        windows = random.Random(seed * 6_000_011 + i)
        window = not (job.unbounded or job.is_over or job.proc_over)
        if window and not job.reads_view and windows.random() < 0.5:
            job = proc_time_window(job, watermark=windows.random() < 0.6)
        lookups = random.Random(seed * 2_000_003 + i)
        if (
            not job.reads_view
            and not job.proc_over
            and not job.proc_window
            and lookups.random() < 0.8
        ):
            job = _with_lookup(job, lookups)
        # GROUP BYs without COUNT(*) without their TTL too, drawn apart: Flink skips their
        # unchanged updates, which zero amounts and MIN and MAX make frequent.
        unchanged = random.Random(seed * 5_000_003 + i)
        if (
            job.unbounded
            and not job.proc_over
            and "COUNT(*)" not in job.functions
            and unchanged.random() < 0.5
        ):
            job = _with_unchanged_updates(_without_ttl(job), unchanged)
        jobs.append(job)
    return jobs


def _rows(partition: int, rows: list[tuple[int, str, float]], base: int = 0) -> list[Record]:
    """``(et, key, value)`` rows at offsets 0, 1, 2, ... of ``partition``."""
    return [Record(TABLE, partition, o, base + et, k, v) for o, (et, k, v) in enumerate(rows)]


#: The guide's example: one partition, in order, 5-minute TUMBLE, B = 5 s, periodic every
#: 200 ms, idle after 1 min. Seconds after BASE: u1 10, u1 170, u2 310, u1 380, u2 640, u1 740.
EXAMPLE = SqlJob(
    name="tumble_periodic_example",
    script=script(
        ("user_id",),
        "DOUBLE",
        300_000,
        0,
        5_000,
        ["SUM", "COUNT(*)"],
        interval=200,
        scan_idle=60_000,
    ),
    records=_rows(
        0,
        [
            (s * 1000, k, v)
            for s, k, v in [
                (10, "u1", 1.0),
                (170, "u1", 2.0),
                (310, "u2", 4.0),
                (380, "u1", 8.0),
                (640, "u2", 16.0),
                (740, "u1", 32.0),
            ]
        ],
        BASE,
    ),
    keys=("user_id",),
    value_type="DOUBLE",
    size=300_000,
    slide=0,
    functions=("SUM", "COUNT(*)"),
    emission="periodic",
    idle=True,
)
#: On-event HOP (slide 10, size 20, B = 5) over two partitions, p1 out of order (its et 9 is
#: read at pt 26), a record late for all its windows (a's et 2) and one late for one of its
#: two (b's et 15: [0, 20) has fired, [10, 30) has not).
HOP_ON_EVENT = SqlJob(
    name="hop_on_event_late",
    script=script(
        ("user_id",), "DOUBLE", 20, 10, 5, ["COUNT(*)", "MIN", "MAX", "AVG"], emit="on-event"
    ),
    records=_rows(
        0,
        [
            (1, "a", 1.0),
            (12, "a", 2.0),
            (31, "a", 3.0),
            (2, "a", 7.0),
            (15, "b", 8.0),
            (50, "a", 2.0),
        ],
    )
    + _rows(1, [(3, "b", 4.0), (26, "b", 5.0), (9, "b", 6.0), (45, "b", 1.0)]),
    keys=("user_id",),
    value_type="DOUBLE",
    size=20,
    slide=10,
    functions=("COUNT(*)", "MIN", "MAX", "AVG"),
    emission="on-event",
    idle=False,
)

#: On-event CUMULATE (step 10, size 30, B = 1 ms: W = ts - 1) over one partition: a's et 11,
#: read after b's et 25 brought W to 24, is late for [0, 20) and joins [0, 30); a's et 75
#: fires [30, 50) and [30, 60), the second with no record since the first.
CUMULATE_ON_EVENT = SqlJob(
    name="cumulate_on_event_late",
    script=script(
        ("user_id",), "DOUBLE", 30, 10, 1, ["SUM", "COUNT(*)"], emit="on-event", cumulate=True
    ),
    records=_rows(
        0,
        [(1, "a", 1.0), (12, "a", 2.0), (25, "b", 4.0), (11, "a", 8.0), (41, "a", 16.0)]
        + [(75, "a", 32.0)],
    ),
    keys=("user_id",),
    value_type="DOUBLE",
    size=30,
    slide=10,
    functions=("SUM", "COUNT(*)"),
    emission="on-event",
    idle=False,
    cumulate=True,
)


#: An unbounded GROUP BY with a state TTL of 10 ms over two partitions (processing time: the
#: partition's highest event time so far). a's state, last written at pt 4, has expired at
#: pt 14 (4 + 10 <= 14): afresh. b's et 11, read 1 ms before b's expiry (2 + 10), joins; its
#: et 3, read at pt 11 too, changes nothing and is written all the same, as is a's et 23.
UNBOUNDED_TTL = SqlJob(
    name="group_by_ttl",
    script=script(("user_id",), "DOUBLE", 0, 0, 1, ["SUM", "MAX"], ttl=10, watermark=False),
    records=_rows(0, [(0, "a", 1.0), (4, "a", 2.0), (14, "a", 8.0), (23, "a", 0.0)])
    + _rows(1, [(2, "b", 4.0), (11, "b", 16.0), (3, "b", 0.0)]),
    keys=("user_id",),
    value_type="DOUBLE",
    size=0,
    slide=0,
    functions=("SUM", "MAX"),
    emission="periodic",
    idle=False,
    ttl=10,
)


#: The same archive without a TTL, counting records: the state never expires (a's et 14
#: joins), and every update, counted, differs from the one before.
UNBOUNDED_FOREVER = _without_ttl(
    replace(
        UNBOUNDED_TTL,
        name="group_by_without_ttl",
        script=script(
            ("user_id",), "DOUBLE", 0, 0, 1, ["SUM", "COUNT(*)"], ttl=10, watermark=False
        ),
        functions=("SUM", "COUNT(*)"),
    )
)


#: A GROUP BY without a TTL of SUM(CASE WHEN user_id <> 'n' THEN amount END), one partition
#: (pt = et): an update leaving the SUM as it was is not written. a's $0 at 2 and 8 and its
#: first $0 at 9 change nothing (its $5 at 9 is the one row of 9); n's SUM is of nulls only,
#: null after its first record and after its second: equal, skipped; b's SUM is NaN from its
#: et 5 on, and its $0 at 7 is written all the same (a NaN equals nothing).
UNBOUNDED_UNCHANGED = _without_ttl(
    SqlJob(
        name="group_by_without_ttl_skipping",
        script=script(
            ("user_id",),
            "DOUBLE",
            0,
            0,
            1,
            ["SUM"],
            ttl=10,
            watermark=False,
            argument="CASE WHEN user_id <> 'n' THEN amount END",
        ),
        records=_rows(
            0,
            [(0, "a", 1.0), (1, "n", 2.0), (2, "a", 0.0), (3, "n", 3.0), (4, "b", 4.0)]
            + [(5, "b", math.nan), (6, "a", 2.0), (7, "b", 0.0), (8, "a", 0.0)]
            + [(9, "a", 0.0), (9, "a", 5.0)],
        ),
        keys=("user_id",),
        value_type="DOUBLE",
        size=0,
        slide=0,
        functions=("SUM",),
        emission="periodic",
        idle=False,
        ttl=10,
        argument=lambda r: None if _user(r) == "n" else r.value,
    )
)


#: The GROUP BY with a TTL as a processing-time OVER: the same rows (Flink's
#: ProcTimeUnboundedPrecedingFunction keeps its state under the same TTL, and writes every
#: update).
PROC_OVER_TTL = replace(
    proc_time_over(UNBOUNDED_TTL, "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", ttl=True),
    name="proc_time_over_ttl",
)
#: Without a TTL, and no COUNT(*): unlike the GROUP BY's, every update is written, those
#: that change nothing too.
PROC_OVER_FOREVER = replace(
    proc_time_over(UNBOUNDED_TTL, "", ttl=False), name="proc_time_over_forever"
)


#: The hand-written OVER jobs' archive, one partition (pt: the highest et so far): a's et 6
#: comes after b's et 8, a's et 3 after it, a has two rows at 14, b's et 40 comes last.
OVER_RECORDS = _rows(
    0,
    [(2, "a", 1.0), (5, "a", 2.0), (8, "b", 4.0), (6, "a", 8.0), (3, "a", 16.0)]
    + [(14, "a", 32.0), (14, "a", 64.0), (25, "a", 128.0), (40, "b", 256.0)],
)
_OVER_FUNCTIONS = ["SUM", "COUNT(*)", "MAX"]


def _over_job(name: str, **frame) -> SqlJob:
    """An on-event OVER job over :data:`OVER_RECORDS`, B = 1 ms (W = ts - 1 as it rises):
    ``frame`` its script's and the job's OVER frame arguments."""
    style = frame.pop("frame_style", "between")
    return SqlJob(
        name=name,
        script=script(
            ("user_id",),
            "DOUBLE",
            0,
            0,
            1,
            _OVER_FUNCTIONS,
            emit="on-event",
            frame_style=style,
            **frame,
        ),
        records=OVER_RECORDS,
        keys=("user_id",),
        value_type="DOUBLE",
        size=0,
        slide=0,
        functions=tuple(_OVER_FUNCTIONS),
        emission="on-event",
        idle=False,
        **frame,
    )


#: On-event OVER of RANGE 10 ms PRECEDING. a's et 6, read at pt 8 when W = 7, is late but
#: after a's last timer (5): kept, written at the next rise (et 14's). a's et 3 then comes no
#: later than 5: dropped. a's two rows at 14 are written together, each with both. b's et 40
#: is never written: the watermark ends at 39.
OVER_RANGE = _over_job("over_range", over=10)
#: The same of ROWS 1 PRECEDING: each row with the one before it. a's et 6 is kept and et 3
#: dropped as with RANGE (the same drop rule); a's two rows at 14 are written one by one.
OVER_ROWS = _over_job("over_rows", over_rows=1)
#: The same with no frame written: RANGE from UNBOUNDED PRECEDING. A row the watermark has
#: reached is dropped: a's et 6 (W = 7) and et 3.
OVER_RANGE_UNBOUNDED = _over_job("over_range_unbounded", over_unbounded="range", frame_style="none")
#: The same of ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW: a's rows at 14 one by one.
OVER_ROWS_UNBOUNDED = _over_job("over_rows_unbounded", over_unbounded="rows")


#: A processing-time OVER's archive, two partitions (pt: the partition's highest et so far):
#: p0's a at 5 and at 4 and b at 5 and p1's a at 5 are all read at pt 5.
PROC_RECORDS = _rows(
    0,
    [(2, "a", 1.0), (5, "a", 2.0), (4, "a", 4.0), (5, "b", 8.0), (8, "a", 16.0)]
    + [(9, "a", 32.0), (20, "a", 64.0)],
) + _rows(1, [(5, "a", 128.0)])
#: OVER of RANGE 3 ms PRECEDING ordered by processing time: a row read at pt is written at pt +
#: 2 (by the timer for pt + 1, fired 1 ms after it) with its key's rows read in [pt - 3, pt];
#: a's three rows of pt 5 are written together, each with all three and pt 2's. a's state is
#: cleaned up by the timer for 13 (8 + 4 + 1), unseen: its row of pt 20 is alone in its frame
#: either way.
PROC_OVER_RANGE = proc_time_bounded(
    replace(_over_job("proc_time_over_range", over=3), records=PROC_RECORDS), 3
)
#: ROWS 1 PRECEDING ordered by processing time, 'table.exec.state.ttl' 10 ms, one partition
#: (pt = et): each row written when read, with the one before it. A row read at pt sets its
#: key's cleanup timer for pt + 15 when pt + 10 is past the one set (deleting that one); the
#: timer for t fires at t + 1. a's for 29 (of pt 14) clears its state before pt 30; its pt 45
#: comes before the timer for 45 (of pt 30) fires, moves it to 60 and finds pt 35's row. b's
#: for 17 (of pt 2) is deleted by pt 11, so b's pt 17 finds pt 11's row.
PROC_OVER_ROWS_TTL = proc_time_bounded(
    replace(
        _over_job("proc_time_over_rows_ttl", over_rows=1),
        records=_rows(
            0,
            [(0, "a", 1.0), (2, "b", 2.0), (4, "a", 4.0), (11, "b", 8.0), (14, "a", 16.0)]
            + [(17, "b", 32.0), (30, "a", 64.0), (35, "a", 128.0), (45, "a", 256.0)],
        ),
    ),
    1,
    ttl=10,
    watermark=False,
)


def _proc_window_job(name: str, records: list[Record], size: int, slide: int = 0, **kind) -> SqlJob:
    """A window of ``SUM`` and ``COUNT(*)`` over the ``PROCTIME()`` column of a table without a
    WATERMARK (``kind``: ``cumulate`` or ``session``, as :func:`script` takes them)."""
    functions = ["SUM", "COUNT(*)"]
    job = SqlJob(
        name=name,
        script=script(("user_id",), "DOUBLE", size, slide, 1, functions, **kind),
        records=records,
        keys=("user_id",),
        value_type="DOUBLE",
        size=size,
        slide=slide,
        functions=tuple(functions),
        emission="periodic",
        idle=False,
        **kind,
    )
    return proc_time_window(job, watermark=False)


#: TUMBLE of 10 ms over processing time, one partition (pt: the highest et so far): a's et 8
#: is read at pt 12, so goes to [10, 20). [0, 10) fires at 10 (its timer for 9 fires 1 ms
#: later), between the records of pt 9 and 12; [10, 20) at 20, before a's record of pt 20,
#: which goes to [20, 30), fired at 30 after the last record.
PROC_TUMBLE = _proc_window_job(
    "proc_time_tumble",
    _rows(
        0,
        [(1, "a", 1.0), (4, "a", 2.0), (9, "b", 4.0), (12, "a", 8.0), (8, "a", 16.0)]
        + [(19, "a", 32.0), (20, "a", 64.0)],
    ),
    10,
)
#: HOP of 10 ms sliding by 5 over processing time: a's et 3, read at pt 7, joins [0, 10) and
#: [5, 15) with et 7's; et 16's windows fire after the last record.
PROC_HOP = _proc_window_job(
    "proc_time_hop", _rows(0, [(1, "a", 1.0), (7, "a", 2.0), (3, "a", 4.0), (16, "a", 8.0)]), 10, 5
)
#: CUMULATE of 15 ms by steps of 5 over processing time: [0, 15) fires at 15 with no record
#: since [0, 10); pt 21's record fires [15, 25) and [15, 30), not [15, 20), which ended before
#: it.
PROC_CUMULATE = _proc_window_job(
    "proc_time_cumulate",
    _rows(0, [(2, "a", 1.0), (6, "a", 2.0), (4, "a", 4.0), (21, "a", 8.0)]),
    15,
    5,
    cumulate=True,
)
#: SESSION of gap 5 ms over processing time: a's pt 5 extends [1, 6) to [1, 10), whose timer
#: (for 9) fires at 10 before a's record of pt 10, which opens [10, 15); b's et 9, read at pt
#: 10, opens [10, 15) too.
PROC_SESSION = _proc_window_job(
    "proc_time_session",
    _rows(
        0,
        [(1, "a", 1.0), (3, "b", 2.0), (5, "a", 4.0), (10, "a", 8.0), (9, "b", 16.0)]
        + [(16, "a", 32.0)],
    ),
    5,
    session=True,
)


#: The example through a view that renames the key and the time column, doubles ``amount``
#: and keeps amounts over 1: u1's $1 at 10 s is left out, yet its partition's watermark moves.
VIEWED_EXAMPLE = replace(
    EXAMPLE,
    name="tumble_through_a_view",
    script=EXAMPLE.script.split("INSERT INTO")[0]
    + f"""CREATE TEMPORARY VIEW {VIEW} AS
SELECT user_id AS {CUSTOMER}, amount * 2 AS amount, ts AS {EVENT_TS}
FROM {TABLE}
WHERE amount > 1;
INSERT INTO windowed
SELECT {CUSTOMER}, window_start, window_end, SUM(amount) AS a0, COUNT(*) AS a1
FROM TABLE(TUMBLE(TABLE {VIEW}, DESCRIPTOR({EVENT_TS}), INTERVAL '5' MINUTE))
GROUP BY {CUSTOMER}, window_start, window_end;
""",
    view_keys=(CUSTOMER,),
    view_where=lambda r: r.value > 1,
    view_value=lambda r: r.value * 2,
)


#: Two tables through a UNION ALL: events (B = 5 s) and events_b (B = 2 s, its amounts doubled
#: and those of 1 or less left out), each one partition, 5-minute TUMBLE, periodic every 200
#: ms. Seconds after BASE: events u1 10, u1 170, u2 310; events_b u1 60 (3), u1 180 (1), u2 360.
UNION_EXAMPLE = replace(
    EXAMPLE,
    name="tumble_of_a_union",
    script=f"""CREATE TABLE {TABLE} (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{TABLE}', 'format' = 'json');
CREATE TABLE {SECOND_TABLE} (
  user_key STRING, amt DOUBLE, event_time TIMESTAMP(3),
  WATERMARK FOR event_time AS event_time - INTERVAL '2' SECOND
) WITH ('connector' = 'kafka', 'topic' = '{SECOND_TABLE}', 'format' = 'json');
CREATE TEMPORARY VIEW {VIEW} AS
SELECT user_id, amount, ts FROM {TABLE}
UNION ALL
SELECT user_key AS user_id, amt * 2 AS amount, event_time AS ts FROM {SECOND_TABLE} WHERE amt > 1;
INSERT INTO windowed
SELECT user_id, window_start, window_end, SUM(amount) AS a0, COUNT(*) AS a1
FROM TABLE(TUMBLE(TABLE {VIEW}, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
GROUP BY user_id, window_start, window_end;
""",
    records=[
        *_rows(
            0,
            [(s * 1000, k, v) for s, k, v in [(10, "u1", 1.0), (170, "u1", 2.0), (310, "u2", 4.0)]],
            BASE,
        ),
        *(
            replace(r, topic=SECOND_TABLE)
            for r in _rows(
                0,
                [
                    (s * 1000, k, v)
                    for s, k, v in [(60, "u1", 3.0), (180, "u1", 1.0), (360, "u2", 5.0)]
                ],
                BASE,
            )
        ),
    ],
    idle=False,
    view_where=lambda r: r.topic != SECOND_TABLE or r.value > 1,
    view_value=lambda r: r.value * 2 if r.topic == SECOND_TABLE else r.value,
)


#: The example's records joined to their user's factor as the table is when each is read
#: (inner): u1's is 2 from 100 s and 3 from 380 s (the instant its $8 is read: visible), u2's
#: 10 from 640 s. u1's $1 at 10 s and u2's $4 at 310 s find none and are left out, yet move
#: the watermark: u2's still fires [0, 5 min) at 310 s.
TIERS = (
    ("u1", BASE + 100_000, 0, False, 2.0),
    ("u1", BASE + 380_000, 0, False, 3.0),
    ("u2", BASE + 640_000, 0, False, 10.0),
)
LOOKUP_EXAMPLE = replace(
    EXAMPLE,
    name="tumble_of_a_lookup_join",
    script=lookup_script(EXAMPLE, "e.amount * t.factor", inner=True, where=None),
    lookup=LookupTable(TIERS, inner=True, value=lambda r, f: r.value * f),
)
#: The same LEFT joined, aggregating the product (null without a row): SUM skips the nulls,
#: COUNT(amount) too, COUNT(*) counts every record. (The simulator has no nulls: this job is
#: compared with the plugin's backfill alone.)
LOOKUP_LEFT_NULLS = replace(
    LOOKUP_EXAMPLE,
    name="tumble_of_a_left_lookup_join_with_nulls",
    script=lookup_script(
        replace(
            EXAMPLE,
            script=script(
                ("user_id",),
                "DOUBLE",
                300_000,
                0,
                5_000,
                ["SUM", "COUNT(*)", "COUNT"],
                interval=200,
                scan_idle=60_000,
            ),
        ),
        "e.amount * t.factor",
        inner=False,
        where=None,
    ),
    functions=("SUM", "COUNT(*)", "COUNT"),
    lookup=LookupTable(TIERS, inner=False, value=lambda r, f: None if f is None else r.value * f),
)


def hand_written() -> list[SqlJob]:
    return [
        EXAMPLE,
        VIEWED_EXAMPLE,
        UNION_EXAMPLE,
        LOOKUP_EXAMPLE,
        HOP_ON_EVENT,
        CUMULATE_ON_EVENT,
        UNBOUNDED_TTL,
        UNBOUNDED_FOREVER,
        UNBOUNDED_UNCHANGED,
        OVER_RANGE,
        OVER_ROWS,
        OVER_RANGE_UNBOUNDED,
        OVER_ROWS_UNBOUNDED,
        PROC_OVER_TTL,
        PROC_OVER_FOREVER,
        PROC_OVER_RANGE,
        PROC_OVER_ROWS_TTL,
        PROC_TUMBLE,
        PROC_HOP,
        PROC_CUMULATE,
        PROC_SESSION,
    ]
