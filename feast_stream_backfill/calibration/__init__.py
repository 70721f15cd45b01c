"""The backfill against what the live job wrote and served: fitted delays, their spread, where
the two part, and how sure training values are.

The backfill answers exactly for one assumption: that the job read each record at the
earliest time the archive admits, plus the declared delays. :func:`calibrate` reads the live
job's output topic as archived (:class:`ObservedWrites`), pairs each write with the emission
the backfill made for it (:mod:`.matching`), and says how far the live job was from the
assumption: the delay from backfilled emission to write, fitted with its interval and spread
(:mod:`.fit`), the share of the live job's values the backfill does not reproduce, and the
partitions and hours where it strays (:mod:`.strays`). The online store's logged requests
(:class:`ObservedServes`) say the same less directly, each bounding the delay from one side
(:mod:`.serves`); where both are at hand the writes give the fit and the requests check it.
The residual distribution is kept with the view (:meth:`Calibration.store`): how sure a
training value is depends on it, and :mod:`.verdict` says what share of training rows is
uncertain.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace

from pyspark.sql import DataFrame, SparkSession

from feast_stream_backfill.calibration import fit, matching, strays, verdict
from feast_stream_backfill.calibration.fit import Counts, Delay, Delays
from feast_stream_backfill.calibration.observed import ObservedWrites
from feast_stream_backfill.calibration.serves import (
    ObservedServes,
    ServeCounts,
    ServeFit,
    fit_serves,
    uncertain_share,
)
from feast_stream_backfill.calibration.strays import Restart, Stray
from feast_stream_backfill.calibration.visibility import UNCERTAIN_BELOW
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.job_records import job_records

__all__ = ["Calibration", "ObservedServes", "ObservedWrites", "calibrate", "load_calibration"]

#: What a fit or a verdict rests on: the writes, the logged requests, or time (the verdict
#: without requests: :mod:`.verdict`).
WRITES, REQUESTS, OVER_TIME = "writes", "requests", "time"


@dataclass(frozen=True)
class Uncertain:
    """The share of training rows whose value had probability below
    :data:`~.visibility.UNCERTAIN_BELOW`, and where it was measured: :data:`REQUESTS` or
    :data:`OVER_TIME` (:mod:`.verdict`)."""

    share: float
    basis: str

    def __str__(self) -> str:
        where = (
            "of the logged requests"
            if self.basis == REQUESTS
            else "of the time between a key's first and last emission"
        )
        return (
            f"training values uncertain (probability < {UNCERTAIN_BELOW}): {self.share:.2%} {where}"
        )


@dataclass
class Calibration:
    """What :func:`calibrate` found. ``counts``: the writes paired (None: no writes given);
    ``delays``: the residual fitted from the writes, else from the requests (None where
    nothing bore on it; ``delays_from`` says which); ``serves``: what the requests say (None:
    none given); ``uncertain``: the verdict; ``suggested_tags``: the view's tags that would
    put the backfill on the live job's medians; ``strays``: the partitions and hours that
    stand out; ``restart``: writes repeating a value (None: none); ``cells``: per partition
    and hour (a pandas DataFrame: matched, mismatches, median_ms), for the picture."""

    counts: Counts | None
    delays: Delays | None
    suggested_tags: dict[str, str]
    strays: list[Stray]
    restart: Restart | None
    cells: object = field(default=None, repr=False)
    serves: ServeFit | None = None
    uncertain: Uncertain | None = None
    delays_from: str = WRITES

    def summary(self) -> list[str]:
        """The findings as lines a user reads first."""
        lines = [] if self.uncertain is None else [str(self.uncertain)]
        c = self.counts
        if c is not None:
            lines += [
                f"writes read {c.writes:,}: {c.matched:,} match the backfill, "
                f"{c.value_differs:,} differ in value, {c.not_emitted:,} the backfill never "
                f"emits, {c.rewrites:,} repeat a value; {c.not_written:,} emissions were never "
                "written",
                f"values the backfill does not reproduce: {c.mismatch_rate:.2%}",
            ]
        if self.serves is not None:
            s = self.serves.counts
            lines += [
                f"requests read {s.requests:,}: served the backfill's value {s.as_backfill:,}, "
                f"its previous value {s.earlier:,}, its next {s.later:,}, nothing before the "
                f"first {s.nothing_yet:,}; none of these {s.differs:,} "
                f"({s.mismatch_rate:.2%})",
            ]
        if self.delays is None:
            return [*lines, "nothing matched an emission: no delay can be fitted"]
        d = self.delays
        source = "" if self.delays_from == WRITES else ", from the requests"
        lines.append(f"write time - backfilled emit time{source}: {d.total}")
        if self.serves is not None and self.serves.delay and self.delays_from == WRITES:
            lines.append(f"  as the requests bound it: {self.serves.delay}")
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
                "counts": None if self.counts is None else asdict(self.counts),
                "delays": None if self.delays is None else asdict(self.delays),
                "suggested_tags": self.suggested_tags,
                "strays": [asdict(s) for s in self.strays],
                "restart": None if self.restart is None else asdict(self.restart),
                "serves": None if self.serves is None else asdict(self.serves),
                "uncertain": None if self.uncertain is None else asdict(self.uncertain),
                "delays_from": self.delays_from,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        data = json.loads(text)

        def delay(d: dict | None) -> Delay | None:
            return None if d is None else Delay(**{**d, "spread": tuple(d["spread"])})

        delays, served = data["delays"], data.get("serves")
        return cls(
            None if data["counts"] is None else Counts(**data["counts"]),
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
            serves=None
            if served is None
            else ServeFit(
                ServeCounts(**served["counts"]),
                delay(served["delay"]),
                served["quantiles"],
                served["uncertain"],
            ),
            uncertain=None if data.get("uncertain") is None else Uncertain(**data["uncertain"]),
            delays_from=data.get("delays_from", WRITES),
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
    spark: SparkSession,
    job: StreamJob,
    writes: ObservedWrites | None,
    emissions: DataFrame,
    serves: ObservedServes | None = None,
) -> Calibration:
    """Pair the live job's ``writes`` and place its ``serves`` (either may be None, not both)
    among the job's ``emissions`` (its emission log, as
    :func:`~feast_stream_backfill.backfill.backfill` makes it), fit the delays and give the
    verdict."""
    if writes is None and serves is None:
        raise ValueError("calibration needs the live job's writes, its served requests or both")
    keys, features = list(job.keys), list(job.features)
    found = (
        _from_writes(spark, job, writes, emissions)
        if writes is not None
        else Calibration(None, None, {}, [], None)
    )
    placed = None
    try:
        if serves is not None:
            served, placed = fit_serves(spark, serves, emissions, keys, features)
            found = replace(found, serves=served)
            if found.delays is None and served.delay is not None:
                delays = Delays(served.delay, None, None, served.quantiles)
                found = replace(found, delays=delays, delays_from=REQUESTS)
        if found.delays is not None:
            quantiles = found.delays.quantiles
            if placed is not None:
                share, basis = uncertain_share(placed, quantiles), REQUESTS
            else:
                share, basis = verdict.uncertain_time_share(emissions, keys, quantiles), OVER_TIME
            tags = fit.suggested_tags(
                found.delays, job.processing_time.min_delay_ms, job.operator_delay_ms
            )
            found = replace(
                found,
                suggested_tags=tags,
                uncertain=None if share is None else Uncertain(share, basis),
            )
    finally:
        if placed is not None:
            placed.unpersist()
    return found


def _from_writes(
    spark: SparkSession, job: StreamJob, writes: ObservedWrites, emissions: DataFrame
) -> Calibration:
    """The writes paired and fitted (no tags or verdict yet)."""
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
    return Calibration(counts, delays, {}, found, restart, cells)
