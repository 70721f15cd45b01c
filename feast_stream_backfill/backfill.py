"""The backfill: archived records in, emission log out (the whole core, end to end)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import reduce
from typing import Literal

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from feast_stream_backfill import first_offsets
from feast_stream_backfill.aggregations import LONG_OVERFLOW, Aggregation
from feast_stream_backfill.columns import (
    ARCHIVE_TIME,
    CONFLICT,
    DUPLICATE,
    EVENT_TIME,
    OFFSET,
    PARTITION,
    POSITION,
    STATUS,
    TARGET,
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
from feast_stream_backfill.errors import BadArchiveError, conflicting_copies
from feast_stream_backfill.processing_order import record_position
from feast_stream_backfill.processing_time import ProcessingTimeModel, with_processing_time
from feast_stream_backfill.records import ArchivedTopic, RecordChecks, observed_records
from feast_stream_backfill.sessions import session_firings
from feast_stream_backfill.stages import stage
from feast_stream_backfill.triggers import (
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
from feast_stream_backfill.window_operator import (
    by_status,
    classify,
    dropped_records,
    firings,
    shared_instants,
    status_counts,
    watermark_targets,
)
from feast_stream_backfill.windows import SessionWindows, SlidingWindows, TumblingWindows


@dataclass(frozen=True)
class StreamJob:
    """A keyed, windowed Flink job over archived topics: what, where, when and how.

    ``operator_delay_ms`` is D3: from a firing to the sink's write. ``lookups`` enrich each
    record with external state before windowing, then the ``derived`` Spark SQL expressions
    are added (``{"amount_usd": "amount * rate"}``): aggregations may use both
    (:mod:`feast_stream_backfill.enrichment`). ``null_keys``: Flink's ``keyBy`` fails the job
    on a record whose key is null, so the backfill refuses such an archive ("refuse"); "drop"
    leaves those records out as a ``filter`` before ``keyBy`` would, after the source: they
    still take processing time and move the watermark (``stats["records_null_key"]``).
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
    null_keys: Literal["refuse", "drop"] = "refuse"

    def __post_init__(self) -> None:
        if self.null_keys not in ("refuse", "drop"):
            raise ValueError(f"null_keys must be 'refuse' or 'drop', got {self.null_keys!r}")
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

    @property
    def archive_keys(self) -> list[str]:
        """The key columns read from the archive (not added by enrichment)."""
        return [k for k in self.keys if k in self.payload_columns]

    def null_key(self) -> Column:
        """True for a record whose archived key has a null column."""
        return reduce(Column.__or__, [F.col(k).isNull() for k in self.archive_keys], F.lit(False))


@dataclass
class Backfill:
    """The result: ``emissions`` (the emission log), ``dropped`` (late records dropped, per key
    and window) and ``stats``, which account for every record read: ``records_read`` =
    ``duplicates_removed`` + the ``records_<status>`` counts (on_time, late, per_record,
    dropped, pending), which count (record, window) pairs: with sliding windows a record
    counts once per window it belongs to; with lookups, + ``records_without_state`` (records
    an inner lookup removed); with ``null_keys="drop"``, + ``records_null_key``.
    ``long_sums`` describes the sums of integer columns, which can overflow a long."""

    emissions: DataFrame
    dropped: DataFrame
    stats: dict[str, int]
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


def long_sums(job: StreamJob, records: DataFrame) -> list[str]:
    """The features that sum an integer column of ``records`` (:func:`refusing_overflow`)."""
    topics = ", ".join(t.where for t in job.topics)
    return [
        f"{topics}: feature {a.name!r} sums integer column {a.column!r}"
        for a in job.aggregations
        if a.function == "sum" and isinstance(records.schema[a.column].dataType, IntegralType)
    ]


@contextmanager
def refusing_overflow(long_sums: Sequence[str]) -> Iterator[None]:
    """Spark's overflow error of a sum of integers (ANSI mode), or the session replay's, as a
    :class:`BadArchiveError` naming ``long_sums``: the features that sum integer columns."""
    try:
        yield
    except Exception as exc:
        if long_sums and LONG_OVERFLOW in str(exc):
            raise BadArchiveError(
                f"{'; '.join(long_sums)}: a window's sum overflows a 64-bit long (Flink's "
                "Java long sum would wrap around silently; the backfill refuses rather than "
                "write a wrapped value): cast the column to decimal or double"
            ) from exc
        raise


