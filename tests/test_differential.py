"""The Spark backfill against the reference simulator: identical logs, drops and status counts.

Random draws alone miss option combinations (sessions with periodic watermarks at realistic
epoch times, around 1.77e12 ms, lost their emit times in float64 while CI's derandomized draws
all had times near 0), so three sources of cases, every one compared in full (emissions with
mean and count, dropped records, ``Backfill.stats``' record counts) by :func:`check`:

- ``TABLE``: a deterministic all-pairs table over the job's options (every valid pair of
  option values is in some row; ``test_the_table_covers_every_valid_pair`` checks it from the
  rows' jobs, archives and simulated logs), each row with a seeded archive;
- ``HAND_PICKED``: instants random archives rarely hit (a tick between records, on a record's
  millisecond, the archive's last tick) and the reported regressions;
- hypothesis, for what the table's options do not name; event times near 0 or near 2026
  (its strategies here, its tests in tests/test_differential_hypothesis.py and
  tests/test_differential_unsorted.py, which two test processes run alongside this file).
  Profiles: ``ci`` (default: 4 derandomized examples per test, besides the ``@example``s) and
  ``long`` (HYPOTHESIS_PROFILE=long: 2000 examples, or HYPOTHESIS_MAX_EXAMPLES; a few seconds
  each). CI's combinations come from the table and the hand-picked cases, which all run there;
  its few random examples keep each strategy's test drawing at every change, and the long
  profile, run before a change to the model, is what searches. ``derandomize`` disables the
  example database: every case a long run finds must be added as an ``@example``.

Aggregates follow Java doubles (Flink's ``AggregateFunction``: ``Math.min``, ``Math.max``,
``+``): a NaN makes sum, min, max and mean NaN, and ``count`` counts it; comparisons take NaN
as equal to NaN.
"""

from __future__ import annotations

import itertools
import math
import os
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    Backfill,
    CumulativeWindows,
    EventTimeTrigger,
    OverWindows,
    PerRecordTrigger,
    ProcessingTimeModel,
    ProcessingTimeTrigger,
    SessionWindows,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.planner import eligible
from tests.conftest import collect_log
from tests.reference_simulator import STATUSES, Job, Record, simulate

settings.register_profile(
    "ci",
    max_examples=4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "2000")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

#: 2026-01-05T00:00:00Z: epoch-ms times this large need 41 bits (float64 or packed longs can
#: lose them), while times near 0 hide that.
REALISTIC = 1_767_571_200_000
#: Record values: 1 in 30 is NaN, last so that hypothesis shrinks away from it; the table's
#: rows without NaN, and with NaN often enough that a window mixes it with numbers.
VALUES = [float(1 + i % 9) for i in range(29)] + [math.nan]
FINITE = [float(v) for v in range(1, 10)]
NAN_RICH = FINITE + [math.nan] * 3
#: The results a trigger that skips unchanged updates compares (the simulator's own; mean and
#: count, changed by every record of a window, would leave nothing to skip), and the zeros
#: that leave a window's sum, min and max as they were once it holds one.
SKIPPED = ("sum", "min", "max")
ZEROS = [0.0] * 9
T = TypeVar("T")


# ---------------------------------------------------------------- the plugin and the comparison


def plugin_window(
    job: Job,
) -> TumblingWindows | SlidingWindows | CumulativeWindows | SessionWindows | OverWindows:
    if job.over is not None:
        return OverWindows(job.over, job.domain)
    if job.over_rows is not None:
        ttl = job.over_ttl or None
        return OverWindows(None, job.domain, "rows", job.over_rows, ttl)
    if job.over_unbounded:
        return OverWindows(frame=job.over_unbounded)
    if job.gap:
        return SessionWindows(job.gap, job.domain)
    if job.step:
        return CumulativeWindows(job.size, job.step, job.window_offset, job.domain)
    if job.slide:
        return SlidingWindows(job.size, job.slide, job.window_offset, job.domain)
    return TumblingWindows(job.size, job.window_offset, job.domain)


def plugin_trigger(job: Job) -> EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger:
    if job.trigger == "per_record":
        return PerRecordTrigger(job.lateness, skip_unchanged=bool(job.skip_unchanged))
    return EventTimeTrigger(job.lateness) if job.domain == "event" else ProcessingTimeTrigger()


