from __future__ import annotations

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.spark import get_spark


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return get_spark({"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"})


def archive(spark: SparkSession, rows: list[tuple], key: str = "user") -> DataFrame:
    """An archived topic from ``(partition, offset, event_time_ms, key, amount)`` tuples."""
    df = spark.createDataFrame(
        rows, f"partition int, offset long, et long, {key} string, amount double"
    )
    return df.withColumn("event_time", F.timestamp_millis("et")).drop("et")


@pytest.fixture
def make_archive(spark):
    return lambda rows, key="user": archive(spark, rows, key)
