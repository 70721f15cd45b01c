"""The backfill: archived records in, emission log out (the whole core, end to end)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.columns import (
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    POSITION,
    STATUS,
    TOPIC,
    WINDOW_END,
    WINDOW_START,
)
from feast_stream_backfill.emission_log import emission_log
from feast_stream_backfill.enrichment import (
    Lookup,
    enrich,
    enrichment_inputs,
    enrichment_outputs,
)
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.processing_time import ProcessingTimeModel, with_processing_time
from feast_stream_backfill.records import ArchivedTopic, read_records
from feast_stream_backfill.sessions import session_firings
from feast_stream_backfill.triggers import (
    DROPPED,
    STATUSES,
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)
from feast_stream_backfill.watermarks import (
    WatermarkStrategy,
    watermark_reaches,
    watermark_timeline,
)
from feast_stream_backfill.window_operator import classify, firings, watermark_targets
from feast_stream_backfill.windows import SessionWindows, SlidingWindows, TumblingWindows


@dataclass(frozen=True)
class StreamJob:
    """A keyed, windowed Flink job over archived topics: what, where, when and how.

    ``operator_delay_ms`` is D3: from a firing to the sink's write. ``lookups`` enrich each
    record with external state before windowing, then the ``derived`` Spark SQL expressions
    are added (``{"amount_usd": "amount * rate"}``): aggregations may use both
    (:mod:`feast_stream_backfill.enrichment`).
    """

    topics: Sequence[ArchivedTopic]
    keys: Sequence[str]
    window: TumblingWindows | SlidingWindows | SessionWindows
    aggregations: Sequence[Aggregation]
    trigger: EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger = field(
        default_factory=EventTimeTrigger
    )
    watermark: WatermarkStrategy = field(default_factory=WatermarkStrategy)
    processing_time: ProcessingTimeModel = field(default_factory=ProcessingTimeModel)
    operator_delay_ms: int = 0
    lookups: Sequence[Lookup] = ()
    derived: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.topics or not self.keys or not self.aggregations:
            raise ValueError("a StreamJob needs at least one topic, one key and one aggregation")
        if self.trigger.domain not in ("any", self.window.domain):
            raise ValueError(
                f"{type(self.trigger).__name__} fires {self.trigger.domain}-time windows, "
                f"not {self.window.domain}-time ones"
            )
        names = [a.name for a in self.aggregations]
        if len(set(names)) != len(names):
            raise ValueError(f"feature names must be unique, got {names}")
        object.__setattr__(self, "lookups", tuple(self.lookups))  # equal however given
        object.__setattr__(self, "derived", dict(self.derived))
        added = enrichment_outputs(self.lookups, self.derived)
        if len(set(added)) != len(added):
            raise ValueError(f"enriched and derived column names must be unique, got {added}")

    @property
    def features(self) -> list[str]:
        return [a.name for a in self.aggregations]

    @property
    def payload_columns(self) -> list[str]:
        """The archive columns the job reads: keys, aggregated and enrichment inputs, less
        the columns enrichment adds."""
        read = [*self.keys, *(a.column for a in self.aggregations)]
        read += enrichment_inputs(self.lookups, self.derived)
        added = set(enrichment_outputs(self.lookups, self.derived))
        return [c for c in dict.fromkeys(read) if c not in added]


@dataclass
class Backfill:
    """The result: ``emissions`` (the emission log), ``dropped`` (late records dropped, per key
    and window) and ``stats``, which account for every record read: ``records_read`` =
    ``duplicates_removed`` + the ``records_<status>`` counts (on_time, late, per_record,
    dropped, pending), which count (record, window) pairs: with sliding windows a record
    counts once per window it belongs to; with lookups, + ``records_without_state`` (records
    an inner lookup removed)."""

    emissions: DataFrame
    dropped: DataFrame
    stats: dict[str, int]
    cached: list[DataFrame] = field(default_factory=list, repr=False)

    def release(self) -> None:
        """Free the intermediate results kept for the computation (after writing)."""
        for df in self.cached:
            df.unpersist()

    def write(
        self, emissions_path: str, dropped_path: str | None = None, metadata: str = ""
    ) -> None:
        """Overwrite Delta tables in one transaction each (a rerun gives the same tables),
        with ``metadata`` as the commits' ``userMetadata``; then :meth:`release`."""
        for df, path in ((self.dropped, dropped_path), (self.emissions, emissions_path)):
            if path:
                writer = df.write.format("delta").mode("overwrite")
                writer.option("overwriteSchema", "true").option("userMetadata", metadata).save(path)
        self.release()