def run_backfill(
    spark: SparkSession, records: list[Record], job: Job, strategy: str | None = None, **options
) -> Backfill:
    """The job as the plugin's StreamJob (with ``options``), run (by ``strategy``: the plan's
    first by default)."""
    return backfill(spark, stream_job(spark, records, job, **options), strategy=strategy)


def stream_job(spark: SparkSession, records: list[Record], job: Job, **options) -> StreamJob:
    """The job as the plugin's StreamJob (with ``options``), one archived topic per simulator
    topic; features sum, min, max (the simulator's), mean and count (:func:`features`)."""
    topics = []
    for name in sorted({r.topic for r in records}):
        rows = [(r.partition, r.offset, r.et, r.key, r.value) for r in records if r.topic == name]
        df = spark.createDataFrame(
            rows, "partition int, offset long, et long, user string, amount double"
        )
        topics.append(
            ArchivedTopic(
                name,
                out_of_orderness_ms=dict(job.topic_bounds).get(name),
                dataframe=df.withColumn("event_time", F.timestamp_millis("et")).drop("et"),
            )
        )
    return StreamJob(
        topics=topics,
        keys=["user"],
        window=plugin_window(job),
        aggregations=[Aggregation("amount", f, f) for f in features(job)],
        trigger=plugin_trigger(job),
        watermark=WatermarkStrategy(
            job.bound, job.interval, job.emission, job.combine, job.idleness or None
        ),
        processing_time=ProcessingTimeModel(job.min_gap, job.min_delay),
        operator_delay_ms=job.operator_delay,
        **options,
    )


def features(job: Job) -> tuple[str, ...]:
    """The plugin's features of the simulator's job: its sum, min and max, and mean and count,
    but where updates are compared (:data:`SKIPPED`)."""
    return job.skip_unchanged or ("sum", "min", "max", "mean", "count")


def spark_backfill(
    spark: SparkSession, records: list[Record], job: Job, strategy: str | None = None
):
    """(emissions, dropped) in the simulator's shape, by ``strategy`` (the plan's first by
    default): what the conformance harness compares."""
    result = run_backfill(spark, records, job, strategy)
    log = collect_log(result)
    result.release()
    return log


def spark_backfill_with_stats(spark: SparkSession, records: list[Record], job: Job, **options):
    """(emissions + (mean, count) where the job has them, dropped, stats)."""
    result = run_backfill(spark, records, job, **options)
    emissions, dropped = collect_log(result, extra=features(job)[3:])
    result.release()
    return emissions, dropped, result.stats


def as_logged(job: Job, emissions: Iterable[tuple]) -> Iterable[tuple]:
    """The simulator's emissions with the plugin's features of the job."""
    return emissions if job.skip_unchanged else map(with_mean_and_count, emissions)


def with_mean_and_count(emission: tuple) -> tuple:
    """A simulator emission with the plugin's mean and count: every value is non-null, so
    count = record_count (NaN included) and mean = sum / count (NaN with any NaN)."""
    count, total = emission[6], emission[7]
    return (*emission, total / count, count)


def normalized(emissions: Iterable[tuple]) -> list[tuple]:
    """NaN as a string (NaN != NaN, even inside tuples), sorted per key by (emit_time,
    emit_sequence); a null emit time (a bug) sorts, then fails the comparison."""
    nan_free = [
        tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in e) for e in emissions
    ]
    return sorted(nan_free, key=lambda e: (e[0], str(e[3]).zfill(20), e[4]))  # None: last


def expected_stats(records: list[Record], counts: Mapping[str, int]) -> dict[str, int]:
    distinct = len({(r.topic, r.partition, r.offset) for r in records})
    return {
        "records_read": len(records),
        "duplicates_removed": len(records) - distinct,
        **{f"records_{status}": n for status, n in counts.items() if status in STATUSES},
        **{k: n for k, n in counts.items() if k == "updates_unchanged"},
    }


#: Cases each strategy was checked on in this run (the terminal summary prints them).
CHECKED: Counter[str] = Counter()


def check(spark: SparkSession, records: list[Record], job: Job, **options) -> list[tuple]:
    """The plugin's emissions, drops and status counts by every strategy that accepts the job
    (``options``: :func:`stream_job`'s) equal the simulator's; returns the simulator's
    emissions (for the cases that also pin them by hand)."""
    counts: dict[str, int] = {}
    emissions, dropped = simulate(records, job, counts)
    expected = expected_stats(records, counts)
    for strategy in eligible(stream_job(spark, records, job, **options)):
        actual, actual_dropped, stats = spark_backfill_with_stats(
            spark, records, job, strategy=strategy.name, **options
        )
        assert normalized(actual) == normalized(as_logged(job, emissions)), strategy
        assert actual_dropped == dropped, strategy
        assert {k: stats.get(k) for k in expected} == expected, strategy
        CHECKED[strategy.name] += 1
    return emissions