def job_records(
    spark: SparkSession, job: StreamJob, *, archive_time: bool = False
) -> tuple[DataFrame, list[RecordChecks]]:
    """Every topic's records, normalized, with the columns the job reads, and each topic's value
    checks: the caller observes them on its first pass over every record, then verifies.
    ``archive_time``: each topic's own event-time column too (``ARCHIVE_TIME``), so that a
    filter on event times reaches the archive's reader (Parquet row groups, Delta files)."""
    refused = job.archive_keys if job.null_keys == "refuse" else []
    numeric = [
        a.column
        for a in job.aggregations
        if a.function in ("sum", "mean") and a.column in job.payload_columns
    ]
    read = [
        observed_records(spark, t, job.payload_columns, keys=refused, numeric=numeric)
        for t in job.topics
    ]
    own_time = [
        [F.col(t.timestamp_col).alias(ARCHIVE_TIME)] if archive_time else [] for t in job.topics
    ]
    records = reduce(
        DataFrame.unionByName,
        [
            df.select(TOPIC, PARTITION, OFFSET, EVENT_TIME, *job.payload_columns, *own)
            for (df, _), own in zip(read, own_time, strict=True)
        ],
    )
    return records, [checks for _, checks in read]


def timed_records(spark: SparkSession, job: StreamJob) -> tuple[DataFrame, dict[str, int]]:
    """Every topic's records with their processing times and duplicate flags (kept: the counts
    and everything after read them), and the counts ``records_read`` and ``duplicates_removed``.

    A record archived twice with different content is refused, naming the first: picking one
    would be a guess.
    """
    records, read = job_records(spark, job)
    timed = with_processing_time(records, job.processing_time)
    for checks in read:  # on the pass that sorts the records, which keeps every one
        timed = checks.observe(timed)
    timed = timed.persist(StorageLevel.MEMORY_AND_DISK_DESER)
    with stage("processing time"):
        counts = timed.agg(
            F.count(F.lit(1)).alias("records_read"),
            F.sum(F.col(DUPLICATE).cast("long")).alias("duplicates_removed"),
            F.sum(F.col(CONFLICT).cast("long")).alias("conflicts"),
            F.count_if(~F.col(DUPLICATE) & job.null_key()).alias("records_null_key"),
        ).first()
    try:
        for checks in read:
            checks.verify()
    except BadArchiveError:
        timed.unpersist()
        raise
    if counts["conflicts"]:
        example = timed.where(F.col(CONFLICT)).select(TOPIC, PARTITION, OFFSET).first()
        timed.unpersist()
        n = counts["conflicts"]
        raise conflicting_copies(example[TOPIC], n, example[PARTITION], example[OFFSET])
    names = ["records_read", "duplicates_removed"]
    names += ["records_null_key"] if job.null_keys == "drop" else []
    return timed, {name: counts[name] for name in names}


def distinct_records(timed: DataFrame) -> DataFrame:
    """Each record once, with its place in the processing order (the watermark's input)."""
    return timed.where(~F.col(DUPLICATE)).withColumn(POSITION, record_position())


def keyed_records(job: StreamJob, distinct: DataFrame) -> DataFrame:
    """The records that reach ``keyBy``: all of them, or, with ``null_keys="drop"``, those
    whose key has no null (the others were refused when the job does not drop them)."""
    return distinct if job.null_keys == "refuse" else distinct.where(~job.null_key())


def sorts_nothing(job: StreamJob) -> bool:
    """Does the job run on first offsets (:mod:`first_offsets`), without sorting the records
    by offset? Aligned event-time windows fired by the watermark's periodic ticks alone, with
    D1 = 0 and no enrichment; idleness of one topic (across topics it is refused) unless
    the archive has too many words to read again (:func:`first_offsets.idle_periods`)."""
    trigger = job.trigger
    return (
        job.processing_time.min_gap_ms == 0
        and job.window.domain == "event"
        and not job.window.merges
        and isinstance(trigger, EventTimeTrigger)
        and trigger.allowed_lateness_ms == 0
        and job.watermark.emission == "periodic"
        and not (job.watermark.detects_idleness and len(job.topics) > 1)
        and not job.lookups
        and not job.derived
        and job.null_keys == "refuse"
    )


