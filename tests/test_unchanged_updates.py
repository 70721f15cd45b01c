"""Per-record firing that skips unchanged updates (``PerRecordTrigger(skip_unchanged=True)``,
Flink SQL's unbounded ``GROUP BY`` without a state TTL), hand-computed, by the backfill and by
the reference simulator against the same figures.

One partition, processing time = event time (in order). A key's state never expires (a
processing-time session of a century, as ``job_from_sql`` maps the ``GROUP BY``); features
SUM and MAX of ``amount``, which may be null or NaN (a DataStream job's ``Math.max``: a NaN
is the maximum).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    PerRecordTrigger,
    SessionWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from feast_stream_backfill.explain.prepared import prepare
from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from tests.conftest import archive
from tests.reference_simulator import Job, Record, simulate

#: (offset, time, key, amount) and what becomes of each update (SUM, MAX after it).
ROWS = [
    (0, 1_000, "u1", 1.0),  # u1's first: (1, 1) written
    (1, 1_000, "u1", 0.0),  # (1, 1): unchanged, skipped
    (2, 1_000, "u1", 3.0),  # (4, 3) written, the second row of 1 000 (emit_sequence 1, not 2)
    (3, 2_000, "u2", 5.0),  # u2's first: (5, 5)
    (4, 3_000, "u1", 0.0),  # a SUM of 0.0, MAX unchanged: skipped
    (5, 4_000, "u1", 2.0),  # (6, 3): MAX unchanged, SUM not: written
    (6, 5_000, "u2", None),  # a null amount changes nothing: skipped
    (7, 6_000, "u3", None),  # u3's first: (null, null) written
    (8, 7_000, "u3", None),  # (null, null) again: two nulls are equal, skipped
    (9, 8_000, "u3", 1.0),  # (1, 1) written
    (10, 9_000, "u2", math.nan),  # (NaN, NaN) written
    (11, 10_000, "u2", 0.0),  # (NaN, NaN) written again: a NaN equals nothing
]
#: The rows written: (key, emit_time, emit_sequence, record_count, SUM, MAX).
WRITTEN = [
    ("u1", 1_000, 0, 1, 1.0, 1.0),
    ("u1", 1_000, 1, 3, 4.0, 3.0),
    ("u1", 4_000, 0, 5, 6.0, 3.0),
    ("u2", 2_000, 0, 1, 5.0, 5.0),
    ("u2", 9_000, 0, 3, math.nan, math.nan),
    ("u2", 10_000, 0, 4, math.nan, math.nan),
    ("u3", 6_000, 0, 1, None, None),
    ("u3", 8_000, 0, 3, 1.0, 1.0),
]
FEATURES = [Aggregation("amount", "sum", "sum"), Aggregation("amount", "max", "max")]


def _nan_free(rows) -> list[tuple]:
    return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows]


def _job(spark, rows, window, skip_unchanged: bool = True) -> StreamJob:
    records = archive(spark, [(0, *r) for r in rows])
    return StreamJob(
        topics=[ArchivedTopic("t", dataframe=records)],
        keys=["user"],
        window=window,
        aggregations=FEATURES,
        trigger=PerRecordTrigger(skip_unchanged=skip_unchanged),
        watermark=WatermarkStrategy(interval_ms=10),
    )


def _logged(result) -> list[tuple]:
    rows = result.emissions.selectExpr(
        "user", "unix_millis(emit_time)", "emit_sequence", "record_count", "sum", "max"
    ).collect()
    return sorted(map(tuple, rows), key=lambda r: (r[0], r[1], r[2]))


def test_an_unchanged_update_is_not_written_and_the_rest_are_numbered(spark, tmp_path):
    result = backfill(spark, _job(spark, ROWS, SessionWindows(NEVER_EXPIRES, "processing")))
    assert _nan_free(_logged(result)) == _nan_free(WRITTEN)
    assert {r["firing"] for r in result.emissions.collect()} == {"per_record"}
    # Every record was processed: its firing counted, the four not written counted apart.
    assert result.stats == {
        "records_read": 12,
        "duplicates_removed": 0,
        "records_on_time": 0,
        "records_late": 0,
        "records_per_record": 12,
        "records_dropped": 0,
        "records_pending": 0,
        "updates_unchanged": 4,
    }
    # The log, kept for the count, is what is written.
    result.write(str(tmp_path / "log"))
    written = spark.read.format("delta").load(str(tmp_path / "log"))
    assert written.count() == len(WRITTEN)


def test_the_simulator_skips_the_same_updates():
    records = [Record("t", 0, *r) for r in ROWS]
    job = Job(size=1, gap=NEVER_EXPIRES, domain="processing", trigger="per_record", interval=10)
    counts: dict[str, int] = {}
    emissions, dropped = simulate(records, job, counts)
    assert len(emissions) == len(ROWS)  # without the flag, every update
    skipping = replace(job, skip_unchanged=("sum", "max"))
    emissions, dropped = simulate(records, skipping, counts)
    logged = sorted((e[0], e[3], e[4], e[6], e[7], e[9]) for e in emissions)
    assert _nan_free(logged) == _nan_free(WRITTEN)
    assert (dropped, counts["per_record"], counts["updates_unchanged"]) == ({}, 12, 4)


def test_without_the_flag_every_update_is_written(spark):
    window = SessionWindows(NEVER_EXPIRES, "processing")
    result = backfill(spark, _job(spark, ROWS, window, skip_unchanged=False))
    assert len(_logged(result)) == len(ROWS)
    assert "updates_unchanged" not in result.stats
    result.release()


def test_a_firing_is_compared_with_its_key_s_previous_one_whatever_its_window(spark):
    """Tumbling windows of 10 ms by processing time, fired per record: a's first firing of
    [10, 20) holds what a last wrote, from [0, 10): not written; the key's rows are in one
    order, whatever their windows."""
    rows = [(0, 5, "a", 1.0), (1, 12, "a", 1.0), (2, 14, "a", 2.0), (3, 16, "a", 0.0)]
    result = backfill(spark, _job(spark, rows, TumblingWindows(10, domain="processing")))
    assert _logged(result) == [("a", 5, 0, 1, 1.0, 1.0), ("a", 14, 0, 2, 3.0, 2.0)]
    assert result.stats["updates_unchanged"] == 2
    result.release()
    job = Job(size=10, domain="processing", trigger="per_record", skip_unchanged=("sum", "max"))
    emissions, _ = simulate([Record("t", 0, *r) for r in rows], job)
    assert [(e[0], e[3], e[4], e[6], e[7], e[9]) for e in emissions] == _logged(result)


def test_the_key_s_firings_are_put_in_order_in_the_shuffle_that_numbers_them(spark):
    """Per-record firings of aligned windows are shuffled by key once: the running aggregates,
    the comparison with the previous firing and the numbering share it; the key's firings are
    sorted once for the last two (the running aggregates take a sort per window)."""
    result = backfill(spark, _job(spark, ROWS, TumblingWindows(10_000, domain="processing")))
    plan = result.emissions._jdf.queryExecution().executedPlan().toString()
    log = plan.split("InMemoryTableScan")[1]  # the kept log, above the cached records
    shuffles = re.findall(r"Exchange (hashpartitioning\([^)]*\))", log)
    assert len(shuffles) == 1 and re.fullmatch(r"hashpartitioning\(user#\d+, \d+\)", shuffles[0])
    assert len(re.findall(r"\bSort \[", log)) == 2
    result.release()


def test_the_flag_is_a_boolean_and_the_explain_tools_refuse_it(spark):
    with pytest.raises(ValueError, match="skip_unchanged must be True or False"):
        PerRecordTrigger(skip_unchanged="yes")  # type: ignore[arg-type]
    job = _job(spark, ROWS, TumblingWindows(10_000))
    with pytest.raises(ValueError, match="skips unchanged updates .* is not supported"):
        prepare(spark, job)