def with_zeros(records: list[Record]) -> list[Record]:
    """The records with values 1 to 4 made 0.0: a window's sum, min and max stay as they were
    when a second zero comes (a skipped update, with ``skip_unchanged``)."""
    return [replace(r, value=0.0) if 1.0 <= r.value <= 4.0 else r for r in records]


def shifted(records: list[Record], base: int) -> list[Record]:
    return [replace(r, et=r.et + base) for r in records]


def modelled(job: Job, records: list[Record]) -> Job:
    """Idleness is modelled for one topic combined by MIN (StreamJob refuses the rest)."""
    if job.combine == "max" or len({r.topic for r in records}) > 1:
        return replace(job, idleness=0)
    return job


# ------------------------------------------------------------------------------ generators


class Chooser(Protocol):
    """What the generators draw with: ``random.Random`` (tables) or :class:`Drawn`."""

    def choice(self, seq: Sequence[T]) -> T: ...

    def randint(self, a: int, b: int) -> int: ...


class Drawn:
    """``random.Random``'s choice and randint over hypothesis's ``draw``: one generator
    serves both the (shrinking) strategies and the seeded tables."""

    def __init__(self, draw: Callable) -> None:
        self.draw = draw

    def choice(self, seq: Sequence[T]) -> T:
        return self.draw(st.sampled_from(seq))

    def randint(self, a: int, b: int) -> int:
        return self.draw(st.integers(a, b))


def one_partition(
    rng: Chooser, topic: str, partition: int, values: Sequence[float]
) -> list[Record]:
    """Roughly increasing event times with jitter, some severely late, offset gaps, copies;
    some partitions start late or pause (they may go idle)."""
    n, step, start = rng.randint(0, 12), rng.choice([1, 5, 20]), rng.choice([0, 0, 0, 500])
    pause_at, pause = rng.randint(0, 12), rng.choice([0, 0, 400, 1500])
    out, offset = [], -1
    for i in range(n):
        offset += rng.choice([1, 1, 3])  # compacted topics have offset gaps
        jitter, late = rng.randint(-30, 30), rng.choice([0] * 9 + [rng.randint(50, 400)])
        et = max(0, start + (pause if i >= pause_at else 0) + i * step * 5 + jitter - late)
        out.append(Record(topic, partition, offset, et, rng.choice("abc"), rng.choice(values)))
    return out + [rng.choice(out) for _ in range(rng.randint(0, 2))] if out else out


def archive(rng: Chooser, topics: Sequence[str], values: Sequence[float]) -> list[Record]:
    return [
        r
        for t in topics
        for p in range(rng.randint(1, 3))
        for r in one_partition(rng, t, p, values)
    ]


# ------------------------------------------------------------------------- all-pairs table

#: The options whose every pair of values the table covers (booleans: off / on).
OPTIONS: dict[str, tuple] = {
    "kind": ("tumbling", "sliding", "session", "over", "over rows", "over unbounded"),
    "domain": ("event", "processing"),
    "emission": ("periodic", "on_event"),
    "trigger": ("default", "per_record"),
    "lateness": (False, True),
    "idleness": (False, True),
    "topics": (1, 2),
    "d1": (False, True),  # min gap between a partition's records
    "d2": (False, True),  # min delay from event to processing
    "d3": (False, True),  # operator delay
    "combine": ("min", "max"),
    "base": (0, REALISTIC),
    "interval": (1, 50, 200),
    "nan": (False, True),
    "unchanged": (False, True),  # per-record firings skipping unchanged updates, some skipped
}


def valid(row: Mapping[str, object]) -> bool:
    """Can a (partial) row be a job? Idleness is modelled for one topic combined by MIN only;
    OVER windows have no trigger but their own and no lateness, and a processing-time OVER
    has a bounded frame."""
    kind = str(row.get("kind"))
    if kind.startswith("over") and (row.get("trigger") == "per_record" or row.get("lateness")):
        return False
    if row.get("unchanged") and (row.get("trigger") == "default" or kind.startswith("over")):
        return False  # skipping unchanged updates is per-record firing's
    if kind == "over unbounded" and row.get("domain") == "processing":
        return False
    return not row.get("idleness") or (row.get("topics", 1) == 1 and row.get("combine") != "max")


