"""The model's rules (feast_stream_backfill/rules.py), hand-computed, on the three kinds of
value the strategies give them: Python integers, numpy int64 arrays and Spark Columns.

Each case is a rule applied to one or two times (the rest of its arguments fixed), two
examples, and the values expected. One DataFrame holds every case's examples: one Spark job.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from pyspark.sql import functions as F

from feast_stream_backfill import rules
from feast_stream_backfill.processing_order import LONG_MIN
from feast_stream_backfill.triggers import LATE, PER_RECORD, EventTimeTrigger, PerRecordTrigger


@dataclass(frozen=True)
class Case:
    name: str
    rule: Callable[..., Any]
    examples: tuple[tuple[int, ...], tuple[int, ...]]
    expected: tuple[Any, Any]


CASES = [
    # D2 = 250: read 250 ms after the highest event time so far
    Case("read_at", lambda t: rules.read_at(t, 250), ((1_000,), (-5,)), (1_250, 245)),
    # read after 1250 with D2 = 250: from the first record with et >= 1001 on
    Case(
        "highest_read_after",
        lambda t: rules.highest_read_after(t, 250),
        ((1_250,), (0,)),
        (1_001, -249),
    ),
    # B = 2000: the highest event time less B less 1 ms
    Case(
        "partition_watermark",
        lambda t: rules.partition_watermark(t, 2_000),
        ((10_000,), (0,)),
        (7_999, -2_001),
    ),
    Case(
        "reach_threshold",
        lambda t: rules.reach_threshold(t, 2_000),
        ((7_999,), (-2_001,)),
        (10_000, 0),
    ),
    Case(
        "target_of_threshold",
        lambda t: rules.target_of_threshold(t, 2_000),
        ((10_000,), (0,)),
        (7_999, -2_001),
    ),
    Case("reached", rules.reached, ((9, 9), (8, 9)), (True, False)),
    # I = 200, T = 1000: idle on the first tick more than 1000 after 400, 1200 later
    Case(
        "goes_idle_at", lambda t: rules.goes_idle_at(t, 200, 1_000), ((400,), (0,)), (1_600, 1_200)
    ),
    Case("max_timestamp", rules.max_timestamp, ((10,), (0,)), (9, -1)),
    Case("session_end", lambda t: rules.session_end(t, 300), ((1_000,), (-300,)), (1_300, 0)),
    # [0, 10) touches [10, 20) (Flink merges windows that touch), not [11, 20)
    Case(
        "intersects",
        lambda s, e: rules.intersects(s, e, 0, 10),
        ((10, 20), (11, 20)),
        (True, False),
    ),
    Case(
        "session_max_timestamp",
        lambda t: rules.session_max_timestamp(t, 300),
        ((1_000,), (0,)),
        (1_299, 299),
    ),
    Case("cleanup_time", lambda t: rules.cleanup_time(t, 500), ((1_299,), (-1,)), (1_799, 499)),
    Case(
        "session_cleanup_time",
        lambda t: rules.session_cleanup_time(t, 300, 500),
        ((1_000,), (0,)),
        (1_799, 799),
    ),
    # maxTs 9, L 5: gone once the watermark reaches 14
    Case("state_gone", lambda w, m: rules.state_gone(w, m, 5), ((14, 9), (13, 9)), (True, False)),
    Case("past_max_timestamp", rules.past_max_timestamp, ((9, 9), (8, 9)), (True, False)),
    Case("clock_fires_at", rules.clock_fires_at, ((9,), (-1,)), (10, 0)),
    Case("clock_watermark", rules.clock_watermark, ((10,), (0,)), (9, -1)),
    Case("choose", lambda c: rules.choose(c > 0, 1, 2), ((1,), (0,)), (1, 2)),
    # RANGE 600 PRECEDING: the row at 1000 aggregates from 400 on
    Case("over_start", lambda t: rules.over_start(t, 600), ((1_000,), (0,)), (400, -600)),
    # last emitted at 1000: a row at 1000 is dropped, one at 1001 waits
    Case("over_dropped", rules.over_dropped, ((1_000, 1_000), (1_001, 1_000)), (True, False)),
    # preceding 600: a row at 500 moves a cleanup at 1100 (< 500 + 601), not one at 1101
    Case(
        "over_cleanup_renewed",
        lambda c, t: rules.over_cleanup_renewed(c, t, 600),
        ((1_100, 500), (1_101, 500)),
        (True, False),
    ),
    # (long) (601 * 1.5) = 901: cleanup 902 after the row
    Case(
        "over_cleanup_time",
        lambda t: rules.over_cleanup_time(t, 601),
        ((1_000,), (0,)),
        (1_902, 902),
    ),
    Case("over_clears", rules.over_clears, ((902, 902), (901, 902)), (True, False)),
    # UNBOUNDED PRECEDING: at watermark 1000, a row at 1000 is dropped, one at 1001 waits
    Case("over_late", rules.over_late, ((1_000, 1_000), (1_001, 1_000)), (True, False)),
    # ROWS 2 PRECEDING: holding 3 rows, the oldest goes before the next is added; 2: not yet
    Case(
        "over_rows_full",
        lambda held: rules.over_rows_full(held, 2),
        ((3,), (2,)),
        (True, False),
    ),
    # PROCTIME RANGE: the rows read at 1000 wait for a timer set for 1001 (fired at 1002)
    Case("over_clock_timer", rules.over_clock_timer, ((1_000,), (-1,)), (1_001, 0)),
    # a processing-time ROWS frame left with no row loses track of its oldest
    Case("over_rows_lost", rules.over_rows_lost, ((0,), (1,)), (True, False)),
    # TTL 600: a row at 500 moves a cleanup set for 1100 (500 + 600 > 1100 is false: kept),
    # one at 501 moves it
    Case(
        "retention_renewed",
        lambda c, t: rules.retention_renewed(c, t, 600),
        ((1_100, 501), (1_100, 500)),
        (True, False),
    ),
    # TTL 601: 601 * 3 / 2 = 901 in long arithmetic
    Case(
        "retention_cleanup_time",
        lambda t: rules.retention_cleanup_time(t, 601),
        ((1_000,), (0,)),
        (1_901, 901),
    ),
    # a key's result field: equal values are, different ones are not (NaN, nulls and -0.0 in
    # test_unchanged_value_follows_java_doubles_and_nulls)
    Case("unchanged_value", rules.unchanged_value, ((5, 5), (5, 6)), (True, False)),
    # an update (one result) unchanged from the one before, a changed one; its key's first
    # (here: a previous result below 0) is written whatever it holds
    Case(
        "unchanged_update",
        lambda p, c: rules.unchanged_update([p], [c], p < 0),
        ((5, 5), (5, 6)),
        (True, False),
    ),
    Case(
        "unchanged_update, first",
        lambda p, c: rules.unchanged_update([p, c], [p, c], p < 0),
        ((-1, 7), (2, 7)),
        (False, True),
    ),
    # EventTimeTrigger: dropped where the state is gone, else LATE past maxTs, else waiting
    Case(
        "on_element",
        lambda closed, late: rules.on_element(EventTimeTrigger(), closed > 0, late > 0),
        ((1, 1), (0, 1)),
        (rules.DROPPED, LATE),
    ),
    Case(
        "on_element, waiting",
        lambda closed, late: rules.on_element(EventTimeTrigger(), closed > 0, late > 0),
        ((0, 0), (1, 0)),
        (rules.WAITING, rules.DROPPED),
    ),
    Case(
        "on_element, per record",
        lambda closed, late: rules.on_element(PerRecordTrigger(), closed > 0, late > 0),
        ((0, 0), (0, 1)),
        (PER_RECORD, PER_RECORD),
    ),
]


def test_every_rule_has_a_case():
    tested = {case.name.split(",")[0] for case in CASES}
    assert tested == set(rules.STATED) - {"idle_wait_ms"}  # on configuration ints only


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_on_ints(case: Case):
    assert tuple(case.rule(*example) for example in case.examples) == case.expected


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_on_numpy_arrays(case: Case):
    columns = [np.array(values, dtype=np.int64) for values in zip(*case.examples, strict=True)]
    assert case.rule(*columns).tolist() == list(case.expected)


def test_on_spark_columns(spark):
    names = {
        (i, j): f"c{i}_{j}" for i, case in enumerate(CASES) for j in range(len(case.examples[0]))
    }
    rows = [tuple(CASES[i].examples[row][j] for (i, j) in names) for row in range(2)]
    df = spark.createDataFrame(rows, ", ".join(f"{name} long" for name in names.values()))
    applied = [
        case.rule(*[F.col(names[i, j]) for j in range(len(case.examples[0]))]).alias(f"r{i}")
        for i, case in enumerate(CASES)
    ]
    got = df.select(*applied).collect()
    assert {case.name: (got[0][i], got[1][i]) for i, case in enumerate(CASES)} == {
        case.name: case.expected for case in CASES
    }


#: (previous, current, unchanged) as Flink's equaliser has it: Java's == on doubles, nulls
#: equal to nulls only.
JAVA_EQUALS = [
    (1.5, 1.5, True),
    (1.5, 2.5, False),
    (math.nan, math.nan, False),  # Spark's = would say True
    (1.0, math.nan, False),
    (math.nan, 1.0, False),
    (-0.0, 0.0, True),
    (None, None, True),  # a SUM of nulls only, twice
    (None, 1.0, False),
    (1.0, None, False),
]


def test_unchanged_value_follows_java_doubles_and_nulls(spark):
    """NaN is never unchanged, two nulls are, a null and a value are not; on Python floats,
    numpy float64 arrays (no nulls) and Spark double Columns alike."""
    assert [rules.unchanged_value(p, c) for p, c, _ in JAVA_EQUALS] == [u for *_, u in JAVA_EQUALS]
    numbers = [(p, c, u) for p, c, u in JAVA_EQUALS if p is not None and c is not None]
    previous = np.array([p for p, _, _ in numbers], dtype=np.float64)
    current = np.array([c for _, c, _ in numbers], dtype=np.float64)
    assert rules.unchanged_value(previous, current).tolist() == [u for *_, u in numbers]
    df = spark.createDataFrame([(p, c) for p, c, _ in JAVA_EQUALS], "p double, c double")
    got = df.select(rules.unchanged_value(F.col("p"), F.col("c")).alias("u")).collect()
    assert [r.u for r in got] == [u for *_, u in JAVA_EQUALS]
    # an update of two results: one NaN makes it changed, however equal the other
    assert not rules.unchanged_update([1.0, math.nan], [1.0, math.nan], False)
    assert rules.unchanged_update([None, 2.0], [None, 2.0], False)
    assert not rules.unchanged_update([None, 2.0], [None, 2.0], True)  # the first is written


def test_idle_wait_counts_whole_intervals_past_the_timeout():
    # I = 200: idle on the first tick MORE than T after the clock starts
    assert rules.idle_wait_ms(200, 1_000) == 1_200
    assert rules.idle_wait_ms(200, 999) == 1_000
    assert rules.idle_wait_ms(200, 1_100) == 1_200


def test_a_session_offset_is_added_once_to_long_min():
    # a row without a record holds LONG_MIN: one addition of the offset, no wrap-around
    highest = np.array([LONG_MIN, 1_000], dtype=np.int64)
    assert rules.session_max_timestamp(highest, 300).tolist() == [LONG_MIN + 299, 1_299]
    assert rules.session_cleanup_time(highest, 300, 500).tolist() == [LONG_MIN + 799, 1_799]


def test_a_substituted_rule_is_followed_by_the_rules_built_on_it(monkeypatch):
    assert rules.substituted() == {}
    later = lambda max_ts, lateness_ms: max_ts + lateness_ms + 100  # noqa: E731
    monkeypatch.setattr(rules, "cleanup_time", later)
    assert rules.substituted() == {"cleanup_time": later}
    assert not rules.state_gone(14, 9, 5)  # gone at 114 now
    assert rules.session_cleanup_time(0, 300, 500) == 899


def test_following_applies_substitutes_for_the_block_only():
    later = lambda max_ts, lateness_ms: max_ts + lateness_ms + 100  # noqa: E731
    with rules.following({"cleanup_time": later}):
        assert rules.cleanup_time(9, 5) == 114
        assert not rules.state_gone(14, 9, 5)
    assert rules.cleanup_time(9, 5) == 14
    assert rules.substituted() == {}
