"""Enriched backfills against the reference (tests/reference_enrichment.py): identical logs.

Hypothesis draws archives of transactions (a currency and an amount), a rate table (SCD type
II with or without ``valid_to``, or a CDC log with deletes over an optional snapshot), a
lookup (processing time with a delay, or event time; left or inner) and a job (tumbling,
sliding or session windows, event or processing time, default or per-record trigger); the
Spark emission log of ``sum/min/max(amount x rate)``, its dropped records and its status
counts must equal the reference's exactly. So that CI cannot miss a combination (sessions
behind an inner lookup: removed records still move the watermark that fires other keys'
sessions), an all-pairs ``TABLE`` of window kind, domain, trigger, emission, join type, lookup
time and state source runs too, each row with seeded draws of the same generators.
``HYPOTHESIS_PROFILE=long`` runs 500 examples (or ``HYPOTHESIS_MAX_EXAMPLES``) instead of CI's
4 (derandomized: add what a long run finds as an ``@example``): in CI the table and the
``@example``s name the combinations, and the long profile, run before a change to the model,
searches beyond them.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Mapping, Sequence

import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    ProcessingTimeModel,
    StreamJob,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.enrichment import CdcLog, Lookup, ScdTable
from tests.conftest import collect_log
from tests.reference_enrichment import (
    NO_RATE,
    Cdc,
    Change,
    RateLookup,
    Scd,
    ScdRow,
    Transaction,
    enrich,
    simulate_enriched,
)
from tests.reference_simulator import Job
from tests.test_differential import (
    Chooser,
    Drawn,
    all_pairs,
    normalized,
    pairs_of,
    plugin_trigger,
    plugin_window,
)

CI = settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
LONG = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "500")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
PROFILE = LONG if os.environ.get("HYPOTHESIS_PROFILE") == "long" else CI

CURRENCIES = "xyz"


def one_partition(rng: Chooser, topic: str, partition: int) -> list[Transaction]:
    """Roughly increasing event times with jitter, some late, some copies, a few null keys."""
    n, step = rng.randint(3, 10), rng.choice([5, 10, 20])
    out, offset = [], -1
    for i in range(n):
        offset += rng.choice([1, 1, 2])
        late = rng.choice([0] * 8 + [rng.randint(10, 80) * 5])
        jitter = rng.choice([-25, -10, -5, 0, 0, 5, 10, 25])
        et = max(0, i * step * 5 + jitter - late)
        # "w" has no rate ever: a left lookup keeps it unrated, an inner one removes it.
        currency = rng.choice([*CURRENCIES, "w", None])
        amount, key = float(rng.randint(1, 9)), rng.choice("ab")
        out.append(Transaction(topic, partition, offset, et, key, currency, amount))
    return out + [rng.choice(out) for _ in range(rng.randint(0, 1))]


# Version times and event times on coarse grids (25 ms, 5 ms): lookups often land exactly on
# a version's instant, where "at or before" matters.
def _time(rng: Chooser) -> int:
    return rng.randint(0, 40) * 25


def _rate(rng: Chooser) -> float:
    return float(rng.randint(1, 9))


def scd_table(rng: Chooser) -> Scd:
    rows = []
    for currency in CURRENCIES:
        first = rng.choice([0, 0, 0, 100])
        starts = {first, *(_time(rng) for _ in range(rng.randint(0, 3)))}
        for start in sorted(starts):
            length = rng.choice([None] * 5 + [25, 100])
            valid_to = None if length is None else start + length
            rows.append(ScdRow(currency, start, valid_to, _rate(rng)))
    return Scd(tuple(rows))


def cdc_log(rng: Chooser) -> Cdc:
    snapshot_time = rng.choice([None, None, 50])
    changes = []
    if snapshot_time is None:  # the log starts with every currency
        changes = [Change(c, rng.choice([0, 25, 100]), 0, "upsert", _rate(rng)) for c in CURRENCIES]
    for sequence in range(1, rng.randint(3, 12)):
        op = rng.choice(["upsert", "upsert", "upsert", "delete"])
        rate = _rate(rng) if op == "upsert" else None
        changes.append(Change(rng.choice(CURRENCIES), _time(rng), sequence, op, rate))
    snapshot = ()
    if snapshot_time is not None:
        held = rng.choice([CURRENCIES, CURRENCIES, "xy"])
        snapshot = tuple((c, _rate(rng)) for c in held)
    return Cdc(tuple(changes), snapshot, snapshot_time)


Case = tuple[list[Transaction], RateLookup, Job]


def draw_case(rng: Chooser, row: Mapping[str, str]) -> Case:
    """Transactions, a lookup and a job; the options ``row`` names are fixed, the others
    drawn (for hypothesis, ``row`` is empty)."""

    def pick(name: str, values: Sequence[str]) -> str:
        return row[name] if name in row else rng.choice(values)

    transactions = [t for p in range(rng.randint(1, 3)) for t in one_partition(rng, "t1", p)]
    source = scd_table(rng) if pick("source", ["scd", "cdc"]) == "scd" else cdc_log(rng)
    time = pick("lookup_time", ["processing", "processing", "event"])
    delay = rng.choice([0, 7, 40]) if time == "processing" else 0
    lookup = RateLookup(source, time, delay, pick("how", ["left", "inner"]))
    kind = pick("kind", ["tumbling", "sliding", "session"])
    job = Job(
        size=rng.choice([10, 50, 100]),
        slide=rng.choice([20, 35]) if kind == "sliding" else 0,
        gap=rng.choice([10, 60]) if kind == "session" else 0,
        window_offset=rng.choice([0, 7]),
        domain=pick("domain", ["event", "event", "processing"]),
        trigger=pick("trigger", ["default", "default", "per_record"]),
        bound=rng.choice([0, 5, 30]),
        interval=rng.choice([1, 7, 50]),
        emission=pick("emission", ["periodic", "on_event"]),
        lateness=rng.choice([0, 0, 20]),
        min_gap=rng.choice([0, 0, 1]),
        min_delay=rng.choice([0, 10]),
        operator_delay=rng.choice([0, 5]),
    )
    return transactions, lookup, job


@st.composite
def cases(draw) -> Case:
    return draw_case(Drawn(draw), {})


#: The options whose every pair of values the table covers.
OPTIONS: dict[str, tuple] = {
    "kind": ("tumbling", "sliding", "session"),
    "domain": ("event", "processing"),
    "trigger": ("default", "per_record"),
    "emission": ("periodic", "on_event"),
    "how": ("left", "inner"),
    "lookup_time": ("processing", "event"),
    "source": ("scd", "cdc"),
}


def options_of(transactions: list[Transaction], lookup: RateLookup, job: Job) -> dict:
    """A case's option values, read from it; "inner" only if the lookup removed a record
    and kept another."""
    kept = [r.key is not None for r in enrich(transactions, lookup, job)]
    return {
        "kind": "session" if job.gap else "sliding" if job.slide else "tumbling",
        "domain": job.domain,
        "trigger": job.trigger,
        "emission": job.emission,
        "how": lookup.how if lookup.how == "left" or 0 < sum(kept) < len(kept) else "no-op",
        "lookup_time": lookup.time,
        "source": "scd" if isinstance(lookup.source, Scd) else "cdc",
    }


def table_case(index: int, row: Mapping[str, str]) -> Case:
    """The first seeded draw with the row's options."""
    for attempt in itertools.count():
        case = draw_case(random.Random(f"row {index}, attempt {attempt}"), row)
        if options_of(*case) == row:
            return case
    raise AssertionError("unreachable")