def pairs_of(row: Mapping[str, object], options: Mapping[str, tuple] = OPTIONS) -> set[tuple]:
    """The ((option, value), (option, value)) pairs a (partial) row holds, in options order."""
    names = [n for n in options if n in row]
    return {((a, row[a]), (b, row[b])) for a, b in itertools.combinations(names, 2)}


def all_pairs(options: Mapping[str, tuple], ok: Callable[[Mapping], bool]) -> list[dict]:
    """Greedy all-pairs: start each row from the first uncovered valid pair, then give every
    other option the valid value covering most uncovered pairs (the first on ties)."""
    uncovered = {
        pair
        for a, b in itertools.combinations(options, 2)
        for x, y in itertools.product(options[a], options[b])
        if ok(dict(pair := ((a, x), (b, y))))
    }
    rows = []
    while uncovered:
        row = dict(min(uncovered, key=repr))
        for name in (n for n in options if n not in row):
            candidates = [{**row, name: value} for value in options[name]]
            scored = [
                (len(pairs_of(c, options) & uncovered), -i)
                for i, c in enumerate(candidates)
                if ok(c)
            ]
            row = candidates[-max(scored)[1]]
        rows.append({n: row[n] for n in options})
        uncovered -= pairs_of(row, options)
    return rows


def table_case(index: int, row: Mapping) -> tuple[list[Record], Job]:
    """A job with the row's options (the others drawn) and an archive, from seeded draws: the
    first draw whose job and archive do have the row's options (both topics non-empty; with
    "nan", NaN mixed with numbers in an emission)."""
    for attempt in itertools.count():
        records, job = _drawn_case(random.Random(f"row {index}, attempt {attempt}"), row)
        if records and options_of(records, job) == row:
            return records, job
    raise AssertionError("unreachable")


def _drawn_case(rng: random.Random, row: Mapping) -> tuple[list[Record], Job]:
    values = NAN_RICH if row["nan"] else FINITE
    records = archive(rng, ("t1", "t2")[: row["topics"]], values + ZEROS * row["unchanged"])
    per_topic = row["topics"] == 2 and row["combine"] == "min"  # MAX: one bound for all
    job = Job(
        size=rng.choice([10, 50, 100, 300]),
        slide=rng.choice([20, 35]) if row["kind"] == "sliding" else 0,
        gap=rng.choice([15, 60]) if row["kind"] == "session" else 0,
        window_offset=rng.choice([0, 7]),
        domain=row["domain"],
        trigger=row["trigger"],
        combine=row["combine"],
        topic_bounds=rng.choice([(), (("t2", 40),), (("t1", 0), ("t2", 15))]) if per_topic else (),
        bound=rng.choice([0, 5, 30]),
        interval=row["interval"],
        emission=row["emission"],
        lateness=rng.choice([20, 100]) if row["lateness"] else 0,
        min_gap=rng.choice([1, 3]) if row["d1"] else 0,
        min_delay=10 if row["d2"] else 0,
        operator_delay=5 if row["d3"] else 0,
        idleness=rng.choice([10, 60, 300]) if row["idleness"] else 0,
        over=rng.choice([0, 15, 100]) if row["kind"] == "over" else None,
        over_rows=rng.choice([0, 1, 3]) if row["kind"] == "over rows" else None,
        over_unbounded=rng.choice(["range", "rows"]) if row["kind"] == "over unbounded" else "",
        over_ttl=rng.choice([0, 2, 40])
        if (row["kind"], row["domain"]) == ("over rows", "processing")
        else 0,
        skip_unchanged=SKIPPED if row["unchanged"] else (),
    )
    return shifted(records, row["base"]), job


