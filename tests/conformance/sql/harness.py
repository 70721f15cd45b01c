"""Run a Flink SQL script on real Flink SQL and compare its output with the plugin's backfill of
the same script (``job_from_sql``).

``FlinkSqlReplay.java`` (``src/``) has Flink's planner translate the script's ``INSERT`` and
drives the operators it builds deterministically: the Kafka table is read through a test
connector that, as Kafka's, takes the watermark strategy the planner pushes down
(``SupportsWatermarkPushDown``: the ``WATERMARK`` clause, emit strategy, idleness) and runs it
as a source does (a generator per partition, periodic ticks at multiples of the interval); the
window aggregation and every operator around it run in Flink's operator test harnesses.
Records are fed in the reference simulator's processing order (``processing_times``), not the
plugin's: the plugin's own ordering is under test.

Flink is fetched by ``mvn`` with ``pom.xml`` into ``lib/`` and the replay compiled into
``classes/`` (both git-ignored), lazily and idempotently by :func:`build`.
"""

from __future__ import annotations

import math
import subprocess
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill import backfill
from feast_stream_backfill.enrichment import CdcLog
from feast_stream_backfill.flink_sql import job_from_sql
from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from feast_stream_backfill.records import ArchivedTopic
from feast_stream_backfill.triggers import PerRecordTrigger
from feast_stream_backfill.windows import OverWindows
from tests.conformance.harness import build_in
from tests.conftest import dropped_per_start
from tests.reference_simulator import Job, Record, processing_times, simulate, windows_of

HERE = Path(__file__).resolve().parent
LIB, CLASSES = HERE / "lib", HERE / "classes"
SOURCES = sorted((HERE / "src").glob("*.java"))
RESOURCES = HERE / "resources"
#: The Kafka table every generated script reads, and its topic; some read a second one too,
#: through a UNION ALL, whose columns are named otherwise (:data:`SECOND_COLUMNS`).
TABLE, SECOND_TABLE = "events", "events_b"
#: The second table's names of ``user_id``, ``amount`` and ``ts``.
SECOND_COLUMNS = {"user_id": "user_key", "amount": "amt", "ts": "event_time"}
#: Flink's output has no firing kind: a window TVF aggregation fires each window once, on time;
#: an unbounded aggregation updates its key with each record.
ON_TIME, PER_RECORD = "on_time", "per_record"
#: The RowKinds an upsert sink writes (an UPDATE_BEFORE only retracts what the next replaces).
WRITTEN = ("+I", "+U")
#: The function Flink 2.3's planner runs an event-time OVER frame with
#: (``StreamExecOverAggregate``; ``table.exec.unbounded-over.version`` 2, its default).
OVER_FUNCTIONS = {
    "RANGE": "RowTimeRangeBoundedPrecedingFunction",
    "ROWS": "RowTimeRowsBoundedPrecedingFunction",
    "RANGE UNBOUNDED": "RowTimeUnboundedPrecedingOverFunctionV2",
    "ROWS UNBOUNDED": "RowTimeUnboundedPrecedingOverFunctionV2",
}


#: The simulator's result of each aggregate function (``jobs.AGGREGATES``' names).
SIMULATED = {
    "SUM": "sum",
    "COUNT(*)": "count",
    "COUNT": "count",
    "AVG": "mean",
    "MIN": "min",
    "MAX": "max",
}


#: The lookup table some generated views join: a factor per user, its history in the feed.
LOOKUP_TABLE = "tiers"


@dataclass(frozen=True)
class LookupTable:
    """The history of :data:`LOOKUP_TABLE` (``user_id``, ``factor`` of the job's value type),
    ``(user, time, sequence, deleted, factor)`` per version, and the view's lookup join of it:
    ``inner`` or LEFT, and the ``amount`` it computes from a record and the factor its lookup
    finds (None: no row)."""

    versions: tuple[tuple[str, int, int, bool, float | None], ...]
    inner: bool
    value: Callable[[Record, float | None], float] = field(compare=False)

    def factor_at(self, user: str, pt: int) -> float | None:
        """The factor of ``user``'s row as the table is at ``pt`` (a version at pt included)."""
        found = [v for v in self.versions if v[0] == user and v[1] <= pt]
        if not found:
            return None
        latest = max(found, key=lambda v: (v[1], v[2]))
        return None if latest[3] else latest[4]


