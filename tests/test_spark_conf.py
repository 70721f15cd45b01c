"""``spark_conf`` on an already active Spark session: runtime settings are applied, the others
are named in a warning (requested vs actual) instead of being silently ignored."""

from __future__ import annotations

import warnings

import pytest

from feast_stream_backfill.spark import get_spark


def test_settings_an_active_session_cannot_take_are_named_with_requested_and_actual(spark):
    master, memory = spark.conf.get("spark.master"), spark.conf.get("spark.driver.memory")
    requested = {
        "spark.master": "local[7]",
        "spark.driver.memory": memory,  # the same as the session's: nothing to say
        "spark.executor.memory": "3g",  # not set on the session
    }
    with pytest.warns(UserWarning) as caught:
        assert get_spark(requested) is spark
    (warning,) = caught
    assert str(warning.message) == (
        "a Spark session is already active and these spark_conf settings cannot be changed on "
        f"it, so they are ignored: spark.master: requested 'local[7]', actual {master!r}; "
        "spark.executor.memory: requested '3g', actual None"
    )
    assert spark.conf.get("spark.master") == master


def test_runtime_settings_are_applied_to_the_active_session_without_a_warning(spark):
    before = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            get_spark(
                {
                    "spark.sql.shuffle.partitions": "3",
                    "spark.master": spark.conf.get("spark.master"),
                }
            )
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
