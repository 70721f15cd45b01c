"""The probability that the live job had a training value visible, hand-computed.

Residuals uniform on [0, 2 s]: ``F(x) = x / 2000`` between 0 and 2000 ms.
"""

from datetime import datetime, timedelta

import pytest

from feast_stream_backfill.calibration.fit import LEVELS
from feast_stream_backfill.calibration.visibility import (
    cdf_of_values,
    visible_probability,
    visible_probability_column,
)
from feast_stream_backfill.training_join import as_of_join

UNIFORM = [level * 2000 for level in LEVELS]  # the quantiles of U[0, 2000 ms]
T0 = datetime(2026, 1, 1, 10, 0)


def at(ms: int) -> datetime:
    return T0 + timedelta(milliseconds=ms)


def test_the_rule_on_numbers():
    cdf = cdf_of_values(UNIFORM)
    assert cdf(-1) == 0 and cdf(2000) == 1 and cdf(500) == pytest.approx(0.25)
    # emitted at 1000, superseded at 1200, asked at 1500: F(500) - F(300)
    assert visible_probability(1500, 1000, 1200, cdf) == pytest.approx(0.25 - 0.15)
    # the last emission: F(t - e)
    assert visible_probability(1500, 1000, None, cdf) == pytest.approx(0.25)
    # before the key's first emission at 1000, nothing visible: 1 - F(t - e')
    assert visible_probability(1400, None, 1000, cdf) == pytest.approx(1 - 0.2)


def test_ties_in_the_quantiles_jump():
    # a residual of exactly 0 for 40 % of writes, then uniform to 1 s
    quantiles = [0.0 if level <= 0.4 else (level - 0.4) / 0.6 * 1000 for level in LEVELS]
    cdf = cdf_of_values(quantiles)
    assert cdf(-0.5) == 0 and cdf(0) == pytest.approx(0.4, abs=0.006)
    assert cdf(500) == pytest.approx(0.7)


def test_on_columns_the_rule_is_the_rule_on_numbers(spark):
    quantiles = [0.0 if level <= 0.4 else (level - 0.4) / 0.6 * 1000 for level in LEVELS]
    cases = [(0, None, None), (1000, 1000, None), (1250, 1000, 1100), (900, None, 1000)]
    cases += [(5000, 1000, 4700), (1499, 1000, None)]
    df = spark.createDataFrame(cases, "t long, e long, n long")
    column = visible_probability_column(df.t, df.e, df.n, quantiles).alias("p")
    got = [r.p for r in df.select(column).collect()]
    cdf = cdf_of_values(quantiles)
    assert got == pytest.approx([visible_probability(t, e, n, cdf) for t, e, n in cases])
    assert got[:3] == pytest.approx([1.0, 0.4, 0.55 - 0.49])  # F(250) - F(150)


def test_training_rows_get_their_probability(spark):
    # key a: emitted 1 at 10:00:00.000 and 2 at 10:00:01.000; key b never emits
    emissions = spark.createDataFrame(
        [("a", at(0), 0, 1.0), ("a", at(1000), 0, 2.0)],
        "user string, emit_time timestamp, emit_sequence int, value double",
    )
    asked = [("a", -1000), ("a", 500), ("a", 900), ("a", 1500), ("a", 3000), ("b", 0)]
    predictions = spark.createDataFrame(
        [(i, u, at(ms)) for i, (u, ms) in enumerate(asked)], "row int, user string, ts timestamp"
    )
    rows = (
        as_of_join(predictions, emissions, ["user"], "ts", ["value"], residual_quantiles=UNIFORM)
        .orderBy("row")
        .collect()
    )
    assert [r.value for r in rows] == [None, 1.0, 1.0, 2.0, 2.0, None]
    expected = [
        1.0,  # before the first emission: 1 - F(-1000 - 0)
        0.25,  # F(500) - F(-500)
        0.45,  # F(900) - F(-100)
        0.25,  # F(500), the last emission
        1.0,  # F(2000)
        1.0,  # no emission: nothing was ever visible
    ]
    assert [r.visible_probability for r in rows] == pytest.approx(expected)
    plain = as_of_join(predictions, emissions, ["user"], "ts", ["value"])
    assert plain.columns == [c for c in rows[0].asDict() if c != "visible_probability"]


def test_a_value_removed_by_the_ttl_has_no_probability(spark):
    emissions = spark.createDataFrame(
        [("a", at(0), 0, 1.0)], "user string, emit_time timestamp, emit_sequence int, value double"
    )
    predictions = spark.createDataFrame([("a", at(10_000))], "user string, ts timestamp")
    row = as_of_join(
        predictions,
        emissions,
        ["user"],
        "ts",
        ["value"],
        ttl_seconds=5,
        residual_quantiles=UNIFORM,
    ).first()
    assert row.value is None and row.visible_probability is None