#: The function Flink 2.3's planner runs an OVER from UNBOUNDED PRECEDING ordered by processing
#: time with, ROWS or RANGE.
PROC_OVER_FUNCTION = "ProcTimeUnboundedPrecedingFunction"
#: The functions it runs a bounded frame ordered by processing time with, per frame.
PROC_BOUNDED_FUNCTIONS = {
    "range": "ProcTimeRangeBoundedPrecedingFunction",
    "rows": "ProcTimeRowsBoundedPrecedingFunction",
}


@dataclass(frozen=True)
class SqlJob:
    """A script and its archive. A record's ``key`` holds its key columns' values joined by
    ``|`` (in ``keys`` order); ``value`` is ``amount``, of SQL type ``value_type``."""

    name: str
    script: str
    records: list[Record]
    keys: tuple[str, ...]
    value_type: str  # DOUBLE or BIGINT
    size: int  # ms; CUMULATE's max size, SESSION's gap
    slide: int  # ms: HOP's slide, CUMULATE's step; 0: TUMBLE
    functions: tuple[str, ...]  # jobs.AGGREGATES' names, output as a0, a1, ... in this order
    emission: str  # periodic or on-event
    idle: bool  # an idle timeout is set
    cumulate: bool = False  # CUMULATE by steps of ``slide``, not HOP
    session: bool = False  # SESSION with a gap of ``size``, partitioned by the keys
    #: > 0: an unbounded GROUP BY with this state TTL (ms), no window; NEVER_EXPIRES: without one
    ttl: int = 0
    #: Not None: an OVER aggregation ordered by ``ts``, RANGE of this many ms PRECEDING, the
    #: keys its PARTITION BY (the script selects ``keys, ts, aggregates``)
    over: int | None = None
    #: Not None: such an OVER aggregation, ROWS of this many rows PRECEDING
    over_rows: int | None = None
    #: "range" or "rows": such an OVER aggregation from UNBOUNDED PRECEDING
    over_unbounded: str = ""
    #: The script's WHERE, evaluated as Flink does (Java's NaN comparisons): True keeps.
    where: Callable[[Record], bool] | None = field(default=None, compare=False)

    #: What the aggregates other than COUNT(*) take of a record, as Flink computes it (None:
    #: ``amount``).
    argument: Callable[[Record], float] | None = field(default=None, compare=False)
    #: The INSERT reads a view of the table: the keys as it names them (empty: the table's),
    #: the records its WHERE keeps (None: all) and the ``amount`` it computes (None: the
    #: table's); the INSERT's ``where`` and ``argument`` read the view's.
    view_keys: tuple[str, ...] = ()
    view_where: Callable[[Record], bool] | None = field(default=None, compare=False)
    view_value: Callable[[Record], float] | None = field(default=None, compare=False)
    #: The view joins :data:`LOOKUP_TABLE` (its ``amount`` the lookup's value).
    lookup: LookupTable | None = field(default=None, compare=False)
    #: "range" or "rows": the unbounded aggregation (``ttl``) is an OVER from UNBOUNDED
    #: PRECEDING ordered by the table's PROCTIME() column (of that frame), not a GROUP BY.
    proc_over: str = ""
    #: Not None: the OVER ordered by the PROCTIME() column (``proc_over``'s frame) is bounded,
    #: RANGE of this many ms or ROWS of this many rows PRECEDING (``ttl`` 0; the script
    #: selects ``keys, aggregates``)
    proc_preceding: int | None = None
    #: Such an OVER of ROWS: its 'table.exec.state.ttl' (ms; 0: none), which cleans its
    #: state up on timers
    proc_ttl: int = 0
    #: The window TVF's DESCRIPTOR names the table's PROCTIME() column (the script sets
    #: 'table.local-time-zone' to 'UTC'): its windows placed and fired by processing time
    proc_window: bool = False

    def kept(self, record: Record) -> bool:
        """The INSERT reads the record (``record`` as the table holds it)."""
        if self.view_where is not None and not self.view_where(record):
            return False
        if self.lookup is not None and self.lookup.inner and self._factor(record) is None:
            return False
        return self.where is None or self.where(self.viewed(record))

    def viewed(self, record: Record) -> Record:
        """The record as the INSERT reads it: through the view, if any."""
        if self.lookup is not None:
            factor = self._factor(record)
            if factor is None and self.lookup.inner:
                return record  # not kept: no window reads it
            return replace(record, value=self.lookup.value(record, factor))
        return replace(record, value=self.view_value(record)) if self.view_value else record

    def _factor(self, record: Record) -> float | None:
        assert self.lookup is not None
        return self.lookup.factor_at(record.key.split("|")[0], self._processing_times[_at(record)])

    @cached_property
    def _processing_times(self) -> dict[tuple, int]:
        return {_at(r): pt for pt, r in processing_order(self)}

    @property
    def reads_view(self) -> bool:
        """The INSERT reads a view of the table."""
        return "CREATE TEMPORARY VIEW" in self.script

    @property
    def output_keys(self) -> tuple[str, ...]:
        """The key columns of the emission log: the view's names of them, if any."""
        return self.view_keys or self.keys

    @property
    def keyed_records(self) -> list[Record]:
        """The records as the simulator takes them: those the WHERE leaves out without a key
        (its source's watermark sees such a record, no window does), each value the
        aggregates' argument."""
        return [
            replace(
                self.viewed(r),
                key=r.key if self.kept(r) else None,
                value=self.argument(self.viewed(r)) if self.argument else self.viewed(r).value,
            )
            for r in self.records
        ]

    @property
    def unbounded(self) -> bool:
        return self.ttl > 0

    @property
    def is_over(self) -> bool:
        return self.over is not None or self.over_rows is not None or bool(self.over_unbounded)

    @property
    def proc_bounded(self) -> bool:
        """An OVER of a bounded frame ordered by processing time."""
        return self.proc_preceding is not None

    @property
    def frame(self) -> str:
        """An OVER's frame: RANGE, ROWS, RANGE UNBOUNDED or ROWS UNBOUNDED ("": no OVER)."""
        if self.over_unbounded:
            return f"{self.over_unbounded.upper()} UNBOUNDED"
        return "RANGE" if self.over is not None else "ROWS" if self.over_rows is not None else ""

    @property
    def aggregates(self) -> tuple[str, ...]:
        return tuple(f"a{i}" for i in range(len(self.functions)))

    @property
    def window(self) -> str:
        if self.is_over:
            return f"OVER {self.frame}"
        if self.proc_bounded:
            return f"OVER PROCTIME {self.proc_over.upper()}"
        if self.proc_over:
            return f"OVER PROCTIME {self.proc_over.upper()} UNBOUNDED"
        if self.unbounded:
            return "GROUP BY"
        if self.session:
            kind = "SESSION"
        elif self.slide:
            kind = "CUMULATE" if self.cumulate else "HOP"
        else:
            kind = "TUMBLE"
        return f"{kind} PROCTIME" if self.proc_window else kind

    @property
    def skips_unchanged(self) -> bool:
        """A GROUP BY without a state TTL: Flink writes no update equal to its key's previous
        result (an OVER ordered by processing time writes every one)."""
        return self.ttl == NEVER_EXPIRES and not self.proc_over

    @property
    def results(self) -> tuple[str, ...]:
        """The simulator's name of each aggregate's result (COUNT and COUNT(*) alike: the
        generated jobs count values never null)."""
        return tuple(SIMULATED[f] for f in self.functions)

    @property
    def model(self) -> Job:
        """The windows of the simulator's job (an unbounded aggregation's state: a
        processing-time session of gap TTL, fired by each record; a GROUP BY's without a TTL
        skipping unchanged updates)."""
        if self.is_over:
            return Job(
                size=1, over=self.over, over_rows=self.over_rows, over_unbounded=self.over_unbounded
            )
        if self.proc_bounded:
            rows = self.proc_over == "rows"
            return Job(
                size=1,
                over=None if rows else self.proc_preceding,
                over_rows=self.proc_preceding if rows else None,
                domain="processing",
                over_ttl=self.proc_ttl,
            )
        if self.unbounded:
            return Job(
                size=1,
                gap=self.ttl,
                domain="processing",
                trigger="per_record",
                skip_unchanged=self.results if self.skips_unchanged else (),
            )
        domain = "processing" if self.proc_window else "event"
        if self.session:
            return Job(size=1, gap=self.size, domain=domain)
        if self.cumulate:
            return Job(size=self.size, step=self.slide, domain=domain)
        return Job(size=self.size, slide=self.slide, domain=domain)