def _per_status_by_offsets(
    spark: SparkSession, job: StreamJob, bounds: Mapping[str, int]
) -> tuple[dict[str, int], DataFrame, DataFrame, dict[str, int], DataFrame, list] | None:
    """:func:`sorts_nothing`'s jobs: the counts, the records each once (or with their copies
    marked), the per-window aggregate by status (:func:`window_operator.by_status`'s, kept),
    its status counts, the watermark's reaches and what is kept for them. None where the job
    detects idleness and too many words would be read again for its idle periods
    (:func:`first_offsets.idle_periods`): the sorted path's.

    The value checks are not observed on every record: the signs of a problem are read from
    the offsets' aggregate (null or negative partitions and offsets, null event times, an
    empty topic) and from the windows (a null key), and only then does a pass count and name
    them (:meth:`records.RecordChecks.refuse_problems`).

    Copied offsets are counted at half weight where each is archived exactly twice; a
    window whose copies do not pair up (they differ, or a record was marked by a key
    collision) sends every copy to be grouped by offset, which names differing ones."""
    records, read = job_records(spark, job, archive_time=True)
    bound = {t.name: bounds.get(t.name, job.watermark.out_of_orderness_ms) for t in job.topics}
    buckets = first_offsets.Buckets(
        job.window, bound, job.watermark.interval_ms, job.processing_time.min_delay_ms
    )
    idleness = job.watermark.detects_idleness
    with stage("processing time"):
        grouped = first_offsets.group_records(records, buckets, highest=idleness)
        offsets = first_offsets.offset_words(grouped)
        topics_read = {topic for topic, _ in offsets.partitions}
        if offsets.suspect or topics_read != {t.name for t in job.topics}:
            _refuse_problems(read, [grouped])
        idle = None
        if idleness:
            interval, timeout = job.watermark.interval_ms, job.watermark.idle_timeout_ms
            delay = job.processing_time.min_delay_ms
            idle = first_offsets.idle_periods(
                grouped, records, offsets.partitions, interval, timeout, delay
            )
            if idle is None:
                grouped.unpersist()
                return None
    counts, partitions = offsets.counts, offsets.partitions
    with stage("watermark"):
        # copies share their record's windows and first offsets: no deduplication
        panes = first_offsets.pane_windows(grouped, job.window)
        targets = watermark_targets(panes, job.trigger).collect()
        minima = first_offsets.bucket_minima(grouped)
        reaches = first_offsets.watermark_reaches(
            minima, buckets, partitions, [row[TARGET] for row in targets], job.watermark, idle
        )
        drops = first_offsets.drop_offsets(minima, buckets, records, partitions, reaches)
    # grouped is released with the rest: released earlier, the caches read from it could be
    # recomputed from every record (Spark recompiles a cache whose source is released unless
    # it sees every block of it loaded)
    kept = [grouped, panes, reaches, drops]

    def windows_of(
        distinct: DataFrame, kept_too: list[DataFrame]
    ) -> tuple[DataFrame, first_offsets.StatusCounts]:
        per_status = first_offsets.per_status(
            distinct,
            panes,
            drops,
            reaches,
            partitions,
            job.window,
            job.trigger,
            job.keys,
            job.aggregations,
        ).persist(StorageLevel.MEMORY_AND_DISK_DESER)
        with refusing_overflow(long_sums(job, records)), stage("windows and triggers"):
            counted = first_offsets.status_counts(per_status, job.keys)
        if counted.null_key:
            _refuse_problems(read, [*kept, *kept_too, per_status])
        return per_status, counted

    if not counts["duplicates_removed"]:
        per_status, counted = windows_of(records, [])
        return counts, records, per_status, counted.statuses, reaches, kept
    if offsets.paired and first_offsets.weighs_copies(records, job.aggregations):
        marked, kept_copies = first_offsets.marked_copies(records, offsets.words)
        per_status, counted = windows_of(marked, kept_copies)
        if not counted.unpaired:
            return counts, marked, per_status, counted.statuses, reaches, [*kept, *kept_copies]
        for df in (per_status, *kept_copies):  # differing copies, or a key collision
            df.unpersist()
    try:
        with stage("processing time"):
            distinct, kept_copies = first_offsets.distinct_records(records, offsets.words)
    except BadArchiveError:
        for df in kept:
            df.unpersist()
        raise
    per_status, counted = windows_of(distinct, kept_copies)
    return counts, distinct, per_status, counted.statuses, reaches, [*kept, *kept_copies]


