"""The explain commands and the driver's heap: the advisor's grid judged in passes gives the
same table as in one; a heap under the floor stops ``advise`` at once, naming the setting; the
watchdog's rule tells a thrashing JVM from a busy one."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from feast_stream_backfill.cli import Context
from feast_stream_backfill.explain.advisor import advise, grid
from feast_stream_backfill.explain.memory import GcSample, heap_mib, thrashing
from tests.test_explain_cli import monkeypatch_module, repo  # noqa: F401 (fixtures)


def samples(gc_ms_per_s: int, full_every_s: int | None, seconds: int = 40) -> list[GcSample]:
    """One sample every 5 s: ``gc_ms_per_s`` of collection per second, a full collection
    every ``full_every_s`` seconds (None: never)."""
    return [
        GcSample(
            at=float(t),
            gc_ms=gc_ms_per_s * t,
            full_gcs=0 if full_every_s is None else t // full_every_s,
            used=0,
            max=1,
        )
        for t in range(0, seconds + 1, 5)
    ]


def test_thrashing_is_most_of_the_time_in_repeated_full_collections():
    assert thrashing(samples(800, 3))  # 80 % of the time, a full collection every 3 s
    assert not thrashing(samples(800, None))  # busy young collections only
    assert not thrashing(samples(100, 3))  # full collections, but 10 % of the time
    assert not thrashing(samples(800, 3, seconds=10))  # too short to tell


def test_the_grid_in_passes_is_the_grid_in_one(repo):  # noqa: F811
    _, _, prepared, _ = Context(str(repo)).load("user_spend_5m")
    cells = grid([0, 5_000, 180_000], [0, 60_000])
    try:
        whole = advise(prepared, cells)
        passes = advise(prepared, cells, cells_per_pass=2)
    finally:
        prepared.release()
    pd.testing.assert_frame_equal(passes, whole)
    assert len(whole) == 6 and whole["emissions"].gt(0).all()


def test_advise_with_too_small_a_heap_stops_at_once_naming_the_setting(repo, tmp_path, spark):  # noqa: F811
    conf = tmp_path / "spark_conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        Path(os.environ["SPARK_CONF_DIR"], "spark-defaults.conf")
        .read_text()
        .replace("spark.driver.memory               4g", "spark.driver.memory 600m")
    )
    env = {**os.environ, "SPARK_CONF_DIR": str(conf)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)  # the plugin puts the heap there from the defaults
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "feast_stream_backfill.cli", "--chdir", str(repo)]
        + ["advise", "user_spend_5m", "--B", "0,5s", "--L", "0,1m"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-2000:]
    assert "the driver's heap is" in done.stderr and "spark.driver.memory" in done.stderr
    assert "spark_conf" in done.stderr and done.stdout == ""
    assert elapsed < 120, elapsed  # JVM and Feast start-up included; no advising
    assert heap_mib(spark) > 3_000  # the suite's own driver: 4g, the documented default