@dataclass
class SqlRun:
    """What Flink SQL did: the rows reaching the sink, each with its cause and time, and per
    record the window operator's watermark before it and whether it counted it as dropped;
    for an OVER aggregation, the function Flink ran it with."""

    columns: list[str] = field(default_factory=list)
    fired: list[tuple] = field(default_factory=list)  # (cause, time, watermark, *row)
    records: list[tuple[int, int]] = field(default_factory=list)  # (watermark, late-dropped)
    over_function: str = ""


def _at(record: Record) -> tuple[str, int, int]:
    return (record.topic, record.partition, record.offset)


def build() -> str:
    """Fetch Flink SQL's jars and compile the replay if not done yet; returns the classpath."""
    return build_in(HERE, SOURCES, RESOURCES)


def processing_order(job: SqlJob) -> list[tuple[int, Record]]:
    """The distinct records as ``(pt, record)`` in global processing order, by the reference
    simulator (the plugin's default processing-time model: no delays)."""
    return processing_times(job.records, job.model)


def _feed(job: SqlJob) -> str:
    """``r table partition offset pt`` and the row's physical columns: keys, amount, ts (ms);
    before them the lookup table's versions, ``v table time sequence deleted user factor``."""
    lines = []
    for user, at, seq, deleted, factor in job.lookup.versions if job.lookup else ():
        value = "null" if factor is None else int(factor) if job.value_type == "BIGINT" else factor
        lines.append(f"v {LOOKUP_TABLE} {at} {seq} {int(deleted)} {user} {value}")
    for pt, r in processing_order(job):
        value = int(r.value) if job.value_type == "BIGINT" else r.value
        value = "NaN" if isinstance(value, float) and math.isnan(value) else value  # Java's
        fields = " ".join([*r.key.split("|"), str(value), str(r.et)])
        lines.append(f"r {r.topic} {r.partition} {r.offset} {pt} {fields}")
    return "\n".join(lines) + "\n"


