"""A Flink job declared with ordinary Feast objects, read back as a :class:`StreamJob`.

What Feast already models is taken from Feast: the archive is the ``KafkaSource``'s
``batch_source`` (a Delta ``FileSource``), the out-of-orderness bound B its
``watermark_delay_threshold``, the window and functions the ``StreamFeatureView``'s
``aggregations``, the key its entities. What Feast has no field for (processing-time delays,
watermark interval and emission, allowed lateness, operator delay, partition and offset
columns, enrichment lookups and derived columns) travels in tags, which survive ``feast
apply`` and the registry: no side files.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from feast import FeatureView, FileSource, PushSource, StreamFeatureView
from feast.data_format import DeltaFormat, ParquetFormat
from feast.feature_view import DUMMY_ENTITY_NAME
from pyspark.sql import SparkSession

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.backfill import StreamJob
from feast_stream_backfill.enrichment import Lookup
from feast_stream_backfill.feast_plugin.conventions import (
    MILLISECONDS,
    PREFIX,
    milliseconds,
)
from feast_stream_backfill.feast_plugin.sql_views import is_sql_view, sql_feature_names, sql_job
from feast_stream_backfill.feast_plugin.state_tags import grouped, source_from, source_tags, split
from feast_stream_backfill.feast_plugin.topics import archived_topics
from feast_stream_backfill.feast_plugin.transformations import unsupported_udf, view_udf
from feast_stream_backfill.processing_time import ProcessingTimeModel
from feast_stream_backfill.triggers import (
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeTrigger,
)
from feast_stream_backfill.watermarks import WatermarkStrategy
from feast_stream_backfill.windows import SessionWindows, SlidingWindows, TumblingWindows


def _ms(duration: timedelta) -> str:
    return str(milliseconds(duration))


def backfill_tags(
    *,
    allowed_lateness: timedelta = timedelta(0),
    watermark_interval: timedelta = timedelta(milliseconds=200),
    watermark_emission: str = "periodic",
    min_gap: timedelta = timedelta(0),
    min_delay: timedelta = timedelta(0),
    operator_delay: timedelta = timedelta(0),
    window_domain: str = "event",
    trigger: str = "default",
    watermark_combine: str = "min",
    idle_timeout: timedelta | None = None,
    session_gap: timedelta | None = None,
    null_keys: str = "refuse",
) -> dict[str, str]:
    """Tags for a ``StreamFeatureView``: the job options Feast has no field for.

    ``window_domain``: "event" or "processing" time windows; ``trigger``: "default" (Flink's
    default for the domain) or "per_record" (``CountTrigger.of(1)``); ``watermark_combine``:
    "min" across partitions (Flink) or "max" (aligned readers: one running max);
    ``idle_timeout``: ``withIdleness``; ``session_gap``: session windows with that gap instead
    of the aggregations' ``time_window``; ``null_keys``: "refuse" an archive with a null key
    (Flink's ``keyBy`` fails the job) or "drop" those records (a ``filter`` before ``keyBy``),
    counted in the stats as ``records_null_key``.
    """
    optional = {"idle_timeout_ms": idle_timeout, "session_gap_ms": session_gap}
    return {
        **{PREFIX + name: _ms(value) for name, value in optional.items() if value is not None},
        PREFIX + "window_domain": window_domain,
        PREFIX + "trigger": trigger,
        PREFIX + "watermark_combine": watermark_combine,
        PREFIX + "allowed_lateness_ms": _ms(allowed_lateness),
        PREFIX + "watermark_interval_ms": _ms(watermark_interval),
        PREFIX + "watermark_emission": watermark_emission,
        PREFIX + "min_gap_ms": _ms(min_gap),
        PREFIX + "min_delay_ms": _ms(min_delay),
        PREFIX + "operator_delay_ms": _ms(operator_delay),
        PREFIX + "null_keys": null_keys,
    }


def archive_tags(
    *, partition_column: str = "partition", offset_column: str = "offset"
) -> dict[str, str]:
    """Tags for the archive's ``FileSource``: where Kafka's partition and offset are."""
    return {PREFIX + "partition_column": partition_column, PREFIX + "offset_column": offset_column}


LOOKUP, DERIVED = PREFIX + "lookup.", PREFIX + "derived."


def lookup_tags(*lookups: Lookup) -> dict[str, str]:
    """Tags for a ``StreamFeatureView`` (or its ``KafkaSource``): enrichment lookups, applied
    in the order given, each as ``stream_backfill.lookup.<state table name>.*``. The state
    tables must be Delta paths; relative ones are relative to the feature repo."""
    tags: dict[str, str] = {}
    for position, lookup in enumerate(lookups):
        source = lookup.source
        base = f"{LOOKUP}{source.name}."
        if base + "position" in tags:
            raise ValueError(f"{source.where}: two lookups of one state table need two names")
        tags[base + "position"] = str(position)
        tags.update(source_tags(base, source))
        tags[base + "on"] = ",".join(f"{r}={s}" for r, s in lookup.on.items())
        tags[base + "attributes"] = ",".join(lookup.attributes)
        tags[base + "time"] = lookup.time
        tags[base + "delay_ms"] = str(lookup.delay_ms)
        tags[base + "how"] = lookup.how
        tags[base + "prefix"] = lookup.prefix
    return tags


def derived_tags(derived: Mapping[str, str]) -> dict[str, str]:
    """Tags for derived columns: ``{name: Spark SQL expression}`` evaluated after the lookups
    (``{"fee": "amount * fee_rate"}``), as ``stream_backfill.derived.<name>``."""
    return {DERIVED + name: expression for name, expression in derived.items()}


def _lookups(tags: Mapping[str, str], repo_path: Path | str | None) -> list[Lookup]:
    declared = grouped(tags, LOOKUP)
    lookups = []
    for name, options in sorted(declared.items(), key=lambda kv: int(kv[1].get("position", 0))):
        source = source_from(name, options, repo_path, f"lookup tags {LOOKUP}{name}.*")
        pairs = [p.split("=", 1) for p in options.get("on", "").split(",") if p]
        lookups.append(
            Lookup(
                source,
                split(options.get("attributes", "")),
                on=dict(pairs) or None,
                time=options.get("time", "processing"),  # type: ignore[arg-type]
                delay_ms=int(options.get("delay_ms", "0")),
                how=options.get("how", "left"),  # type: ignore[arg-type]
                prefix=options.get("prefix", ""),
            )
        )
    return lookups


def _derived(tags: Mapping[str, str]) -> dict[str, str]:
    return {k[len(DERIVED) :]: v for k, v in sorted(tags.items()) if k.startswith(DERIVED)}


def feature_names(view: StreamFeatureView) -> list[str]:
    if is_sql_view(view):  # the script's aggregates, which the schema's features are
        return sql_feature_names(view)
    return [a.resolved_name(a.time_window) for a in view.aggregations]


def _window(
    view: StreamFeatureView, where: str, session_gap_ms: int, domain: str
) -> TumblingWindows | SlidingWindows | SessionWindows:
    if session_gap_ms:
        return SessionWindows(session_gap_ms, domain=domain)  # type: ignore[arg-type]
    windows = {(a.time_window, a.slide_interval or a.time_window) for a in view.aggregations}
    if len(windows) != 1:
        raise ValueError(f"{where}: all aggregations of one job share one window, got {windows}")
    size, slide = windows.pop()
    if not size:
        raise ValueError(f"{where}: aggregations need a time_window (or a session_gap tag)")
    size_ms, slide_ms = (round(d.total_seconds() * 1000) for d in (size, slide))
    if slide_ms == size_ms:
        return TumblingWindows(size_ms, domain=domain)  # type: ignore[arg-type]
    return SlidingWindows(size_ms, slide_ms, domain=domain)  # type: ignore[arg-type]


def _trigger(
    name: str, domain: str, lateness_ms: int
) -> EventTimeTrigger | ProcessingTimeTrigger | PerRecordTrigger:
    if name == "per_record":
        return PerRecordTrigger(lateness_ms)
    if name != "default":
        raise ValueError(f"trigger must be 'default' or 'per_record', got {name!r}")
    return EventTimeTrigger(lateness_ms) if domain == "event" else ProcessingTimeTrigger()


def is_windowed(view: FeatureView) -> bool:
    """A stream view with aggregations or a Flink SQL script is a Flink job over its archive;
    any other view follows Feast's batch rule over its batch source (precomputed rows, a push
    source's table)."""
    return isinstance(view, StreamFeatureView) and (bool(view.aggregations) or is_sql_view(view))


def unsupported(view: FeatureView) -> str | None:
    """Why this plugin cannot serve the view (a sentence naming it), or None."""
    stream = isinstance(view, StreamFeatureView)
    where = f"{'stream' if stream else 'batch'} feature view {view.name!r}"
    reason = _unsupported_source(view) or (
        _unsupported_stream(view) if stream else _unsupported_batch(view)
    )
    return None if reason is None else f"{where} {reason}"


def _unsupported_source(view: FeatureView) -> str | None:
    if is_windowed(view):  # each topic's archive is judged where it is read: topics.py
        return None
    source = view.batch_source
    if isinstance(source, FileSource) and isinstance(
        source.file_format, DeltaFormat | ParquetFormat
    ):
        return None
    return (
        f"has the batch source {type(source).__name__} "
        f"{getattr(source, 'file_format', None)!r}; this plugin reads a Delta or parquet FileSource"
    )


def _unsupported_batch(view: FeatureView) -> str | None:
    udf = getattr(view, "udf", None) or getattr(view, "feature_transformation", None)
    if udf or getattr(view, "aggregations", None):
        what = "a udf (feature transformation)" if udf else "aggregations"
        return f"has {what}, which feast-stream-backfill does not run; precompute its source"
    return None


def _unsupported_stream(view: StreamFeatureView) -> str | None:
    push = isinstance(view.stream_source, PushSource)
    if push and view_udf(view) is not None:
        return "has a udf on a PushSource, which Feast never applies to pushed rows"
    if push and view.aggregations:
        return (
            "has aggregations over a PushSource: pushed rows have no Kafka partition and "
            "offset, so there is no Flink job to model; aggregate them before pushing"
        )
    if view.aggregations and view.entities == [DUMMY_ENTITY_NAME]:
        return "has aggregations but no entities (Flink's windowAll), which is not modelled"
    return unsupported_udf(view)


def check_supported(views: Iterable[FeatureView]) -> None:
    """One error naming every view this plugin cannot serve, before any is computed."""
    reasons = [r for r in map(unsupported, views) if r]
    if reasons:
        raise NotImplementedError("; ".join(reasons))


def stream_job(
    view: StreamFeatureView,
    repo_path: Path | str | None = None,
    spark: SparkSession | None = None,
) -> StreamJob:
    """The job a ``StreamFeatureView`` declares; a ``ValueError`` says what is missing.

    A view naming a Flink SQL script (:func:`sql_tags`) runs the script's job, with the
    deployment's processing-time options from its tags; ``spark`` is then needed before a
    backfill (:func:`~feast_stream_backfill.feast_plugin.sql_views.sql_job`).
    """
    where = f"stream feature view {view.name!r}"
    check_supported([view])
    source = view.stream_source
    tags = {**getattr(view.batch_source, "tags", {}), **source.tags, **view.tags}

    def option(name: str, default: str) -> str:
        return tags.get(PREFIX + name, default)

    def ms(name: str, default: int = 0) -> int:
        return int(option(name + MILLISECONDS, str(default)))

    if is_sql_view(view):
        return replace(
            sql_job(view, repo_path, spark),
            processing_time=ProcessingTimeModel(ms("min_gap"), ms("min_delay")),
            operator_delay_ms=ms("operator_delay"),
            null_keys=option("null_keys", "refuse"),  # type: ignore[arg-type]
        )
    if not view.aggregations:
        raise ValueError(f"{where}: declare the window with `aggregations`")

    bound_ms = milliseconds(source.kafka_options.watermark_delay_threshold)
    idle_timeout = ms("idle_timeout") or None
    return StreamJob(
        topics=archived_topics(view, repo_path, bound_ms),
        keys=[e.name for e in view.entity_columns],
        window=_window(view, where, ms("session_gap"), option("window_domain", "event")),
        aggregations=[
            Aggregation(a.column, a.function, name)
            for a, name in zip(view.aggregations, feature_names(view), strict=True)
        ],
        trigger=_trigger(
            option("trigger", "default"), option("window_domain", "event"), ms("allowed_lateness")
        ),
        watermark=WatermarkStrategy(
            out_of_orderness_ms=bound_ms,
            interval_ms=ms("watermark_interval", 200),
            emission=option("watermark_emission", "periodic"),  # type: ignore[arg-type]
            combine=option("watermark_combine", "min"),  # type: ignore[arg-type]
            idle_timeout_ms=idle_timeout,
        ),
        processing_time=ProcessingTimeModel(ms("min_gap"), ms("min_delay")),
        operator_delay_ms=ms("operator_delay"),
        lookups=_lookups(tags, repo_path),
        derived=_derived(tags),
        null_keys=option("null_keys", "refuse"),  # type: ignore[arg-type]
    )
