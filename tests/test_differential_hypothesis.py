"""The Spark backfill against the reference simulator on archives and jobs hypothesis draws:
every kind of job, session jobs (the merging strategy's), per-record firings skipping
unchanged updates, cumulative ones and jobs with a record filter, each case
compared in full by :func:`tests.test_differential.check`. The drawing and the profiles
(``ci``: 4 derandomized examples per test besides the ``@example``s; ``long``) are
tests/test_differential.py's; the tests are in a file of their own so that a second test
process can run them alongside the table's and the hand-picked cases.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import assume, example, given
from hypothesis import strategies as st

from feast_stream_backfill.planner import eligible, plan
from tests.reference_simulator import Record, simulate
from tests.test_differential import (
    CHECKED,
    CUMULATIVE_JOB,
    CUMULATIVE_RECORDS,
    IDLE_SESSION_JOB,
    IDLE_TO_THE_END,
    PROCESSING_SESSION_JOB,
    REALISTIC,
    SESSION_JOB,
    SESSION_REPRODUCTION,
    SKIPPED,
    archives,
    check,
    expected_stats,
    jobs,
    modelled,
    normalized,
    shifted,
    spark_backfill_with_stats,
    stream_job,
    with_mean_and_count,
    with_zeros,
)


@given(records=archives(), job=jobs, base=st.sampled_from([0, REALISTIC]))
@example(
    records=[Record("t1", 0, *r) for r in SESSION_REPRODUCTION], job=SESSION_JOB, base=REALISTIC
)
@example(
    records=[Record("t1", 0, 0, 5, "a", 1.0), Record("t1", 0, 1, 500, "a", 2.0)],
    job=PROCESSING_SESSION_JOB,
    base=REALISTIC,
)
@example(records=IDLE_TO_THE_END, job=IDLE_SESSION_JOB, base=0)
def test_spark_backfill_equals_reference_simulator(spark, records, job, base):
    assume(records)  # an empty archive is refused; test_bad_input covers it
    check(spark, shifted(records, base), modelled(job, records))


#: Session jobs with every other option drawn as in ``jobs``: a third of those reach the
#: merging strategy, so this test gives it as many cases as the aligned ones get.
session_jobs = st.tuples(jobs, st.sampled_from([15, 60])).map(
    lambda drawn: replace(drawn[0], gap=drawn[1])
)


@given(records=archives(), job=session_jobs, base=st.sampled_from([0, REALISTIC]))
def test_merging_backfill_equals_reference_simulator(spark, records, job, base):
    """Session windows (the only strategy that merges windows) equal the simulator."""
    assume(records)
    records, job = shifted(records, base), modelled(job, records)
    assert plan(stream_job(spark, records, job)).strategy.name == "merging"
    check(spark, records, job)


#: Per-record firings skipping unchanged updates (Flink SQL's GROUP BY without a state TTL),
#: with every other option drawn as in ``jobs``: windows of either domain, sessions among
#: them, with or without lateness.
skipping_jobs = jobs.map(lambda job: replace(job, trigger="per_record", skip_unchanged=SKIPPED))


@given(records=archives(), job=skipping_jobs, base=st.sampled_from([0, REALISTIC]))
def test_skipping_unchanged_updates_equals_reference_simulator(spark, records, job, base):
    """A firing whose sum, min and max all equal its key's previous firing's is left out,
    by every strategy that accepts the job, as the simulator leaves it out (comparing with the
    key's last written values); a NaN is never unchanged. Values 1 to 4 are zeros here, so
    that windows keep their sum, min and max."""
    assume(records)
    check(spark, shifted(with_zeros(records), base), modelled(job, records))


#: Cumulative windows (Flink SQL's CUMULATE, over an event-time or a PROCTIME() column) with
#: every other option drawn as in ``jobs``, but their domain's trigger without lateness, all
#: Flink SQL gives them; 2, 5 or 10 steps.
cumulative_jobs = st.tuples(jobs, st.sampled_from([2, 5, 10])).map(
    lambda drawn: replace(
        drawn[0], gap=0, slide=0, step=drawn[0].size // drawn[1], trigger="default", lateness=0
    )
)


@given(records=archives(), job=cumulative_jobs, base=st.sampled_from([0, REALISTIC]))
@example(records=CUMULATIVE_RECORDS, job=CUMULATIVE_JOB, base=REALISTIC)
@example(records=CUMULATIVE_RECORDS, job=replace(CUMULATIVE_JOB, emission="periodic"), base=0)
@example(records=CUMULATIVE_RECORDS, job=replace(CUMULATIVE_JOB, domain="processing"), base=0)
def test_cumulative_backfill_equals_reference_simulator(spark, records, job, base):
    """Cumulative windows by every strategy that accepts them (both aligned ones, as the
    other options allow) equal the simulator, in event and in processing time."""
    assume(records)
    check(spark, shifted(records, base), modelled(job, records))


@given(
    records=archives(),
    job=jobs,
    base=st.sampled_from([0, REALISTIC]),
    threshold=st.sampled_from([2, 5, 8]),
)
def test_a_record_filter_equals_the_simulator_of_those_records_without_keys(
    spark, records, job, base, threshold
):
    """``where="amount > t"`` by every strategy that accepts it equals the simulator given the
    records it does not hold for without a key (a filter before ``keyBy``: its source's
    watermark sees such a record, no window does). A NaN amount is above every number in
    Spark SQL: it stays."""
    assume(records)
    records, job = shifted(records, base), modelled(job, records)
    where = f"amount > {threshold}"
    kept = [
        r if math.isnan(r.value) or r.value > threshold else replace(r, key=None) for r in records
    ]
    counts: dict[str, int] = {}
    emissions, dropped = simulate(kept, job, counts)
    filtered = len({(r.topic, r.partition, r.offset) for r in kept if r.key is None})
    expected = {**expected_stats(records, counts), "records_filtered": filtered}
    for strategy in eligible(stream_job(spark, records, job, where=where)):
        actual, actual_dropped, stats = spark_backfill_with_stats(
            spark, records, job, strategy=strategy.name, where=where
        )
        assert normalized(actual) == normalized(map(with_mean_and_count, emissions)), strategy
        assert actual_dropped == dropped, strategy
        assert {k: stats.get(k) for k in expected} == expected, strategy
        CHECKED[strategy.name] += 1


#: OVER windows (Flink SQL's OVER: RANGE of 0, 15 or 100 ms, ROWS of 0, 1 or 3 rows, or
#: UNBOUNDED, PRECEDING, ordered by event time; the bounded frames by processing time too, a
#: ROWS frame with or without a state TTL) with every other option drawn as in ``jobs``, but
#: no trigger and no lateness, all Flink SQL gives them.
over_frames = st.one_of(
    st.sampled_from([0, 15, 100]).map(lambda p: {"over": p}),
    st.sampled_from([0, 1, 3]).map(lambda n: {"over_rows": n}),
    st.sampled_from(["range", "rows"]).map(lambda frame: {"over_unbounded": frame}),
    st.tuples(st.sampled_from([0, 1, 15, 100]), st.just("processing")).map(
        lambda drawn: {"over": drawn[0], "domain": drawn[1]}
    ),
    st.tuples(st.sampled_from([0, 1, 3]), st.sampled_from([0, 2, 40])).map(
        lambda drawn: {"over_rows": drawn[0], "over_ttl": drawn[1], "domain": "processing"}
    ),
)
over_jobs = st.tuples(jobs, over_frames).map(
    lambda drawn: replace(
        drawn[0],
        gap=0,
        slide=0,
        step=0,
        **{"domain": "event", **drawn[1]},
        trigger="default",
        lateness=0,
    )
)


@given(records=archives(), job=over_jobs, base=st.sampled_from([0, REALISTIC]))
def test_over_backfill_equals_reference_simulator(spark, records, job, base):
    """OVER windows (the over strategy's alone) equal the simulator: rows emitted as the
    watermark rises to them, dropped behind their key's last emission (bounded frames) or the
    watermark (unbounded ones), retracted out of range or rows, a RANGE frame's cleanup; by
    processing time, a RANGE frame's rows written by the next millisecond's timer, a ROWS
    frame's at once, its state cleared by the retention timer."""
    assume(records)
    records, job = shifted(records, base), modelled(job, records)
    assert plan(stream_job(spark, records, job)).strategy.name == "over"
    check(spark, records, job)