def run_flink(classpath: str, jobs: list[SqlJob]) -> list[SqlRun]:
    """Run every job's script on Flink SQL in one JVM."""
    with tempfile.TemporaryDirectory(prefix="flink-sql-conformance-") as tmp:
        args = []
        for i, job in enumerate(jobs):
            (Path(tmp) / f"{i}.sql").write_text(job.script)
            (Path(tmp) / f"{i}.in").write_text(_feed(job))
            args += [f"{tmp}/{i}.sql", f"{tmp}/{i}.in", f"{tmp}/{i}.out"]
        done = subprocess.run(
            ["java", "-XX:+UseSerialGC", "-cp", classpath, "FlinkSqlReplay", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the Flink SQL replay failed:\n{done.stderr[-4000:]}")
        return [_parse((Path(tmp) / f"{i}.out").read_text()) for i in range(len(jobs))]


def _parse(text: str) -> SqlRun:
    run = SqlRun()
    for line in text.splitlines():
        kind, *f = line.split(" ")
        if kind == "columns":
            run.columns = f
        elif kind == "over":
            run.over_function = f[0]
        elif kind == "rec":
            run.records.append((int(f[1]), int(f[2])))
        elif kind == "fire" and f[3] in WRITTEN:
            run.fired.append((f[0], int(f[1]), int(f[2]), *f[4:]))
    return run


def _number(text: str) -> float | None:
    return None if text == "null" else float(text)


def flink_log(run: SqlRun, job: SqlJob) -> tuple[list[tuple], dict[tuple, int], list[str]]:
    """Flink's rows as an emission log in the plugin's shape ``(key, start, end, emit_time,
    emit_sequence, firing, *aggregates)``, ``emit_sequence`` the output order per (key,
    emit_time); the dropped (key, window start) pairs: every window of a record the window
    operator's late-records counter counted, else those that had fired (``window_end - 1 <=
    W``, ``TimeWindowUtil.isWindowFired``) when it came; and where the two disagree (the
    counter's record with a window not yet fired, or the reverse). A session's record is
    dropped in its own window ``[et, et + gap)``, as the simulator counts it, when the counter
    counted it: whether it was late depends on the sessions it would have merged with. An
    unbounded aggregation's rows have no window: ``start`` and ``end`` are None (as
    :func:`windowless` makes the plugin's). An OVER row at ``ts`` of a RANGE of ``p`` is the
    window ``[ts - p, ts + 1)``, of another frame ``[None, ts + 1)`` (Flink's row does not say
    where its frame starts); a record the counter counted is dropped from ``[et - p, et +
    1)``, or ``[et, et + 1)``. A bounded frame's counted record can only be one no later than a
    timer already fired (its key's lastTriggeringTs, at most W) or than 0 (lastTriggeringTs
    before any timer); an unbounded frame's is one at or behind W, every such one. Flink's
    OVER function must be the frame's (:data:`OVER_FUNCTIONS`). An OVER ordered by processing
    time drops nothing; of a bounded frame, its row of a record read at ``pt`` is written at
    ``pt + 2`` with RANGE of ``p`` (by the timer for ``pt + 1``, which fires 1 ms after it),
    the window ``[pt - p, pt + 1)``, and at ``pt`` with ROWS, ``[None, pt + 1)``: the rows
    carry the keys and aggregates alone, their time is the instant they reach the sink
    (:data:`PROC_BOUNDED_FUNCTIONS`). A window over the ``PROCTIME()`` column drops nothing; its
    timers write its rows at the window's end."""
    n_keys = len(job.keys)
    sequence: dict[tuple, int] = defaultdict(int)
    emissions = []
    odd = []
    if job.is_over and run.over_function != OVER_FUNCTIONS[job.frame]:
        odd.append(f"Flink ran {job.frame} with {run.over_function or 'no OVER function'}")
    proc_function = (
        PROC_BOUNDED_FUNCTIONS[job.proc_over] if job.proc_bounded else PROC_OVER_FUNCTION
    )
    if job.proc_over and run.over_function != proc_function:
        odd.append(f"Flink ran {job.window} with {run.over_function or 'no OVER function'}")
    for _cause, time, _wm, *row in run.fired:
        key = "|".join(row[:n_keys])
        if job.proc_bounded and job.proc_over == "range":
            start, end, firing = time - 2 - job.proc_preceding, time - 1, ON_TIME
            values_at = n_keys
        elif job.proc_bounded:
            start, end, firing, values_at = None, time + 1, ON_TIME, n_keys
        elif job.is_over:
            ts = int(row[n_keys])
            start = ts - job.over if job.over is not None else None
            end, firing, values_at = ts + 1, ON_TIME, n_keys + 1
        elif job.unbounded:
            start, end, firing, values_at = None, None, PER_RECORD, n_keys
        else:
            start, end, firing = int(row[n_keys]), int(row[n_keys + 1]), ON_TIME
            values_at = n_keys + 2
        values = tuple(_number(v) for v in row[values_at:])
        emissions.append((key, start, end, time, sequence[(key, time)], firing, *values))
        sequence[(key, time)] += 1
    dropped: dict[tuple, int] = defaultdict(int)
    for (_, r), (watermark, counted) in zip(processing_order(job), run.records, strict=True):
        if job.unbounded or job.proc_bounded or job.proc_window or not job.kept(r):
            continue  # nothing is late by processing time, or for a filtered record
        if job.session:
            if counted:
                dropped[(r.key, r.et)] += 1
            continue
        if job.is_over:
            if counted:
                dropped[(r.key, r.et - (job.over or 0))] += 1
            if job.over_unbounded and bool(counted) != (r.et <= watermark):
                odd.append(f"record {r} at W={watermark}: counted late {counted}")
            elif not job.over_unbounded and counted and r.et > max(watermark, 0):
                odd.append(f"record {r} at W={watermark}: counted late, after W and 0")
            continue
        windows = windows_of(r.et, job.model)
        fired = [(s, e) for s, e in windows if e - 1 <= watermark]
        if counted and len(fired) < len(windows) or not counted and len(fired) == len(windows):
            odd.append(f"record {r} at W={watermark}: counted late {counted}, fired {fired}")
        for start, _ in windows if counted else fired:
            dropped[(r.key, start)] += 1
    return emissions, dict(dropped), odd


def archive(spark: SparkSession, job: SqlJob, table: str = TABLE) -> ArchivedTopic:
    """The job's records of ``table`` as the archived topic ``job_from_sql`` reads (its time
    column a TIMESTAMP; the second table's columns named as it names them)."""
    names = SECOND_COLUMNS if table == SECOND_TABLE else {}
    value = "long" if job.value_type == "BIGINT" else "double"
    keys = ", ".join(f"{names.get(k, k)} string" for k in job.keys)
    rows = [
        (
            r.partition,
            r.offset,
            r.et,
            *r.key.split("|"),
            int(r.value) if value == "long" else r.value,
        )
        for r in job.records
        if r.topic == table
    ]
    amount, ts = names.get("amount", "amount"), names.get("ts", "ts")
    df = spark.createDataFrame(
        rows, f"partition int, offset long, et long, {keys}, {amount} {value}"
    )
    records = df.withColumn(ts, F.timestamp_millis("et")).drop("et")
    return ArchivedTopic(table, dataframe=records, timestamp_col=ts)


def archives(spark: SparkSession, job: SqlJob) -> dict[str, ArchivedTopic]:
    """Each table's archive, by table name."""
    return {t: archive(spark, job, t) for t in dict.fromkeys(r.topic for r in job.records)}


def states(spark: SparkSession | None, job: SqlJob) -> dict[str, CdcLog]:
    """The lookup table's history as the change log the backfill reads (without ``spark``,
    the declaration alone, for mapping the script)."""
    if job.lookup is None:
        return {}
    if spark is None:
        return {LOOKUP_TABLE: CdcLog(LOOKUP_TABLE, ["user_id"], path="(not read)")}
    factor = "long" if job.value_type == "BIGINT" else "double"
    rows = [
        (
            user,
            None if f is None else int(f) if factor == "long" else f,
            at,
            seq,
            "delete" if d else "upsert",
        )
        for user, at, seq, d, f in job.lookup.versions
    ]
    log = spark.createDataFrame(
        rows, f"user_id string, factor {factor}, change_time long, seq long, op string"
    )
    return {LOOKUP_TABLE: CdcLog(LOOKUP_TABLE, ["user_id"], dataframe=log, sequence="seq")}


def plugin_log(spark: SparkSession, job: SqlJob) -> tuple[list[tuple], dict[tuple, int]]:
    """The plugin's backfill of the script, in :func:`flink_log`'s shape."""
    mapped = job_from_sql(spark, job.script, archives(spark, job), states=states(spark, job))
    result = backfill(spark, mapped)
    ms = F.unix_millis
    key = F.concat_ws("|", *job.output_keys)
    emissions = [
        (r[0], r[1], r[2], r[3], r[4], r[5], *(None if v is None else float(v) for v in r[6:]))
        for r in result.emissions.select(
            key,
            ms("window_start"),
            ms("window_end"),
            ms("emit_time"),
            "emit_sequence",
            "firing",
            *job.aggregates,
        ).collect()
    ]
    dropped = dropped_per_start(result.dropped, key)
    result.release()
    return windowless(emissions, job), dropped


def windowless(emissions: list[tuple], job: SqlJob) -> list[tuple]:
    """An unbounded aggregation's log without the window (the state's life, in the plugin's
    log: Flink's rows have none); an OVER's of ROWS (by event or processing time) or from
    UNBOUNDED PRECEDING without the window's start (the time of the earliest row its value
    aggregates: Flink's row does not carry it); any other job's as it is."""
    if job.unbounded:
        return [(e[0], None, None, *e[3:]) for e in emissions]
    if job.is_over and job.over is None or job.proc_bounded and job.proc_over == "rows":
        return [(e[0], None, *e[2:]) for e in emissions]
    return emissions


def simulated_log(job: SqlJob) -> tuple[list[tuple], dict[tuple, int]]:
    """The reference simulator's log of the job ``job_from_sql`` maps the script onto (its
    window, watermark and aggregates), in :func:`flink_log`'s shape: the mapping checked on
    many more jobs than a backfill each allows (tests/test_differential.py holds the simulator
    equal to the backfill). Without Spark: the archive is not read, so ``job_from_sql``'s
    check that periodic jobs' partitions are in event-time order is skipped here (the
    generated periodic archives are, by construction; :func:`plugin_log` runs the check)."""
    mapped = job_from_sql(
        None,
        job.script,
        {TABLE: ArchivedTopic(TABLE), SECOND_TABLE: ArchivedTopic(SECOND_TABLE)},
        states=states(None, job),
    )
    watermark, window = mapped.watermark, mapped.window
    over = isinstance(window, OverWindows)
    model = Job(
        size=getattr(window, "size_ms", 1),
        slide=getattr(window, "slide_ms", 0),
        step=getattr(window, "step_ms", 0),
        gap=getattr(window, "gap_ms", 0),
        over=window.preceding_ms if over and window.frame == "range" else None,
        over_rows=window.preceding_rows if over and window.frame == "rows" else None,
        over_unbounded=window.frame if over and window.unbounded else "",
        domain=window.domain,
        over_ttl=getattr(window, "state_ttl_ms", None) or 0,
        trigger="per_record" if isinstance(mapped.trigger, PerRecordTrigger) else "default",
        skip_unchanged=tuple(a.function for a in mapped.aggregations)
        if mapped.trigger.skip_unchanged
        else (),
        bound=watermark.out_of_orderness_ms,
        topic_bounds=tuple(mapped.bounds.items()),
        interval=watermark.interval_ms,
        emission=watermark.emission,
        idleness=watermark.idle_timeout_ms or 0,
    )
    emissions, dropped = simulate(job.keyed_records, model)
    values = {
        "sum": lambda count, total, low, high: total,
        "count": lambda count, total, low, high: float(count),
        "mean": lambda count, total, low, high: total / count,
        "min": lambda count, total, low, high: low,
        "max": lambda count, total, low, high: high,
    }
    log = [(*e[:6], *(values[a.function](*e[6:]) for a in mapped.aggregations)) for e in emissions]
    return windowless(log, job), dropped


def _nan_equal(row: tuple) -> tuple:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def _order(e: tuple) -> tuple:
    return (e[0], e[3], e[4], e[1] or 0)


def compare(flink: tuple[list[tuple], dict], plugin: tuple[list[tuple], dict]) -> list[str]:
    """Differences as readable lines (empty: identical rows, values, emit times, order per key
    and instant, and dropped pairs); rows are compared as multisets, a NaN equal to a NaN."""
    f_rows, p_rows = Counter(map(_nan_equal, flink[0])), Counter(map(_nan_equal, plugin[0]))
    problems = [f"Flink only:  {e}" for e in sorted((f_rows - p_rows).elements(), key=_order)]
    problems += [f"plugin only: {e}" for e in sorted((p_rows - f_rows).elements(), key=_order)]
    for k in sorted(set(flink[1]) | set(plugin[1])):
        if flink[1].get(k) != plugin[1].get(k):
            problems.append(f"dropped {k}: Flink {flink[1].get(k)}, plugin {plugin[1].get(k)}")
    return problems
