"""The bench's real-Flink anchor: the same job replayed through Apache Flink on the same cores.

Replaying the archive through the Flink job itself is what a team does without this plugin;
``bench/flink/BenchReplay.java`` is that replay, tuned for throughput (see its docstring).
This module writes the bench's Delta archive as the replay reads it (one file per Kafka
partition, offset order, duplicates removed: work a replay needs done beforehand, timed apart
by :func:`export`), compiles the replay against the conformance harness's Flink jars, and
runs it in a JVM of its own, warm: every run's time is measured inside the JVM around
``execute()`` (which includes starting Flink's local mini-cluster, as a replay's run does)
after one untimed run on the warm-up archive.

The files are written by the Spark tasks where they run: the anchor is for local mode.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from tests.conformance import harness

HERE = Path(__file__).resolve().parent / "flink"
CLASSES = HERE / "classes"
SOURCE = HERE / "BenchReplay.java"


def build() -> str:
    """Flink's jars (the conformance harness's) and the compiled replay; the classpath."""
    flink = harness.build()
    stamp = CLASSES / ".complete"
    if not stamp.exists() or SOURCE.stat().st_mtime > stamp.stat().st_mtime:
        shutil.rmtree(CLASSES, ignore_errors=True)
        subprocess.run(
            ["javac", "-nowarn", "-d", str(CLASSES), "-cp", flink, str(SOURCE)],
            check=True,
            capture_output=True,
        )
        stamp.touch()
    return f"{CLASSES}:{flink}"


def _record_type(key_width: int) -> np.dtype:
    """What ``BenchReplay.OpenSplit`` reads: big-endian event time, amount, key bytes."""
    return np.dtype([("event_time", ">i8"), ("amount", ">f8"), ("key", f"S{key_width}")])


def _fixed_width(keys: pa.Array, width: int) -> np.ndarray:
    """Strings all ``width`` bytes long as a numpy ``S<width>`` view of Arrow's data buffer
    (their offsets step by ``width``), without a Python object per string."""
    if keys.type != pa.string() or keys.null_count:
        raise ValueError(f"keys must be non-null Arrow strings, not {keys.type}")
    offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset :]
    start = int(offsets[0])
    return np.frombuffer(keys.buffers()[2], dtype=f"S{width}", count=len(keys), offset=start)


def _writer(out_dir: str, key_width: int):
    """A ``mapInArrow`` function writing each partition's rows (sorted by partition, then
    offset) to ``partition-<p>.bin``; a partition's rows all come to one task, so the file
    is created at its first row, which makes a retried task rewrite it whole."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files: dict[int, object] = {}
        rows: dict[int, int] = {}
        try:
            for batch in batches:
                partitions = batch.column("partition").to_numpy()
                out = np.empty(batch.num_rows, dtype=_record_type(key_width))
                out["event_time"] = batch.column("event_time_ms").to_numpy()
                out["amount"] = batch.column("amount").to_numpy(zero_copy_only=False)
                out["key"] = _fixed_width(batch.column("user_id"), key_width)
                starts = np.flatnonzero(np.diff(partitions, prepend=-1))
                for start, end in zip(starts, [*starts[1:], batch.num_rows], strict=True):
                    p = int(partitions[start])
                    if p not in files:
                        files[p] = open(Path(out_dir) / f"partition-{p:05d}.bin", "wb")  # noqa: SIM115
                    out[start:end].tofile(files[p])
                    rows[p] = rows.get(p, 0) + int(end - start)
        finally:
            for f in files.values():
                f.close()
        yield pa.RecordBatch.from_pydict(
            {"partition": list(rows), "rows": list(rows.values())},
            schema=pa.schema([("partition", pa.int32()), ("rows", pa.int64())]),
        )

    return write


@dataclass(frozen=True)
class Exported:
    """An archive as the replay reads it."""

    path: str
    key_width: int
    records: int


def export(spark: SparkSession, archive: str, out_dir: str) -> Exported:
    """The Delta archive at ``archive`` as one file per partition in ``out_dir``."""
    shutil.rmtree(out_dir, ignore_errors=True)
    Path(out_dir).mkdir(parents=True)
    records = (
        spark.read.format("delta")
        .load(archive)
        .dropDuplicates(["partition", "offset"])
        .select(
            "partition",
            "offset",
            F.expr("unix_millis(event_time)").alias("event_time_ms"),
            "user_id",
            "amount",
        )
    )
    shortest, longest, n_partitions = records.agg(
        F.min(F.length("user_id")), F.max(F.length("user_id")), F.count_distinct("partition")
    ).first()
    if shortest != longest:
        raise ValueError(f"{archive}: user_id lengths {shortest}..{longest}; need one width")
    written = (
        records.repartition(n_partitions, "partition")
        .sortWithinPartitions("partition", "offset")
        .mapInArrow(_writer(out_dir, longest), "partition int, rows long")
        .agg(F.sum("rows"))
        .first()[0]
    )
    return Exported(out_dir, longest, written)


@dataclass(frozen=True)
class Replay:
    """The best of the runs: seconds, and the firings that run counted."""

    seconds: float
    firings: int


def replay(
    classpath: str,
    exported: Exported,
    kind: str,
    warm_up: Exported,
    parallelism: int = 2,
    repeat: int = 1,
) -> Replay:
    """Runs ``BenchReplay`` for the bench ``kind`` (the names in ``backfill_bench.KINDS``)."""
    if warm_up.key_width != exported.key_width:
        raise ValueError("the warm-up archive's keys must have the archive's width")
    done = subprocess.run(
        ["java", "-cp", classpath, "BenchReplay", exported.path, str(exported.key_width), kind]
        + [str(parallelism), str(repeat), warm_up.path],
        capture_output=True,
        text=True,
    )
    runs = [line.split() for line in done.stdout.splitlines() if line.startswith("run ")]
    if done.returncode or not runs:
        raise RuntimeError(f"the Flink replay of {kind!r} failed:\n{done.stderr[-4000:]}")
    ms, firings = min((int(r[1]), int(r[2])) for r in runs)
    return Replay(ms / 1000, firings)
