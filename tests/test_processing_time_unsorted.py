"""The strategy for processing-time windows that never sorts the records
(:mod:`feast_stream_backfill.strategies.processing_time_unsorted`), hand-computed, under it
and under the strategy in processing order; ``tests/test_differential.py`` checks both against
the simulator on random archives."""

import pytest

from feast_stream_backfill.planner import plan
from tests.reference_simulator import Job, Record
from tests.test_differential import spark_backfill_with_stats, stream_job

#: Processing-time tumbling windows of 100 ms, D2 = 10; one partition, three blocks of 64
#: offsets, o129 archived twice. Read at D2 + the highest et so far:
#: block 0 (the partition's first, read in order): o0 et 5 at 15, o1 et 95 at 105, o2 et 20
#: at 105;
#: block 1, after 95: between 105 and D2 + its highest 150 = 160, one pane [100, 200): o64 et
#: 150 and o65 et 120, both at 160;
#: block 2, after 150: between 160 and 205, across 200, so read in order: o128 et 185 and
#: o129 et 100 at 195, in [100, 200); o130 et 195 and o131 et 30 at 205, in [200, 300).
RECORDS = [
    Record("t1", 0, offset, et, key, value)
    for offset, et, key, value in [
        (0, 5, "a", 1.0),
        (1, 95, "a", 2.0),
        (2, 20, "b", 4.0),
        (64, 150, "a", 8.0),
        (65, 120, "b", 16.0),
        (128, 185, "a", 32.0),
        (129, 100, "b", 64.0),
        (129, 100, "b", 64.0),
        (130, 195, "a", 128.0),
        (131, 30, "b", 256.0),
    ]
]
JOB = Job(size=100, domain="processing", min_delay=10)


@pytest.mark.parametrize("strategy", ["processing-time-unsorted", "aligned-in-order"])
def test_records_take_their_block_s_pane_or_their_own_time_where_it_straddles_two(spark, strategy):
    # Each window fires by the clock at its end (maxTs + 1), with its records counted once.
    assert plan(stream_job(spark, RECORDS, JOB)).strategy.name == "processing-time-unsorted"
    emissions, dropped, stats = spark_backfill_with_stats(spark, RECORDS, JOB, strategy=strategy)
    assert sorted(e[:8] for e in emissions) == [
        ("a", 0, 100, 100, 0, "on_time", 1, 1.0),
        ("a", 100, 200, 200, 0, "on_time", 3, 42.0),
        ("a", 200, 300, 300, 0, "on_time", 1, 128.0),
        ("b", 100, 200, 200, 0, "on_time", 3, 84.0),
        ("b", 200, 300, 300, 0, "on_time", 1, 256.0),
    ]
    assert dropped == {}
    assert (stats["records_read"], stats["duplicates_removed"]) == (10, 1)
    assert stats["records_on_time"] == 9
