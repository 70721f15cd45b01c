"""The plugin's backfill of a Flink SQL script against real Flink SQL (tests/conformance/sql):
identical rows, values, emit times and dropped records.

Eight hand-written jobs, checked by hand; they and 20 random ones from a fixed seed against the
reference simulator of the job ``job_from_sql`` maps each script onto (test_differential holds
the simulator equal to the backfill); the eight against the plugin's backfill; and the AVG of
a BIGINT that ``job_from_sql`` refuses. One Flink JVM runs them all. ``python -m
tests.conformance.sql --random N [--plugin]`` runs larger generated sets.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace

import pytest

from feast_stream_backfill.errors import UnsupportedSqlError
from feast_stream_backfill.flink_sql import job_from_sql
from tests.conformance.scenarios import BASE
from tests.conformance.sql.harness import (
    TABLE,
    SqlJob,
    SqlRun,
    archive,
    build,
    compare,
    flink_log,
    plugin_log,
    run_flink,
    simulated_log,
)
from tests.conformance.sql.jobs import (
    CUMULATE_ON_EVENT,
    EXAMPLE,
    HOP_ON_EVENT,
    LOOKUP_EXAMPLE,
    LOOKUP_LEFT_NULLS,
    OVER_RANGE,
    OVER_RANGE_UNBOUNDED,
    OVER_ROWS,
    OVER_ROWS_UNBOUNDED,
    PROC_CUMULATE,
    PROC_HOP,
    PROC_OVER_FOREVER,
    PROC_OVER_RANGE,
    PROC_OVER_ROWS_TTL,
    PROC_OVER_TTL,
    PROC_SESSION,
    PROC_TUMBLE,
    UNBOUNDED_FOREVER,
    UNBOUNDED_TTL,
    UNBOUNDED_UNCHANGED,
    UNION_EXAMPLE,
    VIEWED_EXAMPLE,
    generated,
    hand_written,
    script,
)
from tests.reference_simulator import Record

#: Every job fires; each window and GROUP BY two or three times, each OVER frame twice and
#: dropping rows, OVER inline and named, with a RANGE of 0, no frame written and frames
#: without BETWEEN; seven WHEREs, two over archives with NaN amounts; four with aggregates of
#: an expression; ten through a view, renaming the key or the time column, computing the
#: aggregated column, filtering, or ``SELECT *``, and one through a UNION ALL of two tables;
#: one window over the table's PROCTIME() column (test_the_random_jobs_cover_every_construct).
RANDOM = generated(20, seed=87616)
#: AVG over a BIGINT column: Flink's keeps the type (3 and 8 average to 5).
AVG_OF_BIGINT = SqlJob(
    name="avg_of_bigint",
    script=script(("user_id",), "BIGINT", 10, 0, 1, ["AVG"], emit="on-event"),
    records=[
        Record(TABLE, 0, o, et, "a", v) for o, (et, v) in enumerate([(1, 3.0), (2, 8.0), (20, 1.0)])
    ],
    keys=("user_id",),
    value_type="BIGINT",
    size=10,
    slide=0,
    functions=("AVG",),
    emission="on-event",
    idle=False,
)

#: The GROUP BY without a TTL of SUM and MAX: Flink skips an update equal to the previous one.
UNCHANGED_SKIPPED = replace(
    UNBOUNDED_FOREVER,
    name="group_by_without_ttl_unchanged",
    script=UNBOUNDED_FOREVER.script.replace("COUNT(*) AS a1", "MAX(amount) AS a1"),
    functions=("SUM", "MAX"),
)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[SqlJob, SqlRun]]:
    """Every job of this file run on Flink SQL, in one JVM."""
    jobs = [*hand_written(), *RANDOM, AVG_OF_BIGINT, UNCHANGED_SKIPPED, LOOKUP_LEFT_NULLS]
    return {j.name: (j, r) for j, r in zip(jobs, run_flink(build(), jobs), strict=True)}


def test_flink_sql_fires_the_hand_computed_example(runs):
    # One partition, periodic ticks every 200 ms, W = last ts - 5 s. The u2 record at 310 s
    # (a multiple of 200 ms: the record, then the tick) gives W = 305 s >= 300 s - 1 ms:
    # u1's [0, 5 min) fires on that tick; u2's at 640 s fires [5 min, 10 min) for both keys.
    job, run = runs[EXAMPLE.name]
    emissions, dropped, odd = flink_log(run, job)
    minutes = [
        ("u1", 0, 300_000, 310_000, 0, 3.0, 2.0),
        ("u1", 300_000, 600_000, 640_000, 0, 8.0, 1.0),
        ("u2", 300_000, 600_000, 640_000, 0, 4.0, 1.0),
    ]
    assert sorted(emissions) == [
        (k, BASE + s, BASE + e, BASE + t, q, "on_time", *v) for k, s, e, t, q, *v in minutes
    ]
    assert dropped == {}
    assert odd == []


def test_flink_sql_fires_the_hand_computed_example_through_a_view(runs):
    # The view leaves u1's $1 at 10 s out and doubles the rest; the windows fire as before.
    job, run = runs[VIEWED_EXAMPLE.name]
    emissions, dropped, odd = flink_log(run, job)
    minutes = [
        ("u1", 0, 300_000, 310_000, 0, 4.0, 1.0),
        ("u1", 300_000, 600_000, 640_000, 0, 16.0, 1.0),
        ("u2", 300_000, 600_000, 640_000, 0, 8.0, 1.0),
    ]
    assert sorted(emissions) == [
        (k, BASE + s, BASE + e, BASE + t, q, "on_time", *v) for k, s, e, t, q, *v in minutes
    ]
    assert (dropped, odd) == ({}, [])
    assert run.columns[0] == "customer"


def test_flink_sql_fires_the_hand_computed_union_of_two_tables(runs):
    # [0, 5 min) holds events' u1 1 and 2 and events_b's u1 3 (as 6; its 1 is left out). It
    # fires when the lower of the two tables' watermarks reaches 300 s - 1 ms: events' 310 s
    # record gives it 305 s, but events_b is at 178 s until its 360 s record (358 s).
    job, run = runs[UNION_EXAMPLE.name]
    emissions, dropped, odd = flink_log(run, job)
    assert emissions == [("u1", BASE, BASE + 300_000, BASE + 360_000, 0, "on_time", 9.0, 3.0)]
    assert (dropped, odd) == ({}, [])


def test_flink_sql_fires_the_hand_computed_lookup_join(runs):
    # Each record reads its user's factor as the table is at its processing time (its event
    # time here: one partition, in order). u1's $1 at 10 s and u2's $4 at 310 s find no row
    # and are left out; u2's still moves the watermark, firing [0, 5 min) at 310 s. u1's $8
    # at 380 s reads the factor 3 written at that instant.
    job, run = runs[LOOKUP_EXAMPLE.name]
    emissions, dropped, odd = flink_log(run, job)
    minutes = [
        ("u1", 0, 300_000, 310_000, 0, 4.0, 1.0),
        ("u1", 300_000, 600_000, 640_000, 0, 24.0, 1.0),
    ]
    assert sorted(emissions) == [
        (k, BASE + s, BASE + e, BASE + t, q, "on_time", *v) for k, s, e, t, q, *v in minutes
    ]
    assert (dropped, odd) == ({}, [])


def test_a_left_lookup_join_aggregates_its_nulls_as_flink_sql_does(spark, runs):
    # LEFT: a record without a row is kept, its product null. SUM and COUNT(amount) skip it,
    # COUNT(*) counts it; u2's window of its one null is written with a null SUM.
    job, run = runs[LOOKUP_LEFT_NULLS.name]
    emissions, dropped, odd = flink_log(run, job)
    minutes = [
        ("u1", 0, 300_000, 310_000, 0, 4.0, 2.0, 1.0),
        ("u1", 300_000, 600_000, 640_000, 0, 24.0, 1.0, 1.0),
        ("u2", 300_000, 600_000, 640_000, 0, None, 1.0, 0.0),
    ]
    assert sorted(emissions, key=str) == sorted(
        [(k, BASE + s, BASE + e, BASE + t, q, "on_time", *v) for k, s, e, t, q, *v in minutes],
        key=str,
    )
    assert (dropped, odd) == ({}, [])
    assert compare((emissions, dropped), plugin_log(spark, job)) == []


def test_flink_sql_fires_the_hand_computed_hop_with_late_records(runs):
    # On-event, B = 5: each record sets its split's ts - 5, the source keeps rises and takes
    # the MIN over splits. p0's et 31 (pt 31) brings W to min(26, p1's 21) = 21: [-10, 10)
    # and [0, 20) fire (b's et 9, read at pt 26 while W = 7, is in both). a's et 2 comes next
    # at pt 31: both its windows fired, dropped; b's et 15: [0, 20) fired, [10, 30) takes it.
    # p0's et 50 (pt 50): W = min(45, 40) = 40 fires [10, 30) and [20, 40).
    job, run = runs[HOP_ON_EVENT.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [
        ("a", -10, 10, 31, 0, "on_time", 1.0, 1.0, 1.0, 1.0),
        ("a", 0, 20, 31, 1, "on_time", 2.0, 1.0, 2.0, 1.5),
        ("a", 10, 30, 50, 0, "on_time", 1.0, 2.0, 2.0, 2.0),
        ("a", 20, 40, 50, 1, "on_time", 1.0, 3.0, 3.0, 3.0),
        ("b", -10, 10, 31, 0, "on_time", 2.0, 4.0, 6.0, 5.0),
        ("b", 0, 20, 31, 1, "on_time", 2.0, 4.0, 6.0, 5.0),
        ("b", 10, 30, 50, 0, "on_time", 2.0, 5.0, 8.0, 6.5),
        ("b", 20, 40, 50, 1, "on_time", 1.0, 5.0, 5.0, 5.0),
    ]
    assert dropped == {("a", -10): 1, ("a", 0): 1, ("b", 0): 1}
    assert odd == []  # Flink's late-records counter counted a's et 2 only


def test_flink_sql_fires_the_hand_computed_cumulate_steps(runs):
    # W = ts - 1 after each record. a's [0, 10) fires at et 12 (W = 11), [0, 20) at b's et 25
    # (W = 24); a's et 11 then comes late for [0, 20) (dropped there) and joins [0, 30), which
    # fires for a and b at et 41 (W = 40). et 75 (W = 74) fires a's [30, 50) and [30, 60), the
    # same value twice: every step fires once the window has a record.
    job, run = runs[CUMULATE_ON_EVENT.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [
        ("a", 0, 10, 12, 0, "on_time", 1.0, 1.0),
        ("a", 0, 20, 25, 0, "on_time", 3.0, 2.0),
        ("a", 0, 30, 41, 0, "on_time", 11.0, 3.0),
        ("a", 30, 50, 75, 0, "on_time", 16.0, 1.0),
        ("a", 30, 60, 75, 1, "on_time", 16.0, 1.0),
        ("b", 0, 30, 41, 0, "on_time", 4.0, 1.0),
    ]
    assert dropped == {("a", 0): 1}
    assert odd == []  # Flink's late-records counter did not count it: [0, 30) took it


def test_flink_sql_updates_the_hand_computed_group_by_until_its_state_expires(runs):
    # TTL 10 ms of processing time (the partition's highest event time so far). a: pt 0, 4,
    # then pt 14 = 4 + 10 finds the state expired (afresh: 8), pt 23 joins and changes
    # nothing (written again). b: pt 2, then pt 11 (1 ms before 2 + 10) joins, and p1's et 3,
    # read at pt 11 too, joins without a change. Rows: SUM, MAX; no window.
    job, run = runs[UNBOUNDED_TTL.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions, key=lambda e: (e[0], e[3], e[4])) == [
        ("a", None, None, 0, 0, "per_record", 1.0, 1.0),
        ("a", None, None, 4, 0, "per_record", 3.0, 2.0),
        ("a", None, None, 14, 0, "per_record", 8.0, 8.0),
        ("a", None, None, 23, 0, "per_record", 8.0, 8.0),
        ("b", None, None, 2, 0, "per_record", 4.0, 4.0),
        ("b", None, None, 11, 0, "per_record", 20.0, 16.0),
        ("b", None, None, 11, 1, "per_record", 20.0, 16.0),
    ]
    assert dropped == {}
    assert odd == []


def test_flink_sql_writes_the_hand_computed_processing_time_over_as_the_group_by(runs):
    # ORDER BY a PROCTIME() column from UNBOUNDED PRECEDING: Flink keeps the accumulator under
    # the state TTL as the GROUP BY does, and writes every update: the GROUP BY's rows.
    group_by = flink_log(runs[UNBOUNDED_TTL.name][1], UNBOUNDED_TTL)
    job, run = runs[PROC_OVER_TTL.name]
    assert "OVER w" in job.script and "GROUP BY" not in job.script
    assert flink_log(run, job) == group_by
    assert run.over_function == "ProcTimeUnboundedPrecedingFunction"


def test_flink_sql_writes_every_update_of_a_processing_time_over_without_a_ttl(runs):
    # No TTL: a's state holds its et 14 (11 = 1 + 2 + 8) and its et 23 adds 0: written again,
    # unchanged (the GROUP BY without a TTL skips such an update).
    job, run = runs[PROC_OVER_FOREVER.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions, key=lambda e: (e[0], e[3], e[4])) == [
        ("a", None, None, 0, 0, "per_record", 1.0, 1.0),
        ("a", None, None, 4, 0, "per_record", 3.0, 2.0),
        ("a", None, None, 14, 0, "per_record", 11.0, 8.0),
        ("a", None, None, 23, 0, "per_record", 11.0, 8.0),
        ("b", None, None, 2, 0, "per_record", 4.0, 4.0),
        ("b", None, None, 11, 0, "per_record", 20.0, 16.0),
        ("b", None, None, 11, 1, "per_record", 20.0, 16.0),
    ]
    assert (dropped, odd) == ({}, [])


def test_flink_sql_writes_the_hand_computed_processing_time_over_range_on_timers(runs):
    # RANGE 3 ms by processing time: a row read at pt is written by the timer for pt + 1,
    # fired at pt + 2, with its key's rows read in [pt - 3, pt]. a's three rows of pt 5 (two
    # of p0, one of p1) are written together at 7, each with all three and pt 2's; pt 8's at
    # 10 with pt 5's (pt 2's retracted); pt 20's alone, its state cleaned up meanwhile.
    # Nothing is dropped.
    job, run = runs[PROC_OVER_RANGE.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [
        ("a", -1, 3, 4, 0, "on_time", 1.0, 1.0, 1.0),
        *(("a", 2, 6, 7, i, "on_time", 135.0, 4.0, 128.0) for i in range(3)),
        ("a", 5, 9, 10, 0, "on_time", 150.0, 4.0, 128.0),
        ("a", 6, 10, 11, 0, "on_time", 48.0, 2.0, 32.0),
        ("a", 17, 21, 22, 0, "on_time", 64.0, 1.0, 64.0),
        ("b", 2, 6, 7, 0, "on_time", 8.0, 1.0, 8.0),
    ]
    assert (dropped, odd) == ({}, [])
    assert {cause for cause, *_ in run.fired} == {"c"}  # every row written by a timer
    assert run.over_function == "ProcTimeRangeBoundedPrecedingFunction"


def test_flink_sql_cleans_the_hand_computed_processing_time_over_rows_up_on_its_ttl(runs):
    # ROWS 1 PRECEDING by processing time, state TTL 10 ms: each row written when read, with
    # the one before it. A key's cleanup timer is set for pt + 15 when pt + 10 is past the one
    # set (deleting that one), and fires 1 ms after its time: a's for 29 (pt 14) clears its
    # state before pt 30; a's pt 45 comes before the one for 45 (pt 30) fires, moving it, and
    # finds pt 35's row; b's for 17 (pt 2) is deleted by pt 11, so b's pt 17 finds pt 11's.
    job, run = runs[PROC_OVER_ROWS_TTL.name]
    emissions, dropped, odd = flink_log(run, job)
    rows = [
        ("a", 0, 1.0, 1.0, 1.0),
        ("a", 4, 5.0, 2.0, 4.0),
        ("a", 14, 20.0, 2.0, 16.0),
        ("a", 30, 64.0, 1.0, 64.0),
        ("a", 35, 192.0, 2.0, 128.0),
        ("a", 45, 384.0, 2.0, 256.0),
        ("b", 2, 2.0, 1.0, 2.0),
        ("b", 11, 10.0, 2.0, 8.0),
        ("b", 17, 40.0, 2.0, 32.0),
    ]
    assert sorted(emissions) == [(k, None, t + 1, t, 0, "on_time", *v) for k, t, *v in rows]
    assert (dropped, odd) == ({}, [])
    assert all(cause.startswith("r") for cause, *_ in run.fired)  # written as read
    assert run.over_function == "ProcTimeRowsBoundedPrecedingFunction"


@pytest.mark.parametrize(
    ("job", "rows"),
    [
        # TUMBLE 10 ms: a's et 8, read at pt 12, goes to [10, 20). [0, 10) fires at 10 (its
        # timer for 9, 1 ms later), between pt 9 and 12; [10, 20) at 20, before a's record of
        # pt 20, which goes to [20, 30), fired at 30 after the last record.
        (
            PROC_TUMBLE,
            [
                ("a", 0, 10, 3.0, 2.0),
                ("a", 10, 20, 56.0, 3.0),
                ("a", 20, 30, 64.0, 1.0),
                ("b", 0, 10, 4.0, 1.0),
            ],
        ),
        # HOP 10 ms by 5: pt 1, 7, 7, 16; a's et 3 (pt 7) joins [0, 10) and [5, 15).
        (
            PROC_HOP,
            [
                ("a", -5, 5, 1.0, 1.0),
                ("a", 0, 10, 7.0, 3.0),
                ("a", 5, 15, 6.0, 2.0),
                ("a", 10, 20, 8.0, 1.0),
                ("a", 15, 25, 8.0, 1.0),
            ],
        ),
        # CUMULATE 15 ms by 5: pt 2, 6, 6, 21. [0, 15) fires with no record since [0, 10);
        # pt 21 fires [15, 25) and [15, 30), not [15, 20), ended before it.
        (
            PROC_CUMULATE,
            [
                ("a", 0, 5, 1.0, 1.0),
                ("a", 0, 10, 7.0, 3.0),
                ("a", 0, 15, 7.0, 3.0),
                ("a", 15, 25, 8.0, 1.0),
                ("a", 15, 30, 8.0, 1.0),
            ],
        ),
        # SESSION gap 5: a's pt 1 and 5 make [1, 10), fired at 10 before a's pt 10, which
        # opens [10, 15); b's pt 3 [3, 8); b's et 9, read at pt 10, [10, 15).
        (
            PROC_SESSION,
            [
                ("a", 1, 10, 5.0, 2.0),
                ("a", 10, 15, 8.0, 1.0),
                ("a", 16, 21, 32.0, 1.0),
                ("b", 3, 8, 2.0, 1.0),
                ("b", 10, 15, 16.0, 1.0),
            ],
        ),
    ],
    ids=lambda j: j.name if isinstance(j, SqlJob) else "",
)
def test_flink_sql_fires_the_hand_computed_processing_time_windows_by_its_timers(runs, job, rows):
    # A window over the PROCTIME() column: a record goes to the window of its processing time
    # (its partition's highest et so far here), a window is written at its end by the timer
    # for end - 1, and nothing is late. Rows: SUM, COUNT(*).
    _, run = runs[job.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [(k, s, e, e, 0, "on_time", *v) for k, s, e, *v in rows]
    assert (dropped, odd) == ({}, [])
    assert {cause for cause, *_ in run.fired} == {"c"}  # every row written by a timer


def test_flink_sql_updates_the_hand_computed_group_by_without_a_ttl_forever(runs):
    # No TTL: a's pt 14 joins the state of pt 0 and 4; each update counts one more record, so
    # none equals the one before and every one is written. Rows: SUM, COUNT(*).
    job, run = runs[UNBOUNDED_FOREVER.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions, key=lambda e: (e[0], e[3], e[4])) == [
        ("a", None, None, 0, 0, "per_record", 1.0, 1.0),
        ("a", None, None, 4, 0, "per_record", 3.0, 2.0),
        ("a", None, None, 14, 0, "per_record", 11.0, 3.0),
        ("a", None, None, 23, 0, "per_record", 11.0, 4.0),
        ("b", None, None, 2, 0, "per_record", 4.0, 1.0),
        ("b", None, None, 11, 0, "per_record", 20.0, 2.0),
        ("b", None, None, 11, 1, "per_record", 20.0, 3.0),
    ]
    assert (dropped, odd) == ({}, [])


def test_flink_sql_skips_an_unchanged_update_without_a_ttl_as_the_plugin_does(spark, runs):
    # SUM and MAX without a TTL: a's et 23 (amount 0) and b's et 3 change nothing, and Flink
    # writes neither; nor do the simulator and the plugin (a trigger skipping unchanged
    # updates).
    job, run = runs[UNCHANGED_SKIPPED.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted((e[0], e[3], *e[6:]) for e in emissions) == [
        ("a", 0, 1.0, 1.0),
        ("a", 4, 3.0, 2.0),
        ("a", 14, 11.0, 8.0),
        ("b", 2, 4.0, 4.0),
        ("b", 11, 20.0, 16.0),
    ]
    assert compare((emissions, dropped), simulated_log(job)) == []
    assert compare((emissions, dropped), plugin_log(spark, job)) == []


def test_flink_sql_skips_unchanged_updates_but_never_a_nan_one(runs):
    # SUM(CASE WHEN user_id <> 'n' THEN amount END), no TTL, pt = et. a's $0 at 2 and 8 and
    # its first $0 at 9 leave its SUM as it was: not written (its $5 at 9 is, the one row of
    # 9). n's SUM is of nulls only: null, then null again: equal, skipped. b's SUM is NaN from
    # et 5 on: its $0 at 7 is written, NaN after NaN (Java's ==, as Flink's equaliser
    # compares doubles).
    job, run = runs[UNBOUNDED_UNCHANGED.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(map(_nan_as_text, emissions), key=lambda e: (e[0], e[3], e[4])) == [
        ("a", None, None, 0, 0, "per_record", 1.0),
        ("a", None, None, 6, 0, "per_record", 3.0),
        ("a", None, None, 9, 0, "per_record", 8.0),
        ("b", None, None, 4, 0, "per_record", 4.0),
        ("b", None, None, 5, 0, "per_record", "NaN"),
        ("b", None, None, 7, 0, "per_record", "NaN"),
        ("n", None, None, 1, 0, "per_record", None),
    ]
    assert (dropped, odd) == ({}, [])


def _nan_as_text(row: tuple) -> tuple:
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def test_flink_sql_writes_the_hand_computed_over_rows(runs):
    # RANGE 10 ms PRECEDING, W = ts - 1 as it rises. A row waits for W to reach its time, then
    # is written with its key's rows in [t - 10, t]: a's et 2 at W = 4 (et 5's record), 5 at
    # W = 7. a's et 6, read at pt 8 when W = 7, is late but after a's last timer (5): kept, it
    # fires at the next rise, W = 13 (et 14's record), with 2, 5 and 6. a's et 3 then is no
    # later than 5: dropped from [-7, 4). a's two rows at 14 fire at W = 24 (et 25's record),
    # each with both, et 2 retracted (14 - 2 > 10); a's et 25 at W = 39 (et 40's record), 5,
    # 6 and 14 retracted. b's et 8 fires at W = 13; its et 40 waits for a watermark that never
    # reaches it.
    job, run = runs[OVER_RANGE.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [
        ("a", -8, 3, 5, 0, "on_time", 1.0, 1.0, 1.0),
        ("a", -5, 6, 8, 0, "on_time", 3.0, 2.0, 2.0),
        ("a", -4, 7, 14, 0, "on_time", 11.0, 3.0, 8.0),
        ("a", 4, 15, 25, 0, "on_time", 106.0, 4.0, 64.0),
        ("a", 4, 15, 25, 1, "on_time", 106.0, 4.0, 64.0),
        ("a", 15, 26, 40, 0, "on_time", 128.0, 1.0, 128.0),
        ("b", -2, 9, 14, 0, "on_time", 4.0, 1.0, 4.0),
    ]
    assert dropped == {("a", -7): 1}
    assert odd == []
    assert [late for _, late in run.records] == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert run.over_function == "RowTimeRangeBoundedPrecedingFunction"


def test_flink_sql_writes_the_hand_computed_over_rows_of_rows(runs):
    # ROWS 1 PRECEDING (precedingOffset 2): each row with the one before it, in time then
    # arrival order; SUM, COUNT(*), MAX. The same timers as RANGE, and the same drop rule: a's
    # et 6 is kept (after a's last timer, 5) and written at W = 13 with 5's row, 2 leaving;
    # a's et 3 is dropped. a's rows at 14 fire at W = 24 one by one: 32 with 6's row (8), 64
    # with 32. a's et 25 at W = 39, with 64: the first row at 14 left, the second stays.
    job, run = runs[OVER_ROWS.name]
    emissions, dropped, odd = flink_log(run, job)
    assert sorted(emissions) == [
        ("a", None, 3, 5, 0, "on_time", 1.0, 1.0, 1.0),
        ("a", None, 6, 8, 0, "on_time", 3.0, 2.0, 2.0),
        ("a", None, 7, 14, 0, "on_time", 10.0, 2.0, 8.0),
        ("a", None, 15, 25, 0, "on_time", 40.0, 2.0, 32.0),
        ("a", None, 15, 25, 1, "on_time", 96.0, 2.0, 64.0),
        ("a", None, 26, 40, 0, "on_time", 192.0, 2.0, 128.0),
        ("b", None, 9, 14, 0, "on_time", 4.0, 1.0, 4.0),
    ]
    assert dropped == {("a", 3): 1}
    assert odd == []
    assert [late for _, late in run.records] == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert run.over_function == "RowTimeRowsBoundedPrecedingFunction"


def test_flink_sql_writes_the_hand_computed_over_rows_from_unbounded_preceding(runs):
    # No frame written: RANGE from UNBOUNDED PRECEDING, Flink 2.3's V2 function. A row at or
    # behind the operator's watermark is dropped: a's et 6 (read at W = 7, where RANGE and ROWS
    # kept it) and et 3. Each timer adds its rows to a running accumulator: a's rows at 14 are
    # written together with 1 + 2 + 32 + 64; et 25 with all five. ROWS from UNBOUNDED
    # PRECEDING: the same, a's rows at 14 written one by one (35, then 99).
    for job, at_14 in [
        (OVER_RANGE_UNBOUNDED, [(99.0, 4.0, 64.0), (99.0, 4.0, 64.0)]),
        (OVER_ROWS_UNBOUNDED, [(35.0, 3.0, 32.0), (99.0, 4.0, 64.0)]),
    ]:
        _, run = runs[job.name]
        emissions, dropped, odd = flink_log(run, job)
        assert sorted(emissions) == [
            ("a", None, 3, 5, 0, "on_time", 1.0, 1.0, 1.0),
            ("a", None, 6, 8, 0, "on_time", 3.0, 2.0, 2.0),
            *(("a", None, 15, 25, i, "on_time", *v) for i, v in enumerate(at_14)),
            ("a", None, 26, 40, 0, "on_time", 227.0, 5.0, 128.0),
            ("b", None, 9, 14, 0, "on_time", 4.0, 1.0, 4.0),
        ]
        assert dropped == {("a", 6): 1, ("a", 3): 1}
        assert odd == []
        assert [late for _, late in run.records] == [0, 0, 0, 1, 1, 0, 0, 0, 0]
        assert run.over_function == "RowTimeUnboundedPrecedingOverFunctionV2"


@pytest.mark.parametrize("job", [*hand_written(), *RANDOM], ids=lambda j: j.name)
def test_identical_to_the_simulator_of_the_mapped_job(runs, job):
    _, run = runs[job.name]
    emissions, dropped, odd = flink_log(run, job)
    assert emissions, "Flink SQL fired nothing: the job tests nothing"
    assert odd == []
    assert compare((emissions, dropped), simulated_log(job)) == []


def test_the_random_jobs_cover_every_construct(runs):
    kinds = Counter(j.window for j in RANDOM)
    assert min(kinds[k] for k in ("TUMBLE", "HOP", "CUMULATE", "SESSION")) >= 2
    # Per-record aggregations: a GROUP BY, and OVERs ordered by processing time.
    assert kinds["GROUP BY"] >= 1
    assert sum(j.proc_over != "" for j in RANDOM) >= 2
    # A window over the PROCTIME() column (the hand-written jobs have each kind).
    assert any(j.proc_window for j in RANDOM)
    frames = ("RANGE", "ROWS", "RANGE UNBOUNDED", "ROWS UNBOUNDED")
    assert min(kinds[f"OVER {f}"] for f in frames) >= 2
    dropped = Counter()
    for job in RANDOM:
        dropped[job.frame] += sum(flink_log(runs[job.name][1], job)[1].values())
    assert all(dropped[f] for f in frames), dropped
    overs = [re.split(r"ORDER BY \w+", j.script, maxsplit=1)[1] for j in RANDOM if j.is_over]
    assert any(o.startswith(")") for o in overs)  # no frame written: RANGE UNBOUNDED
    assert not all(o.startswith((")", " RANGE BETWEEN", " ROWS BETWEEN")) for o in overs)
    named = ["\nWINDOW w AS" in j.script for j in RANDOM if j.is_over]
    assert any(named) and not all(named)
    assert 0 in [j.over for j in RANDOM]
    # The INSERT's WHERE, or the one a lookup join's view takes from it.
    wheres = [j for j in RANDOM if j.where is not None or j.lookup and j.view_where]
    assert len(wheres) >= 6
    assert any(math.isnan(r.value) for j in wheres for r in j.records)
    assert sum(j.argument is not None for j in RANDOM) >= 3
    views = [j for j in RANDOM if j.reads_view]
    assert len(views) >= 8
    assert any(j.view_keys for j in views)
    assert any(j.view_value is not None for j in views)
    assert sum(j.view_where is not None for j in views) >= 3
    assert any("DESCRIPTOR(event_ts)" in j.script for j in views)
    assert any("SELECT *" in j.script for j in views)
    assert any("UNION ALL" in j.script for j in views)
    lookups = [j for j in RANDOM if j.lookup is not None]
    assert {j.lookup.inner for j in lookups} == {True, False}


@pytest.mark.parametrize("job", hand_written(), ids=lambda j: j.name)
def test_identical_to_the_plugin(spark, runs, job):
    _, run = runs[job.name]
    emissions, dropped, _ = flink_log(run, job)
    assert compare((emissions, dropped), plugin_log(spark, job)) == []


def test_flink_sql_averages_a_bigint_as_longs_and_the_mapping_refuses_it(spark, runs):
    _, run = runs[AVG_OF_BIGINT.name]
    emissions, _, _ = flink_log(run, AVG_OF_BIGINT)
    assert [e[6:] for e in emissions] == [(5.0,)]  # (3 + 8) / 2 as longs; the plugin's is 5.5
    with pytest.raises(UnsupportedSqlError, match="AVG of the BIGINT column amount"):
        job_from_sql(spark, AVG_OF_BIGINT.script, {TABLE: archive(spark, AVG_OF_BIGINT)})


def test_a_disagreement_is_reported():
    row = ("a", 0, 10, 30, 0, "on_time", 2.0)
    later = ("a", 0, 10, 31, 0, "on_time", 2.0)
    assert compare(([row], {("a", 0): 1}), ([later], {})) == [
        f"Flink only:  {row}",
        f"plugin only: {later}",
        "dropped ('a', 0): Flink 1, plugin None",
    ]
