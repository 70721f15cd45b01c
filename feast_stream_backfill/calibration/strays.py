"""Where the live job strays from the backfill: per Kafka partition and hour, and restarts.

A key's writes are placed in the partition holding its records (the one holding most of them
where a producer spread a key) and the hour of their backfilled emission. A cell whose median
delay stands out from the others, or whose values the backfill does not reproduce, is named.
Where every partition's cells of an hour stand out together, the job as a whole was late:
a pause, a restart, or one partition whose watermark held every window back (Flink fires a
window when the slowest partition's watermark passes it, so a slow partition delays every
key's windows). Where one partition's stand out alone, that partition was read late: its
records' own firings (late, per-record) show it. Writes that repeat their window's value
are what a restart from a checkpoint leaves: the job fired those windows again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.calibration.fit import ACCURACY
from feast_stream_backfill.calibration.matching import (
    EMIT_MS,
    MATCHED,
    NOT_EMITTED,
    STATUS,
    VALUE_DIFFERS,
)
from feast_stream_backfill.calibration.observed import START_MS, WRITE_MS
from feast_stream_backfill.columns import PARTITION, TOPIC

HOUR_MS = 3_600_000
#: Fewest matched writes for a cell's median to be compared with the others.
MIN_CELL_WRITES = 20
PARTITION_LABEL = "partition"


def key_partitions(records: DataFrame, keys: Sequence[str], several_topics: bool) -> DataFrame:
    """Each key's partition label (``topic/partition`` across topics): the one holding most of
    its records."""
    label = (
        F.concat_ws("/", TOPIC, F.col(PARTITION).cast("string"))
        if several_topics
        else F.col(PARTITION).cast("string")
    )
    per = records.groupBy(*keys, label.alias(PARTITION_LABEL)).count()
    return per.groupBy(*keys).agg(F.max_by(PARTITION_LABEL, "count").alias(PARTITION_LABEL))


def cells(pairs: DataFrame, partitions: DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per partition and hour of emission: writes paired, values not reproduced, and the
    median of write time minus emit time. Small: partitions times hours."""
    placed = pairs.join(partitions, list(keys), "left").withColumn(
        "hour", F.floor(F.coalesce(EMIT_MS, WRITE_MS) / HOUR_MS)
    )
    matched = F.col(STATUS) == MATCHED
    residual = F.when(matched, F.col(WRITE_MS) - F.col(EMIT_MS))
    grouped = placed.groupBy(F.coalesce(PARTITION_LABEL, F.lit("?")).alias("partition"), "hour")
    return grouped.agg(
        F.count(F.when(matched, 1)).alias("matched"),
        F.count(F.when(F.col(STATUS).isin(VALUE_DIFFERS, NOT_EMITTED), 1)).alias("mismatches"),
        F.percentile_approx(residual, 0.5, ACCURACY).alias("median_ms"),
    ).toPandas()


@dataclass(frozen=True)
class Stray:
    """One finding: ``what`` happened, over ``partitions`` (``"every"``) and the hours from
    ``first_hour`` to ``last_hour`` (epoch hours), by ``ms`` (a median excess delay) or
    ``count`` (values not reproduced, or writes repeated)."""

    what: str
    partitions: str
    first_hour: int
    last_hour: int
    ms: float = 0.0
    count: int = 0

    def __str__(self) -> str:
        start = pd.Timestamp(self.first_hour * HOUR_MS, unit="ms", tz="UTC")
        end = pd.Timestamp((self.last_hour + 1) * HOUR_MS, unit="ms", tz="UTC")
        span = f"{start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC"
        where = "every partition" if self.partitions == "every" else f"partition {self.partitions}"
        if self.what == "late":
            return f"{where}, {span}: writes {self.ms / 1000:.1f} s later than the rest"
        return f"{where}, {span}: {self.count:,} values the backfill does not emit"


def _runs(hours: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive hours as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for hour in sorted(hours):
        if runs and hour == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], hour)
        else:
            runs.append((hour, hour))
    return runs


def strays(table: pd.DataFrame, interval_ms: int) -> list[Stray]:
    """Cells that stand out: a median delay more than four robust deviations (and two
    watermark intervals) above the median cell's; a share of values not reproduced above 1 %
    and three times the whole's. Runs of hours merged; hours where at least half the
    partitions stand out are named for every partition."""
    found: list[Stray] = []
    compared = table[table["matched"] >= MIN_CELL_WRITES]
    if len(compared):
        centre = compared["median_ms"].median()
        deviation = 1.4826 * (compared["median_ms"] - centre).abs().median()
        late = compared[compared["median_ms"] - centre > max(4 * deviation, 2 * interval_ms)]
        found += _grouped(late, table, "late", lambda cells: cells["median_ms"].median() - centre)
    total = table["matched"].sum() + table["mismatches"].sum()
    overall = table["mismatches"].sum() / total if total else 0.0
    share = table["mismatches"] / (table["matched"] + table["mismatches"]).clip(lower=1)
    wrong = table[(table["mismatches"] >= 5) & (share > max(0.01, 3 * overall))]
    found += _grouped(wrong, table, "mismatch", lambda cells: cells["mismatches"].sum())
    return found


def _grouped(flagged: pd.DataFrame, table: pd.DataFrame, what: str, measure) -> list[Stray]:
    partitions = table["partition"].nunique()
    per_hour = flagged.groupby("hour")["partition"].nunique()
    every = [h for h, n in per_hour.items() if partitions > 1 and n >= max(2, partitions / 2)]
    found = []
    for first, last in _runs(every):
        cells = flagged[flagged["hour"].between(first, last)]
        found.append(_stray(what, "every", first, last, measure(cells)))
    alone = flagged[~flagged["hour"].isin(every)]
    for partition, cells in alone.groupby("partition"):
        for first, last in _runs(cells["hour"].tolist()):
            run = cells[cells["hour"].between(first, last)]
            found.append(_stray(what, str(partition), first, last, measure(run)))
    return found


def _stray(what: str, partitions: str, first: int, last: int, measure: float) -> Stray:
    if what == "late":
        return Stray(what, partitions, int(first), int(last), ms=float(measure))
    return Stray(what, partitions, int(first), int(last), count=int(measure))


@dataclass(frozen=True)
class Restart:
    """Writes repeating their window's value: ``count`` of them, written from ``first_write``
    to ``last_write`` (epoch ms), for windows starting from ``first_window`` to
    ``last_window``."""

    count: int
    first_write: int
    last_write: int
    first_window: int
    last_window: int

    def __str__(self) -> str:
        def at(ms: int) -> str:
            return f"{pd.Timestamp(ms, unit='ms', tz='UTC'):%Y-%m-%d %H:%M:%S}"

        return (
            f"{self.count:,} write(s) repeat a value already written, from {at(self.first_write)} "
            f"to {at(self.last_write)} UTC, for windows from {at(self.first_window)} to "
            f"{at(self.last_window)}: the job fired them again (a restart from a checkpoint)"
        )


def restart(rewrites: DataFrame) -> Restart | None:
    row = rewrites.agg(
        F.count(F.lit(1)).alias("n"),
        F.min(WRITE_MS).alias("w0"),
        F.max(WRITE_MS).alias("w1"),
        F.min(START_MS).alias("s0"),
        F.max(START_MS).alias("s1"),
    ).first()
    if not row["n"]:
        return None
    return Restart(row["n"], row["w0"], row["w1"], row["s0"], row["s1"])