def options_of(records: list[Record], job: Job) -> dict[str, object]:
    """A case's option values, read from its job and archive (not from its table row); "nan":
    a NaN was aggregated with other values in an emission; "unchanged": an unchanged update
    was skipped."""
    counts: dict[str, int] = {}
    emissions = simulate(records, job, counts)[0]
    return {
        "kind": "over"
        if job.over is not None
        else "over rows"
        if job.over_rows is not None
        else "over unbounded"
        if job.over_unbounded
        else "session"
        if job.gap
        else "sliding"
        if job.slide
        else "tumbling",
        "domain": job.domain,
        "emission": job.emission,
        "trigger": job.trigger,
        "lateness": job.lateness > 0,
        "idleness": job.idleness > 0,
        "topics": len({r.topic for r in records}),
        "d1": job.min_gap > 0,
        "d2": job.min_delay > 0,
        "d3": job.operator_delay > 0,
        "combine": job.combine,
        "base": REALISTIC if min(r.et for r in records) >= REALISTIC else 0,
        "interval": job.interval,
        "nan": any(e[6] > 1 and math.isnan(e[7]) for e in emissions),
        "unchanged": counts.get("updates_unchanged", 0) > 0,
    }


TABLE = [table_case(index, row) for index, row in enumerate(all_pairs(OPTIONS, valid))]


def _case_id(records: list[Record], job: Job) -> str:
    o = options_of(records, job)
    named = [o["kind"], o["domain"], o["emission"], o["trigger"], f"{o['topics']}topics"]
    named += [o["combine"], "epoch" if o["base"] else "t0", f"I{o['interval']}"]
    optional = ("lateness", "idleness", "d1", "d2", "d3", "nan", "unchanged")
    named += [name for name in optional if o[name]]
    return "-".join(map(str, named))


@pytest.mark.parametrize(
    ("records", "job"), TABLE, ids=[f"{i}-{_case_id(*case)}" for i, case in enumerate(TABLE)]
)
def test_all_pairs_table_row(spark, records, job):
    check(spark, records, job)


#: Rows run again with Spark's generated code and adaptive plans (see conftest): sessions
#: through the numpy path, aligned windows with idleness, NaN, per-record firings.
AS_SHIPPED_ROWS = [2, 3]


@pytest.mark.parametrize("row", AS_SHIPPED_ROWS)
def test_table_rows_as_spark_ships(spark_as_shipped, row):
    assert spark_as_shipped.conf.get("spark.sql.codegen.wholeStage") == "true"
    check(spark_as_shipped, *TABLE[row])


def test_the_table_covers_every_valid_pair():
    """Every pair of option values a valid job can have is in some row, as read from the
    rows' jobs and archives; and every row is a job the plugin and Flink both express."""
    invalid = [
        {("idleness", True), ("topics", 2)},
        {("idleness", True), ("combine", "max")},
        *[
            {("kind", over), invalid}
            for over in ("over", "over rows", "over unbounded")
            for invalid in (("trigger", "per_record"), ("lateness", True))
        ],
        {("kind", "over unbounded"), ("domain", "processing")},
        {("unchanged", True), ("trigger", "default")},
        *[
            {("kind", over), ("unchanged", True)}
            for over in ("over", "over rows", "over unbounded")
        ],
    ]
    wanted = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(OPTIONS, 2)
        for x in OPTIONS[a]
        for y in OPTIONS[b]
        if {(a, x), (b, y)} not in invalid
    }
    # kind six-valued, interval three-valued, 13 two-valued; 13 pairs invalid
    assert len(wanted) == 6 * 3 + (6 + 3) * 13 * 2 + 78 * 2 * 2 - 13
    covered = set().union(*(pairs_of(options_of(*case)) for case in TABLE))
    assert sorted(wanted - covered) == []
    for records, job in TABLE:
        assert not job.idleness or (job.combine == "min" and len({r.topic for r in records}) == 1)
        assert not (job.combine == "max" and job.topic_bounds)


# ----------------------------------------------------------------------- hand-picked cases


@dataclass(frozen=True)
class HandCase:
    """An archive (one partition, times after ``base``) and the firings the simulator must
    give, ``(key, window_start, emit_time, firing)``, pinning what the case is about."""

    records: list[tuple]  # (offset, et, key, value)
    job: Job
    firings: set[tuple]
    base: int = 0

    def archive(self) -> list[Record]:
        return shifted([Record("t1", 0, *r) for r in self.records], self.base)


