"""Enriched backfills against the reference (tests/reference_enrichment.py): identical logs.

Hypothesis draws archives of transactions (a currency and an amount), a rate table (SCD type
II with or without ``valid_to``, or a CDC log with deletes over an optional snapshot), a
lookup (processing time with a delay, or event time; left or inner) and a job; the Spark
emission log of ``sum/min/max(amount x rate)`` must equal the reference's exactly.
``HYPOTHESIS_PROFILE=long`` runs 500 examples instead of CI's 15.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    ProcessingTimeModel,
    StreamJob,
    TumblingWindows,
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
    simulate_enriched,
)
from tests.reference_simulator import Job

CI = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
LONG = settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck))
PROFILE = LONG if os.environ.get("HYPOTHESIS_PROFILE") == "long" else CI

CURRENCIES = "xyz"
# Version times and event times on coarse grids (25 ms, 5 ms): lookups often land exactly on
# a version's instant, where "at or before" matters.
times = st.integers(0, 40).map(lambda i: i * 25)
rates = st.integers(1, 9).map(float)


@st.composite
def partitions(draw, topic: str, partition: int) -> list[Transaction]:
    """Roughly increasing event times with jitter, some late, some copies, a few null keys."""
    n = draw(st.integers(3, 10))
    step = draw(st.sampled_from([5, 10, 20]))
    out, offset = [], -1
    for i in range(n):
        offset += draw(st.sampled_from([1, 1, 2]))
        late = draw(st.sampled_from([0] * 8 + [draw(st.integers(10, 80)) * 5]))
        jitter = draw(st.sampled_from([-25, -10, -5, 0, 0, 5, 10, 25]))
        et = max(0, i * step * 5 + jitter - late)
        # "w" has no rate ever: a left lookup keeps it unrated, an inner one removes it.
        currency = draw(st.sampled_from([*CURRENCIES, "w", None]))
        amount = float(draw(st.integers(1, 9)))
        key = draw(st.sampled_from("ab"))
        out.append(Transaction(topic, partition, offset, et, key, currency, amount))
    copies = draw(st.lists(st.sampled_from(out), max_size=1))
    return out + copies


@st.composite
def archives(draw) -> list[Transaction]:
    records = []
    for p in range(draw(st.integers(1, 3))):
        records += draw(partitions("t1", p))
    return records


@st.composite
def scd_tables(draw) -> Scd:
    rows = []
    for currency in CURRENCIES:
        first = draw(st.sampled_from([0, 0, 0, 100]))
        starts = {first, *draw(st.lists(times, max_size=3))}
        for start in sorted(starts):
            length = draw(st.sampled_from([None] * 5 + [25, 100]))
            valid_to = None if length is None else start + length
            rows.append(ScdRow(currency, start, valid_to, draw(rates)))
    return Scd(tuple(rows))


@st.composite
def cdc_logs(draw) -> Cdc:
    snapshot_time = draw(st.sampled_from([None, None, 50]))
    changes = []
    if snapshot_time is None:  # the log starts with every currency
        early = st.sampled_from([0, 25, 100])
        changes = [Change(c, draw(early), 0, "upsert", draw(rates)) for c in CURRENCIES]
    for sequence in range(1, draw(st.integers(3, 12))):
        op = draw(st.sampled_from(["upsert", "upsert", "upsert", "delete"]))
        rate = draw(rates) if op == "upsert" else None
        changes.append(Change(draw(st.sampled_from(CURRENCIES)), draw(times), sequence, op, rate))
    snapshot = ()
    if snapshot_time is not None:
        held = draw(st.sampled_from([CURRENCIES, CURRENCIES, "xy"]))
        snapshot = tuple((c, draw(rates)) for c in held)
    return Cdc(tuple(changes), snapshot, snapshot_time)


@st.composite
def lookups(draw) -> RateLookup:
    source = draw(st.one_of(scd_tables(), cdc_logs()))
    time = draw(st.sampled_from(["processing", "processing", "event"]))
    delay = draw(st.sampled_from([0, 7, 40])) if time == "processing" else 0
    return RateLookup(source, time, delay, draw(st.sampled_from(["left", "inner"])))


jobs = st.builds(
    Job,
    size=st.sampled_from([10, 50, 100]),
    window_offset=st.sampled_from([0, 7]),
    bound=st.sampled_from([0, 5, 30]),
    interval=st.sampled_from([1, 7, 50]),
    emission=st.sampled_from(["periodic", "on_event"]),
    lateness=st.sampled_from([0, 0, 20]),
    min_gap=st.sampled_from([0, 0, 1]),
    min_delay=st.sampled_from([0, 10]),
    operator_delay=st.sampled_from([0, 5]),
)


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
        window=TumblingWindows(job.size, job.window_offset),
        aggregations=[Aggregation("value", f, f) for f in ("sum", "min", "max")],
        trigger=EventTimeTrigger(job.lateness),
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


@PROFILE
@given(transactions=archives(), lookup=lookups(), job=jobs)
def test_enriched_backfill_equals_the_reference(spark, transactions, lookup, job):
    if not transactions:
        return  # an empty archive is refused; test_bad_input covers it
    expected_emissions, expected_dropped = simulate_enriched(transactions, lookup, job)
    emissions, dropped, stats = spark_backfill(spark, transactions, lookup, job)
    order = lambda e: (e[0], e[3], e[4])  # noqa: E731  per key: (emit_time, emit_sequence)
    assert sorted(emissions, key=order) == sorted(expected_emissions, key=order)
    assert dropped == expected_dropped
    # Every record read is accounted for (tumbling windows: one window per record).
    windowed = sum(stats.get(f"records_{s}", 0) for s in ("on_time", "late", "dropped", "pending"))
    removed = stats["duplicates_removed"] + stats["records_without_state"]
    assert removed + windowed == stats["records_read"]