def _refuse_problems(read: Sequence[RecordChecks], kept: Sequence[DataFrame]) -> None:
    """Each topic's value problems counted and named (:meth:`RecordChecks.refuse_problems`),
    releasing ``kept`` before the error."""
    try:
        for checks in read:
            checks.refuse_problems()
    except BadArchiveError:
        for df in kept:
            df.unpersist()
        raise


def backfill(spark: SparkSession, job: StreamJob, *, always_sort: bool = False) -> Backfill:
    """Run the model over the job's archived topics.

    Actions on the data, each a named stage (:mod:`stages`): the record counts (which compute
    and keep the timed records, and check every record's values as they go: no validation pass
    of its own), the watermark (computed and kept), the status counts (which compute and keep
    the per-window aggregate the emission log and the dropped records are read from), then
    whatever the caller does with the results. The jobs of :func:`sorts_nothing` never sort
    the records by offset, unless ``always_sort`` (the tests compare both paths).
    """
    bounds = {
        t.name: t.out_of_orderness_ms for t in job.topics if t.out_of_orderness_ms is not None
    }
    event_time = job.window.domain == "event"
    enriched = reaches = classified = per_status = counted = by_offsets = None
    if sorts_nothing(job) and not always_sort:
        by_offsets = _per_status_by_offsets(spark, job, bounds)
    if by_offsets is not None:
        counts, kept, per_status, counted, reaches, cached = by_offsets
    else:
        timed, counts = timed_records(spark, job)
        distinct = distinct_records(timed)
        # Only enriched records are windowed, but the watermark comes from every record: in
        # Flink those an inner lookup removed had passed the source's watermark generator.
        keyed = keyed_records(job, distinct)
        if job.lookups or job.derived:
            enriched = enrich(keyed, job.lookups, job.derived).persist(
                StorageLevel.MEMORY_AND_DISK_DESER
            )
        kept = keyed if enriched is None else enriched
        cached = [df for df in (timed, enriched) if df is not None]
        if job.window.merges:
            timeline = None
            if event_time:
                timeline = watermark_timeline(distinct, job.watermark, bounds)
            fired, dropped, statuses, replayed = session_firings(
                kept, job.keys, job.aggregations, job.window, job.trigger, timeline
            )
            cached.append(replayed)
        else:
            windowed = job.window.assign(kept)
            if event_time:
                targets = watermark_targets(windowed, job.trigger)
                with stage("watermark"):
                    reaches = watermark_reaches(distinct, targets, job.watermark, bounds)
                cached.append(reaches)
            classified = classify(windowed, job.trigger, reaches)
    if classified is not None:
        per_status = by_status(classified, job.keys, job.aggregations, job.trigger)
    if per_status is not None:
        if not per_status.is_cached:
            per_status = per_status.persist(StorageLevel.MEMORY_AND_DISK_DESER)
        fired = firings(classified, job.trigger, job.keys, job.aggregations, event_time, per_status)
        dropped = dropped_records(per_status, job.keys)
        statuses = status_counts(per_status)
        cached.append(per_status)
    dropped = dropped.select(
        *job.keys,
        F.timestamp_millis(WINDOW_START).alias("window_start"),
        F.timestamp_millis(WINDOW_END).alias("window_end"),
        "dropped_count",
    )
    summing_longs = long_sums(job, kept)
    # the session replay sums as it classifies
    with refusing_overflow(summing_longs), stage("windows and triggers"):
        if counted is None:
            counted = {row[STATUS]: row["n"] for row in statuses.collect()}
    stats = {**counts, **{f"records_{s}": counted.get(s, 0) for s in STATUSES}}
    # Sessions merge: two of a key's sessions can fire at any instant, whatever the timers.
    shared = None if job.window.merges else shared_instants(spark, reaches, counted)
    emissions = emission_log(fired, job.keys, job.features, job.operator_delay_ms, shared)
    if job.lookups:  # removed by an inner lookup: no state at their lookup time
        inner = any(lookup.how == "inner" for lookup in job.lookups)
        keyed_count = counts["records_read"] - counts["duplicates_removed"]
        keyed_count -= counts.get("records_null_key", 0)
        stats["records_without_state"] = keyed_count - enriched.count() if inner else 0
    return Backfill(
        emissions=emissions,
        dropped=dropped,
        stats=stats,
        cached=cached,
        long_sums=summing_longs,
    )