def timed_records(spark: SparkSession, job: StreamJob) -> tuple[DataFrame, dict[str, int]]:
    """Every topic's records with their processing times and duplicate flags (kept: the counts
    and everything after read them), and the counts ``records_read`` and ``duplicates_removed``.

    A record archived twice with different content is refused, naming the first: picking one
    would be a guess.
    """
    records = reduce(
        DataFrame.unionByName,
        [
            read_records(spark, t, job.payload_columns).select(
                TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns
            )
            for t in job.topics
        ],
    )
    timed = with_processing_time(records, job.processing_time).persist(StorageLevel.MEMORY_AND_DISK)
    counts = timed.agg(
        F.count(F.lit(1)).alias("records_read"),
        F.sum(F.col(DUPLICATE).cast("long")).alias("duplicates_removed"),
        F.sum(F.col(CONFLICT).cast("long")).alias("conflicts"),
    ).first()
    if counts["conflicts"]:
        example = timed.where(F.col(CONFLICT)).select(TOPIC, PARTITION, OFFSET).first()
        timed.unpersist()
        raise BadArchiveError(
            f"archived topic {example[TOPIC]!r}: {counts['conflicts']} record(s) archived twice "
            f"with different content, e.g. partition {example[PARTITION]} offset "
            f"{example[OFFSET]}; refusing to pick one"
        )
    return timed, {
        "records_read": counts["records_read"],
        "duplicates_removed": counts["duplicates_removed"],
    }


def distinct_records(timed: DataFrame) -> DataFrame:
    """Each record once, with its place in the processing order (the watermark's input)."""
    return timed.where(~F.col(DUPLICATE)).withColumn(POSITION, record_position())


def backfill(spark: SparkSession, job: StreamJob) -> Backfill:
    """Run the model over the job's archived topics.

    Actions on the data: a validation pass per topic, one pass for the record counts, one for
    the watermark timeline, then whatever the caller does with the returned DataFrames.
    """
    timed, counts = timed_records(spark, job)
    distinct = distinct_records(timed)
    # Only enriched records are windowed, but the watermark comes from every record: in Flink
    # those an inner lookup removed had passed the source's watermark generator.
    enriched = None
    if job.lookups or job.derived:
        enriched = enrich(distinct, job.lookups, job.derived).persist(StorageLevel.MEMORY_AND_DISK)
    kept = distinct if enriched is None else enriched
    bounds = {
        t.name: t.out_of_orderness_ms for t in job.topics if t.out_of_orderness_ms is not None
    }
    event_time = job.window.domain == "event"
    if job.window.merges:
        timeline = None
        if event_time:
            timeline = watermark_timeline(distinct, job.watermark, bounds)
        fired, dropped, statuses, replayed = session_firings(
            kept, job.keys, job.aggregations, job.window, job.trigger, timeline
        )
        cached = [replayed]
    else:
        windowed = job.window.assign(kept)
        reaches = None
        if event_time:
            targets = watermark_targets(windowed, job.trigger)
            reaches = watermark_reaches(distinct, targets, job.watermark, bounds)
            reaches = reaches.persist(StorageLevel.MEMORY_AND_DISK)
        classified = classify(windowed, job.trigger, reaches)
        fired = firings(classified, job.trigger, job.keys, job.aggregations, event_time)
        dropped = (
            classified.where(F.col(STATUS) == DROPPED)
            .groupBy(*job.keys, WINDOW_START, WINDOW_END)
            .agg(F.count(F.lit(1)).alias("dropped_count"))
        )
        statuses = classified.groupBy(STATUS).agg(F.count(F.lit(1)).alias("n"))
        cached = [reaches]
    emissions = emission_log(fired, job.keys, job.features, job.operator_delay_ms)
    dropped = dropped.select(
        *job.keys,
        F.timestamp_millis(WINDOW_START).alias("window_start"),
        F.timestamp_millis(WINDOW_END).alias("window_end"),
        "dropped_count",
    )
    by_status = {row[STATUS]: row["n"] for row in statuses.collect()}
    stats = {
        "records_read": counts["records_read"],
        "duplicates_removed": counts["duplicates_removed"],
        **{f"records_{s}": by_status.get(s, 0) for s in STATUSES},
    }
    if job.lookups:  # removed by an inner lookup: no state at their lookup time
        inner = any(lookup.how == "inner" for lookup in job.lookups)
        distinct_count = counts["records_read"] - counts["duplicates_removed"]
        stats["records_without_state"] = distinct_count - enriched.count() if inner else 0
    return Backfill(
        emissions=emissions,
        dropped=dropped,
        stats=stats,
        cached=[df for df in (timed, enriched, *cached) if df is not None],
    )
