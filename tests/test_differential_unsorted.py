"""The strategies that never sort the records against the reference simulator, on archives and
jobs hypothesis draws, each case compared in full by :func:`tests.test_differential.check`.
The drawing and the profiles are tests/test_differential.py's; the test is in a file of its
own (two strategies run each example, which makes it the longest of the differential tests) so
that a second test process can run it alongside the others.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from feast_stream_backfill.planner import plan
from feast_stream_backfill.strategies.aligned_unsorted import window_aggregates
from tests.test_differential import (
    REALISTIC,
    archives,
    check,
    jobs,
    modelled,
    shifted,
    stream_job,
)

#: The jobs the strategy without a sort accepts: aligned event-time windows, the default trigger
#: with or without lateness, periodic watermarks, D1 = 0; with idleness, those whose archive has
#: no idle partition run without the sort, the others with it.
unsorted_jobs = jobs.map(
    lambda job: replace(
        job,
        gap=0,
        domain="event",
        trigger="default",
        emission="periodic",
        min_gap=0,
    )
)


@given(
    records=archives(),
    job=unsorted_jobs,
    base=st.sampled_from([0, REALISTIC]),
    chunk_windows=st.sampled_from([window_aggregates.CHUNK_WINDOWS, 1]),
)
def test_unsorted_backfill_equals_reference_simulator(spark, records, job, base, chunk_windows):
    """The strategy that never sorts the records: planned first for these jobs, and equal to
    the simulator (as is the strategy in processing order), also where sliding windows'
    chunks (one window's size each) cut the archive everywhere."""
    assume(records)
    records, job = shifted(records, base), modelled(job, records)
    assert plan(stream_job(spark, records, job)).strategy.name == "aligned-unsorted"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(window_aggregates, "CHUNK_WINDOWS", chunk_windows)
        check(spark, records, job)


#: The processing-time jobs the strategy without a sort for them accepts: aligned windows
#: (tumbling, sliding, cumulative), the processing-time trigger, D1 = 0.
processing_time_jobs = st.tuples(jobs, st.sampled_from([0, 0, 2, 5])).map(
    lambda drawn: replace(
        drawn[0],
        gap=0,
        domain="processing",
        trigger="default",
        min_gap=0,
        lateness=0,
        **({"slide": 0, "step": drawn[0].size // drawn[1]} if drawn[1] else {}),
    )
)


@given(records=archives(), job=processing_time_jobs, base=st.sampled_from([0, REALISTIC]))
def test_processing_time_unsorted_backfill_equals_reference_simulator(spark, records, job, base):
    """Processing-time windows without the sort: planned first for these jobs, and equal to the
    simulator (as is the strategy in processing order)."""
    assume(records)
    records, job = shifted(records, base), modelled(job, records)
    assert plan(stream_job(spark, records, job)).strategy.name == "processing-time-unsorted"
    check(spark, records, job)
