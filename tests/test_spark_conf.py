"""``spark_conf`` on an already active Spark session: runtime settings are applied, the others
are named in a warning (requested vs actual) instead of being silently ignored. The driver's
heap: half the machine unless the machine's ``spark-defaults.conf`` says otherwise."""

from __future__ import annotations

import warnings

import pytest

from feast_stream_backfill.spark import default_driver_memory, get_spark, spark_defaults


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


def test_the_driver_memory_of_spark_defaults_conf_wins_over_half_the_machine(
    tmp_path, monkeypatch, spark
):
    # The suite's own (tests/spark_conf/): three drivers at once must fit in the machine.
    assert spark.conf.get("spark.driver.memory") == spark_defaults()["spark.driver.memory"]
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\n! comment\n\nspark.driver.memory = 3g\nspark.master: local[2]\n"
        "spark.ui.enabled   false\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert spark_defaults() == {
        "spark.driver.memory": "3g",
        "spark.master": "local[2]",
        "spark.ui.enabled": "false",
    }
    assert default_driver_memory() == "3g"
    (tmp_path / "spark-defaults.conf").write_text("spark.master local[2]\n")
    assert default_driver_memory().endswith("g") and int(default_driver_memory()[:-1]) >= 4
