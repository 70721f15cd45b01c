"""The driver's heap for ``advise``, ``report`` and ``timeline``: sized work, a floor checked
at start and a watchdog that stops a run the heap cannot hold instead of letting it thrash.

What the driver holds for these commands is mostly Spark's query plans, not data: the advisor
classifies the records once per cell of its grid and reads the cells' union several times, so
the plans (each with the prepared stages' lineage) grow with the number of cells, whatever the
number of records (a heap histogram during a 25-cell ``advise`` over 98,000 records: Catalyst's
tree nodes, attribute references and lazy values first, cached records far behind). The
advisor therefore judges the grid in passes of :func:`cells_per_pass` cells. When the heap is
still too small, the JVM spends its time in full collections (a 3 GB heap: 443 of them in 12
minutes, no output); :func:`heap_guard` sees that from the JVM's own collectors and stops the
run with :data:`RAISE_HEAP`, the setting to raise.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession

#: Below this heap (MiB) the explain commands refuse to start: Spark, Feast and Delta's
#: classes and the prepared stages' plans alone take most of it.
MIN_HEAP_MIB = 1024
#: The heap (MiB) the advisor's pass takes besides its cells, and each cell's share.
BASE_MIB, PER_CELL_MIB = 1024, 100
#: How to give the driver more heap, in every message that asks for it.
RAISE_HEAP = (
    "raise the driver's heap: spark.driver.memory in spark_conf of the offline_store in "
    'feature_store.yaml (e.g. spark.driver.memory: "8g"), or in the machine\'s '
    "spark-defaults.conf; a PYSPARK_SUBMIT_ARGS you set must say --driver-memory itself "
    "(docs/reference/memory.md)"
)


class DriverMemoryError(RuntimeError):
    """The driver's heap cannot hold the command's work (the message says what to raise)."""


@dataclass(frozen=True)
class GcSample:
    """The JVM's collectors at one instant: ``at`` (seconds, monotonic), total pause time
    (ms), full collections so far, heap used and its maximum (bytes)."""

    at: float
    gc_ms: int
    full_gcs: int
    used: int
    max: int


def thrashing(
    samples: Sequence[GcSample], window_s: float = 30.0, share: float = 0.5, full: int = 3
) -> bool:
    """Did the JVM, over the last ``window_s`` seconds of ``samples`` (oldest first), spend
    more than ``share`` of the time collecting, with at least ``full`` full collections?
    A heap that holds the work collects young objects in a few percent of the time."""
    if len(samples) < 2:
        return False
    last = samples[-1]
    first = next((s for s in samples if last.at - s.at <= window_s), last)
    elapsed = last.at - first.at
    if elapsed < window_s / 2:
        return False
    spent = (last.gc_ms - first.gc_ms) / 1000
    return spent > share * elapsed and last.full_gcs - first.full_gcs >= full


def heap_mib(spark: SparkSession) -> int:
    """The driver JVM's maximum heap, MiB (a little under ``-Xmx``: the JVM's own count)."""
    return spark._jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20


def cells_per_pass(spark: SparkSession) -> int:
    """How many of the advisor's cells one pass may judge in this driver's heap."""
    return max(1, (heap_mib(spark) - BASE_MIB) // PER_CELL_MIB)


def gc_sample(spark: SparkSession) -> GcSample:
    factory = spark._jvm.java.lang.management.ManagementFactory
    pauses, full = 0, 0
    for bean in factory.getGarbageCollectorMXBeans():
        name = bean.getName()
        if "Concurrent" in name:  # G1's concurrent cycles run beside the application
            continue
        pauses += max(bean.getCollectionTime(), 0)
        if "Old" in name or "MarkSweep" in name:
            full += max(bean.getCollectionCount(), 0)
    heap = factory.getMemoryMXBean().getHeapMemoryUsage()
    return GcSample(time.monotonic(), pauses, full, heap.getUsed(), heap.getMax())


@contextmanager
def heap_guard(
    spark: SparkSession, command: str, every_s: float = 5.0, grace_s: float = 20.0
) -> Iterator[None]:
    """Refuse a heap under :data:`MIN_HEAP_MIB`; then watch the JVM's collectors while the
    block runs. On thrashing (:func:`thrashing`) Spark's jobs are cancelled and the block
    ends with :class:`DriverMemoryError`; a driver stuck outside any job (planning a query)
    is ended after ``grace_s`` with the same message on stderr and exit status 1."""
    heap = heap_mib(spark)
    if heap < MIN_HEAP_MIB * 0.9:
        raise DriverMemoryError(
            f"{command}: the driver's heap is {heap:,} MiB, under the {MIN_HEAP_MIB:,} MiB "
            f"the explain commands need; {RAISE_HEAP}"
        )
    stop, tripped = threading.Event(), threading.Event()
    message = (
        f"{command}: stopped, the driver's heap ({heap:,} MiB) is too small for this work: "
        f"the JVM was spending most of its time in full garbage collections; {RAISE_HEAP}"
    )

    def watch() -> None:
        samples: list[GcSample] = []
        while not stop.wait(every_s):
            try:
                samples.append(gc_sample(spark))
            except Exception:  # the session is stopping
                return
            samples = samples[-64:]
            if thrashing(samples):
                tripped.set()
                spark.sparkContext.cancelAllJobs()
                if not stop.wait(grace_s):
                    print(f"Error: {message}", file=sys.stderr, flush=True)
                    os._exit(1)
                return

    watcher = threading.Thread(target=watch, name="heap-guard", daemon=True)
    watcher.start()
    try:
        yield
    except Exception as exc:
        if tripped.is_set():
            raise DriverMemoryError(message) from exc
        raise
    finally:
        stop.set()
    if tripped.is_set():
        raise DriverMemoryError(message)
