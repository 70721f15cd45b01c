"""The backfill against what the live job wrote: fitted delays, their spread, and where the two
part.

The backfill answers exactly for one assumption: that the job read each record at the
earliest time the archive admits, plus the declared delays. :func:`calibrate` reads the live
job's output topic as archived (:class:`ObservedWrites`), pairs each write with the emission
the backfill made for it (:mod:`.matching`), and says how far the live job was from the
assumption: the delay from backfilled emission to write, fitted with its interval and spread
(:mod:`.fit`), the share of the live job's values the backfill does not reproduce, and the
partitions and hours where it strays (:mod:`.strays`). The residual distribution is kept
with the view (:meth:`Calibration.store`): how sure a training value is depends on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.calibration import fit, matching, strays
from feast_stream_backfill.calibration.fit import Counts, Delay, Delays
from feast_stream_backfill.calibration.observed import ObservedWrites
from feast_stream_backfill.calibration.strays import Restart, Stray
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.job_records import job_records

__all__ = ["Calibration", "ObservedWrites", "calibrate", "load_calibration"]


@dataclass
class Calibration:
    """What :func:`calibrate` found. ``delays``: None where no write matched an emission;
    ``suggested_tags``: the view's tags that would put the backfill on the live job's
    medians; ``strays``: the partitions and hours that stand out; ``restart``: writes
    repeating a value (None: none); ``cells``: per partition and hour (a pandas DataFrame:
    matched, mismatches, median_ms), for the picture."""

    counts: Counts
    delays: Delays | None
    suggested_tags: dict[str, str]
    strays: list[Stray]
    restart: Restart | None
    cells: object = field(default=None, repr=False)

    def summary(self) -> list[str]:
        """The findings as lines a user reads first."""
        c = self.counts
        lines = [
            f"writes read {c.writes:,}: {c.matched:,} match the backfill, "
            f"{c.value_differs:,} differ in value, {c.not_emitted:,} the backfill never emits, "
            f"{c.rewrites:,} repeat a value; {c.not_written:,} emissions were never written",
            f"values the backfill does not reproduce: {c.mismatch_rate:.2%}",
        ]
        if self.delays is None:
            return [*lines, "no write matched an emission: no delay can be fitted"]
        d = self.delays
        lines.append(f"write time - backfilled emit time: {d.total}")
        if d.read is not None and d.sink is not None:
            lines.append(f"  read later than the backfill assumes (D2): {d.read}")
            lines.append(f"  firing to write (D3): {d.sink}")
        else:
            lines.append(
                "  D2 and D3 are not told apart: the writes carry no firing time of the job"
            )
        tags = ", ".join(f"{k}={v}" for k, v in self.suggested_tags.items())
        lines.append(f"tags to set: {tags}")
        lines += [f"stands out: {s}" for s in self.strays]
        if self.restart is not None:
            lines.append(f"restart: {self.restart}")
        return lines

    def to_json(self) -> str:
        return json.dumps(
            {
                "counts": asdict(self.counts),
                "delays": None if self.delays is None else asdict(self.delays),
                "suggested_tags": self.suggested_tags,
                "strays": [asdict(s) for s in self.strays],
                "restart": None if self.restart is None else asdict(self.restart),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        data = json.loads(text)

        def delay(d: dict | None) -> Delay | None:
            return None if d is None else Delay(**{**d, "spread": tuple(d["spread"])})

        delays = data["delays"]
        return cls(
            Counts(**data["counts"]),
            None
            if delays is None
            else Delays(
                delay(delays["total"]),
                delay(delays["read"]),
                delay(delays["sink"]),
                delays["quantiles"],
            ),
            data["suggested_tags"],
            [Stray(**s) for s in data["strays"]],
            None if data["restart"] is None else Restart(**data["restart"]),
        )

    def store(self, spark: SparkSession, path: str) -> None:
        """Overwrite the Delta table at ``path`` with this calibration (one row: a rerun
        leaves the same table)."""
        row = spark.createDataFrame([(self.to_json(),)], "calibration string")
        row.write.format("delta").mode("overwrite").save(path)


def load_calibration(spark: SparkSession, path: str) -> Calibration | None:
    """The calibration stored at ``path`` (None where none is)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return Calibration.from_json(spark.read.format("delta").load(path).first()["calibration"])


def calibrate(
    spark: SparkSession, job: StreamJob, writes: ObservedWrites, emissions: DataFrame
) -> Calibration:
    """Pair the live job's ``writes`` with the job's ``emissions`` (its emission log, as
    :func:`~feast_stream_backfill.backfill.backfill` makes it) and fit the delays."""
    keys, features = list(job.keys), list(job.features)
    observed = writes.read(spark, keys, features)
    paired = matching.pair(observed, emissions, keys, features)
    pairs = paired.pairs.persist()
    try:
        restart = strays.restart(paired.rewrites)
        counts = fit.counts(pairs, restart.count if restart else 0)
        delays = fit.delays(pairs, counts.matched, job.operator_delay_ms)
        records, _ = job_records(spark, job)
        cells = None
        found: list[Stray] = []
        if all(k in records.columns for k in keys):
            partitions = strays.key_partitions(records, keys, len(job.topics) > 1)
            cells = strays.cells(pairs, partitions, keys)
            found = strays.strays(cells, job.watermark.interval_ms)
    finally:
        pairs.unpersist()
        paired.release()
    tags = (
        {}
        if delays is None
        else fit.suggested_tags(delays, job.processing_time.min_delay_ms, job.operator_delay_ms)
    )
    return Calibration(counts, delays, tags, found, restart, cells)