TABLE = [table_case(i, row) for i, row in enumerate(all_pairs(OPTIONS, lambda row: True))]


def state_source(spark, source: Scd | Cdc) -> ScdTable | CdcLog:
    if isinstance(source, Scd):
        df = spark.createDataFrame(
            [(r.currency, r.valid_from, r.valid_to, r.rate) for r in source.rows],
            "currency string, valid_from long, valid_to long, rate double",
        )
        return ScdTable("rates", ["currency"], valid_to="valid_to", dataframe=df)
    log = spark.createDataFrame(
        [(c.currency, c.time, c.sequence, c.op, c.rate) for c in source.changes],
        "currency string, change_time long, lsn long, op string, rate double",
    )
    snapshot = None
    if source.snapshot_time is not None:
        snapshot = spark.createDataFrame(list(source.snapshot), "currency string, rate double")
    return CdcLog(
        "rates",
        ["currency"],
        sequence="lsn",
        dataframe=log,
        snapshot_dataframe=snapshot,
        snapshot_time_ms=source.snapshot_time,
    )


def spark_backfill(spark, transactions: list[Transaction], lookup: RateLookup, job: Job):
    rows = [(t.partition, t.offset, t.et, t.key, t.currency, t.amount) for t in transactions]
    df = spark.createDataFrame(
        rows, "partition int, offset long, et long, user string, currency string, amount double"
    ).withColumn("event_time", F.timestamp_millis("et"))
    spec = StreamJob(
        topics=[ArchivedTopic("t1", dataframe=df.drop("et"))],
        keys=["user"],
        window=plugin_window(job),
        aggregations=[Aggregation("value", f, f) for f in ("sum", "min", "max")],
        trigger=plugin_trigger(job),
        watermark=WatermarkStrategy(job.bound, job.interval, job.emission),
        processing_time=ProcessingTimeModel(job.min_gap, job.min_delay),
        operator_delay_ms=job.operator_delay,
        lookups=[
            Lookup(
                state_source(spark, lookup.source),
                ["rate"],
                time=lookup.time,  # type: ignore[arg-type]
                delay_ms=lookup.delay,
                how=lookup.how,  # type: ignore[arg-type]
            )
        ],
        derived={"value": f"amount * coalesce(rate, {NO_RATE}D)"},
    )
    result = backfill(spark, spec)
    emissions, dropped = collect_log(result)
    result.release()
    return emissions, dropped, result.stats