#: Periodic sessions at realistic times: on-time firings got no emit time (a packed
#: ``time << 22`` went through float64); on_event watermarks were right.
SESSION_REPRODUCTION = [
    (1, 0, "a", 1.0),
    (2, 10_000, "a", 2.0),
    (3, 200_000, "b", 3.0),
    (4, 400_000, "b", 4.0),
]
SESSION_JOB = Job(size=10, gap=60_000, bound=0, interval=200)
PROCESSING_SESSION_JOB = Job(size=10, gap=60, domain="processing")
#: Periodic sessions with idleness: a partition idle until the archive ends (no record wakes
#: it) made a position of null fields, and the watermark replay raised (found by the
#: conformance harness, ``--random 20 --seed 7 --plugin``).
IDLE_TO_THE_END = [
    Record("t1", 0, 0, 0, "a", 1.0),
    Record("t1", 0, 1, 35, "a", 2.0),
    Record("t1", 1, 0, 1, "b", 3.0),
    Record("t1", 1, 1, 1558, "b", 4.0),
]
IDLE_SESSION_JOB = Job(size=10, gap=60, interval=7, idleness=100)
#: Cumulative windows (size 30, step 10, offset 7), on-event, over two partitions: p1's et 12
#: is read after its et 40 has brought the watermark to 29, so it is late for [7, 17) and
#: [7, 27) and joins [7, 37) alone, fired at 50.
CUMULATIVE_RECORDS = [
    Record("t1", 0, 0, 8, "a", 1.0),
    Record("t1", 1, 0, 9, "a", 2.0),
    Record("t1", 0, 1, 30, "a", 4.0),
    Record("t1", 1, 1, 40, "b", 8.0),
    Record("t1", 1, 2, 12, "a", 16.0),
    Record("t1", 0, 2, 50, "a", 32.0),
]
CUMULATIVE_JOB = Job(size=30, step=10, window_offset=7, interval=5, emission="on_event")


def _hand_cases() -> dict[str, HandCase]:
    cases = {}
    for base, name in ((0, "t0"), (REALISTIC, "epoch")):
        # Ticks every 50 ms. Tick 50 on the record at 50: the record first, so W = 49 fires
        # [10, 20) and [40, 50) at 50. Tick 100 falls strictly between the records at 70 and
        # 130: W = 69 fires [50, 60). The archive's last tick (150, after its last record)
        # fires [70, 80) with W = 129; [130, 140) is pending.
        cases[f"ticks_on_between_and_after_records_{name}"] = HandCase(
            [(0, 15, "a", 1.0), (1, 45, "a", 2.0), (2, 50, "a", 4.0), (3, 70, "b", 8.0)]
            + [(4, 130, "b", 16.0)],
            Job(size=10, interval=50),
            {("a", 10, 50, "on_time"), ("a", 40, 50, "on_time"), ("a", 50, 100, "on_time")}
            | {("b", 70, 150, "on_time")},
            base,
        )
    # a's session [0, 70000) fires at 200000 (W = 199999), b's [200000, 260000) at 400000.
    cases["periodic_sessions_at_realistic_times"] = HandCase(
        SESSION_REPRODUCTION,
        SESSION_JOB,
        {("a", 0, 200_000, "on_time"), ("b", 200_000, 400_000, "on_time")},
        REALISTIC,
    )
    # The same float64 loss for processing-time sessions: the clock's firing of [500, 560)
    # had no emit time.
    cases["processing_sessions_at_realistic_times"] = HandCase(
        [(0, 5, "a", 1.0), (1, 500, "a", 2.0)],
        PROCESSING_SESSION_JOB,
        {("a", 5, 65, "on_time"), ("a", 500, 560, "on_time")},
        REALISTIC,
    )
    # Java doubles: a NaN makes sum, min, max and mean NaN, whatever the order; count counts it.
    cases["nan_in_windows"] = HandCase(
        [(0, 1, "a", 2.0), (1, 2, "a", math.nan), (2, 3, "a", 1.0), (3, 12, "b", math.nan)],
        Job(size=10, interval=10, trigger="per_record"),
        {("a", 0, t, "per_record") for t in (1, 2, 3)} | {("b", 10, 12, "per_record")},
    )
    return cases


HAND_PICKED = _hand_cases()


@pytest.mark.parametrize("name", HAND_PICKED)
def test_hand_picked_case(spark, name):
    case = HAND_PICKED[name]
    emissions = check(spark, case.archive(), case.job)
    assert {(e[0], e[1] - case.base, e[3] - case.base, e[5]) for e in emissions} == case.firings


# ------------------------------------------------------------------ hypothesis's strategies
# Its tests: tests/test_differential_hypothesis.py and tests/test_differential_unsorted.py.


@st.composite
def archives(draw) -> list[Record]:
    rng = Drawn(draw)
    return archive(rng, rng.choice([("t1",), ("t1", "t2")]), VALUES)


