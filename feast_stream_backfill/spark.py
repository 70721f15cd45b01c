"""The Spark session: local and embedded by default, any cluster through configuration."""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from feast_stream_backfill import jars

#: Spark's JVM logging: errors only (no start-up banner, no warnings a user cannot act on).
LOG4J_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"

DEFAULT_CONF: dict[str, str] = {
    "spark.master": "local[*]",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.databricks.delta.snapshotPartitions": "2",
    # The backfill caches its records once and scans them a few times: compressing the cache
    # cost more than it saved (4M records: 8.4 s to cache compressed, 5.4 s not, 3.9 s to
    # compute them; bench/backfill_bench.py).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Spark 4.2 fuses a union and its consumer into one generated loop only when asked. The
    # windows' aggregate reads the records through a union (those at copied offsets come back
    # once each): without it every record reached the aggregate as a row through an iterator
    # (16M records: windows and triggers 10.4-11.4 s with it, 11.5-13.3 s without).
    "spark.sql.codegen.wholeStage.union.enabled": "true",
}


def default_driver_memory() -> str:
    """``spark.driver.memory`` where the machine's ``spark-defaults.conf`` sets it, else half
    the machine's memory, 4 to 32 GiB. In local mode the driver's heap holds the cached
    records and every task's sorts: with 4g, a 16M-record backfill spilled and took 63 s, with
    10g 55 s (bench/backfill_bench.py, 2 cores). The JVM takes the heap as it needs it, so
    several drivers on one machine each allowed half of it can exhaust it: there, say how much
    each may take in ``spark-defaults.conf`` (the test suite does)."""
    configured = spark_defaults().get("spark.driver.memory")
    if configured:
        return configured
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not a POSIX system: Spark's usual size
        return "4g"
    return f"{min(max(physical // 2**31, 4), 32)}g"


def spark_defaults() -> dict[str, str]:
    """The settings of the ``spark-defaults.conf`` Spark reads (in ``SPARK_CONF_DIR``, else
    ``SPARK_HOME/conf``; Java properties: ``key value``, ``key=value`` or ``key: value``)."""
    home = os.environ.get("SPARK_HOME") or Path(pyspark.__file__).resolve().parent
    path = Path(os.environ.get("SPARK_CONF_DIR") or Path(home) / "conf") / "spark-defaults.conf"
    if not path.is_file():
        return {}
    lines = (line.strip() for line in path.read_text().splitlines())
    pairs = (re.split(r"\s*[=:\s]\s*", line, maxsplit=1) for line in lines)
    return {
        pair[0]: pair[1] if len(pair) > 1 else ""
        for pair in pairs
        if pair[0] and not pair[0].startswith(("#", "!"))
    }


def delta_jars() -> list[str]:
    """Delta's jars, downloaded into the plugin's jar directory the first time
    (:mod:`feast_stream_backfill.jars`)."""
    return [str(path) for path in jars.delta_jars()]


def with_delta_jars(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with Delta's jars added to ``spark.jars`` (after the user's own), unless
    ``spark.jars`` or ``spark.jars.packages`` already bring a delta-spark. Spark ships the
    driver's ``spark.jars`` to a cluster's executors, so nothing needs installing there."""
    own = [jar.strip() for jar in settings.get("spark.jars", "").split(",") if jar.strip()]
    packages = settings.get("spark.jars.packages", "")
    if "io.delta:delta-spark" in packages or any(
        Path(jar).name.startswith("delta-spark") for jar in own
    ):
        return dict(settings)
    return {**settings, "spark.jars": ",".join([*own, *delta_jars()])}


def get_spark(conf: Mapping[str, str] | None = None) -> SparkSession:
    """The active session, or a new one from ``DEFAULT_CONF`` overridden by ``conf``.

    ``conf`` is Feast's ``spark_conf``: set ``spark.master`` to run on a cluster. On an active
    session it is applied as Spark's own ``getOrCreate`` would (:func:`_apply_to_active`).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        _apply_to_active(active, conf or {})
        return active
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers must be this interpreter, which has this package and Feast installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = with_delta_jars(
        {**DEFAULT_CONF, "spark.driver.memory": default_driver_memory(), **(conf or {})}
    )
    quiet = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
    java_options = settings.get("spark.driver.extraJavaOptions")
    settings["spark.driver.extraJavaOptions"] = f"{quiet} {java_options or ''}".strip()
    builder = SparkSession.builder.appName("feast-stream-backfill")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _apply_to_active(spark: SparkSession, conf: Mapping[str, str]) -> None:
    """Set the runtime-modifiable settings of ``conf`` on a running session (as Spark's
    ``getOrCreate`` does); warn, naming requested and actual values, about the others that
    differ (``spark.master``, ``spark.driver.memory``, ...): they are fixed when a session
    starts, and ignoring them silently would leave the user believing they took effect."""
    ignored = {}
    for key, requested in conf.items():
        actual = spark.conf.get(key, None)
        if actual == str(requested):
            continue
        if spark.conf.isModifiable(key):
            spark.conf.set(key, str(requested))
        else:
            ignored[key] = (requested, actual)
    if ignored:
        listed = "; ".join(f"{k}: requested {r!r}, actual {a!r}" for k, (r, a) in ignored.items())
        warnings.warn(
            "a Spark session is already active and these spark_conf settings cannot be changed "
            f"on it, so they are ignored: {listed}",
            stacklevel=3,
        )