def check(spark, transactions: list[Transaction], lookup: RateLookup, job: Job) -> list[tuple]:
    """Emissions, drops and status counts equal the reference's; returns its emissions."""
    counts: dict[str, int] = {}
    expected_emissions, expected_dropped = simulate_enriched(transactions, lookup, job, counts)
    emissions, dropped, stats = spark_backfill(spark, transactions, lookup, job)
    assert normalized(emissions) == normalized(expected_emissions)
    assert dropped == expected_dropped
    distinct = len({(t.topic, t.partition, t.offset) for t in transactions})
    expected = {
        "records_read": len(transactions),
        "duplicates_removed": len(transactions) - distinct,
        "records_without_state": counts.pop("records_without_state"),
        **{f"records_{status}": n for status, n in counts.items()},
    }
    assert {k: stats.get(k) for k in expected} == expected
    return expected_emissions


#: Sessions behind an inner lookup: b's record (no rate for "w") is removed, but its
#: watermark (on-event, W = 24) fires a's session [0, 10) on time at 25; it had no emit time.
INNER_SESSION: Case = (
    [Transaction("t1", 0, 1, 0, "a", "x", 1.0), Transaction("t1", 0, 2, 25, "b", "w", 2.0)],
    RateLookup(Scd((ScdRow("x", 0, None, 2.0),)), time="event", how="inner"),
    Job(size=10, gap=10, interval=0, emission="on_event"),
)


@pytest.mark.parametrize(
    "case", TABLE, ids=["-".join(options_of(*case).values()) for case in TABLE]
)
def test_all_pairs_table_row(spark, case):
    check(spark, *case)


def test_the_table_covers_every_pair():
    """Every pair of option values is in some row, as read from the rows' cases."""
    wanted = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(OPTIONS, 2)
        for x in OPTIONS[a]
        for y in OPTIONS[b]
    }
    assert len(wanted) == 3 * 2 * 6 + 15 * 2 * 2  # kind x 6 two-valued options, 15 pairs of those
    covered = set().union(*(pairs_of(options_of(*case), OPTIONS) for case in TABLE))
    assert sorted(wanted - covered) == []


@PROFILE
@given(case=cases())
@example(case=INNER_SESSION)
def test_enriched_backfill_equals_the_reference(spark, case):
    assume(case[0])  # an empty archive is refused; test_bad_input covers it
    check(spark, *case)


def test_sessions_fire_on_the_watermark_of_records_an_inner_lookup_removed(spark):
    # The reproduction as reported: one EUR rate; the XXX record has none.
    transactions = [
        Transaction("t1", 0, 1, 0, "a", "EUR", 1.0),
        Transaction("t1", 0, 2, 25, "b", "XXX", 2.0),
    ]
    lookup = RateLookup(Scd((ScdRow("EUR", 0, None, 2.0),)), time="event", how="inner")
    emissions = check(spark, transactions, lookup, INNER_SESSION[2])
    assert emissions == [("a", 0, 10, 25, 0, "on_time", 1, 2.0, 2.0, 2.0)]