jobs = st.builds(
    Job,
    size=st.sampled_from([10, 50, 100, 300]),
    slide=st.sampled_from([0, 0, 20, 35]),
    domain=st.sampled_from(["event", "event", "processing"]),
    trigger=st.sampled_from(["default", "default", "per_record"]),
    combine=st.sampled_from(["min", "min", "max"]),
    topic_bounds=st.sampled_from([(), (), (("t2", 40),), (("t1", 0), ("t2", 15))]),
    window_offset=st.sampled_from([0, 7]),
    bound=st.sampled_from([0, 5, 30]),
    interval=st.sampled_from([1, 7, 50, 200]),
    emission=st.sampled_from(["periodic", "on_event"]),
    lateness=st.sampled_from([0, 0, 20, 100]),
    min_gap=st.sampled_from([0, 0, 1, 3]),
    min_delay=st.sampled_from([0, 10]),
    operator_delay=st.sampled_from([0, 5]),
    idleness=st.sampled_from([0, 10, 60, 300]),
    gap=st.sampled_from([0, 0, 15, 60]),
)


# ------------------------------------------------------------------ the simulator by itself


def test_simulator_reproduces_the_hand_computed_example():
    # tests/test_event_time_windows.py's archive, by the simulator: same expectations.
    rows = [
        (0, 0, 1, "a", 1.0),
        (0, 1, 4, "a", 2.0),
        (0, 2, 12, "a", 4.0),
        (0, 3, 25, "a", 8.0),
        (1, 0, 2, "a", 16.0),
        (1, 1, 30, "b", 32.0),
        (1, 2, 31, "b", 64.0),
        (1, 3, 7, "a", 128.0),
    ]
    records = [Record("t", *r) for r in rows]
    counts: dict[str, int] = {}
    emissions, dropped = simulate(records, Job(size=10, interval=10), counts)
    assert emissions == [
        ("a", 0, 10, 30, 0, "on_time", 3, 19.0, 1.0, 16.0),
        ("a", 10, 20, 30, 1, "on_time", 1, 4.0, 4.0, 4.0),
    ]
    assert dropped == {("a", 0): 1}
    # a@25, b@30 and b@31 wait for W = 29 and 39; the last tick (40) brings W = 24 only.
    assert counts == {"on_time": 4, "late": 0, "per_record": 0, "dropped": 1, "pending": 3}


def test_simulator_status_counts_sessions_and_sliding_windows():
    # Sessions (gap 10, L = 20, ticks every 10). a@0, a@5 and a@12 (read at 30) make [0, 22),
    # fired on time at tick 30 (W = 29), with b@30's [30, 40) waiting; a@1 (read at 60) joins
    # the fired session: a late firing. Tick 60 (W = 59) fires b's session and clears a's, so
    # a@2 (read at 100) is dropped in its own window [2, 12). Tick 100 fires b@60's [60, 70);
    # b@100's session is pending.
    rows = [(0, "a"), (5, "a"), (30, "b"), (12, "a"), (60, "b"), (1, "a"), (100, "b"), (2, "a")]
    records = [Record("t", 0, i, et, key, 1.0) for i, (et, key) in enumerate(rows)]
    counts: dict[str, int] = {}
    _, dropped = simulate(records, Job(size=1, gap=10, lateness=20, interval=10), counts)
    assert dropped == {("a", 2): 1}
    assert counts == {"on_time": 5, "late": 1, "per_record": 0, "dropped": 1, "pending": 1}
    # Sliding windows count (record, window) pairs: 2 records x 2 windows each, per record.
    counts = {}
    job = Job(size=20, slide=10, trigger="per_record", interval=10)
    simulate([Record("t", 0, 0, 5, "a", 1.0), Record("t", 0, 1, 15, "a", 1.0)], job, counts)
    assert counts["per_record"] == 4


def test_simulator_aggregates_like_java_doubles():
    """Math.min/Math.max and +: NaN wins wherever it stands in the window."""
    for values in itertools.permutations([2.0, math.nan, 1.0]):
        records = [Record("t", 0, i, i, "a", v) for i, v in enumerate(values)]
        emissions, _ = simulate([*records, Record("t", 0, 9, 50, "b", 1.0)], Job(size=10))
        assert emissions[0][:7] == ("a", 0, 10, 200, 0, "on_time", 3)
        assert [math.isnan(v) for v in emissions[0][7:]] == [True, True, True]
