"""The backfill: archived records in, emission log out.

The flow reads like the model: the job's records, a plan (:mod:`feast_stream_backfill.planner`
picks the strategy that computes the windows and triggers), the strategy's firings, then the
emission log (:mod:`feast_stream_backfill.emission_log`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.columns import WINDOW_END, WINDOW_START
from feast_stream_backfill.emission_log import emission_log
from feast_stream_backfill.job import StreamJob, refusing_overflow
from feast_stream_backfill.planner import Plan, plan, run
from feast_stream_backfill.stages import stage
from feast_stream_backfill.triggers import STATUSES

__all__ = ["Backfill", "StreamJob", "backfill"]


@dataclass
class Backfill:
    """The result: ``emissions`` (the emission log), ``dropped`` (late records dropped, per key
    and window) and ``stats``, which account for every record read: ``records_read`` =
    ``duplicates_removed`` + the ``records_<status>`` counts (on_time, late, per_record,
    dropped, pending), which count (record, window) pairs: with sliding windows a record
    counts once per window it belongs to; with lookups, + ``records_without_state`` (records
    an inner lookup removed); with ``null_keys="drop"``, + ``records_null_key``; with
    ``where``, + ``records_filtered``. With ``PerRecordTrigger(skip_unchanged=True)``,
    ``updates_unchanged`` counts the per-record firings not written, their values unchanged:
    their records were processed, and stay counted in ``records_per_record``, of which they
    are a part (the log holds ``records_per_record - updates_unchanged`` rows).
    ``long_sums`` describes the sums of integer columns, which can overflow a long. ``plan``:
    the strategies that accepted the job and why (:func:`planner.plan`); ``ran``: the one
    whose result this is (where a faster one declined the archive, ``stats`` has
    ``strategies_declined``)."""

    emissions: DataFrame
    dropped: DataFrame
    stats: dict[str, int]
    plan: Plan
    ran: str
    cached: list[DataFrame] = field(default_factory=list, repr=False)
    long_sums: list[str] = field(default_factory=list, repr=False)

    def release(self) -> None:
        """Free the intermediate results kept for the computation (after writing)."""
        for df in self.cached:
            df.unpersist()

    def write(
        self, emissions_path: str, dropped_path: str | None = None, metadata: str = ""
    ) -> None:
        """Overwrite Delta tables in one transaction each (a rerun gives the same tables),
        with ``metadata`` as the commits' ``userMetadata``; then :meth:`release`. The log is
        written first: a refused log (below) leaves both tables as they were.

        A sum of an integer column that overflows a long in some window is refused with a
        :class:`BadArchiveError` naming it (Spark's ANSI error, raised deep in a stage, names
        neither column nor archive); Flink's Java long sum would wrap around silently."""
        with refusing_overflow(self.long_sums):
            for df, path in ((self.emissions, emissions_path), (self.dropped, dropped_path)):
                if path:
                    writer = df.write.format("delta").mode("overwrite")
                    writer = writer.option("overwriteSchema", "true")
                    writer.option("userMetadata", metadata).save(path)
        self.release()


def backfill(spark: SparkSession, job: StreamJob, *, strategy: str | None = None) -> Backfill:
    """Run the model over the job's archived topics.

    Actions on the data, each a named stage (:mod:`stages`): the record counts, the watermark,
    the status counts (which compute and keep the per-window aggregate the emission log and
    the dropped records are read from), with a trigger that skips unchanged updates the
    emission log (kept: counting the updates left out computes it), then whatever the caller
    does with the results.
    ``strategy`` names the strategy to use (the tests compare every one that accepts a job);
    by default the plan's first.
    """
    chosen = plan(job, strategy)
    ran = run(spark, job, chosen)
    windowed = ran.windowed
    stats = {**windowed.counts, **{f"records_{s}": windowed.statuses.get(s, 0) for s in STATUSES}}
    if windowed.records_without_state is not None:
        stats["records_without_state"] = windowed.records_without_state
    if ran.declined:
        stats["strategies_declined"] = len(ran.declined)
    skips = job.trigger.skip_unchanged
    emissions = emission_log(
        windowed.fired, job.keys, job.features, job.operator_delay_ms, windowed.shared, skips
    )
    cached = list(windowed.cached)
    if skips:  # counted here, kept for the caller's write
        emissions = emissions.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        cached.append(emissions)
        with refusing_overflow(windowed.long_sums), stage("emission log"):
            stats["updates_unchanged"] = stats["records_per_record"] - emissions.count()
    dropped = windowed.dropped.select(
        *job.keys,
        F.timestamp_millis(WINDOW_START).alias("window_start"),
        F.timestamp_millis(WINDOW_END).alias("window_end"),
        "dropped_count",
    )
    return Backfill(
        emissions=emissions,
        dropped=dropped,
        stats=stats,
        plan=chosen,
        ran=ran.strategy.name,
        cached=cached,
        long_sums=windowed.long_sums,
    )
