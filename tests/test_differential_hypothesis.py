"""The Spark backfill against the reference simulator on archives and jobs hypothesis draws:
every kind of job, session jobs (the merging strategy's) and cumulative ones, each case
compared in full by :func:`tests.test_differential.check`. The drawing and the profiles
(``ci``: 4 derandomized examples per test besides the ``@example``s; ``long``) are
tests/test_differential.py's; the tests are in a file of their own so that a second test
process can run them alongside the table's and the hand-picked cases.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import assume, example, given
from hypothesis import strategies as st

from feast_stream_backfill.planner import plan
from tests.reference_simulator import Record
from tests.test_differential import (
    CUMULATIVE_JOB,
    CUMULATIVE_RECORDS,
    IDLE_SESSION_JOB,
    IDLE_TO_THE_END,
    PROCESSING_SESSION_JOB,
    REALISTIC,
    SESSION_JOB,
    SESSION_REPRODUCTION,
    archives,
    check,
    jobs,
    modelled,
    shifted,
    stream_job,
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


#: Cumulative windows (Flink SQL's CUMULATE) with every other option drawn as in ``jobs``,
#: but the event-time trigger without lateness, all Flink SQL gives them; 2, 5 or 10 steps.
cumulative_jobs = st.tuples(jobs, st.sampled_from([2, 5, 10])).map(
    lambda drawn: replace(
        drawn[0],
        gap=0,
        slide=0,
        step=drawn[0].size // drawn[1],
        domain="event",
        trigger="default",
        lateness=0,
    )
)


@given(records=archives(), job=cumulative_jobs, base=st.sampled_from([0, REALISTIC]))
@example(records=CUMULATIVE_RECORDS, job=CUMULATIVE_JOB, base=REALISTIC)
@example(records=CUMULATIVE_RECORDS, job=replace(CUMULATIVE_JOB, emission="periodic"), base=0)
def test_cumulative_backfill_equals_reference_simulator(spark, records, job, base):
    """Cumulative windows by every strategy that accepts them (both aligned ones, as the
    other options allow) equal the simulator."""
    assume(records)
    check(spark, shifted(records, base), modelled(job, records))
