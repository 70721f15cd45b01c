"""``feast apply``'s checks of the plugin's stream feature views, every problem in one error.

Without them a mistake in a job's declaration (a tag that does not parse, an archive without a
column the job reads, a function the model does not have) surfaces only at materialize or
training time, one at a time. ``StreamBackfillComputeEngine.update`` runs :func:`check_views`
before the registry is committed, and ``materialize`` again before anything is written (the
``feast apply`` command skips the engine with a sqlite online store). Tables are checked by
their schemas, read through Spark (a Delta table's log, another archive's reader; see
``_Schemas``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import timedelta
from difflib import get_close_matches
from pathlib import Path

from delta.tables import DeltaTable
from feast import StreamFeatureView
from feast.repo_config import RepoConfig
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType, TimestampType

from feast_stream_backfill.aggregations import FUNCTIONS
from feast_stream_backfill.backfill import StreamJob
from feast_stream_backfill.enrichment import CdcLog, DeltaHistory, ScdTable, StateSource
from feast_stream_backfill.errors import BadArchiveError
from feast_stream_backfill.feast_plugin.archive_sources import SINK_OPTIONS
from feast_stream_backfill.feast_plugin.definitions import (
    DERIVED,
    LOOKUP,
    MILLISECONDS,
    PREFIX,
    archive_tags,
    backfill_tags,
    is_windowed,
    stream_job,
    unsupported,
)
from feast_stream_backfill.feast_plugin.observed_writes import calibration_tags
from feast_stream_backfill.feast_plugin.sql_views import is_sql_view, sql_tags
from feast_stream_backfill.feast_plugin.topics import (
    TOPIC,
    TOPIC_OPTIONS,
    job_sources,
    own_tags,
    topic_name,
)
from feast_stream_backfill.feast_plugin.transformations import view_udf
from feast_stream_backfill.feast_plugin.view_rows import spark_for
from feast_stream_backfill.records import ArchivedTopic

#: The option tags :func:`stream_job` reads with a default, and all it reads (with the optional
#: idle timeout and session gap): any other ``stream_backfill.*`` tag outside
#: :data:`TAG_FAMILIES` is unknown.
_DEFAULTS = {**backfill_tags(), **archive_tags()}
KNOWN_TAGS = frozenset(
    {
        *_DEFAULTS,
        *backfill_tags(idle_timeout=timedelta(1), session_gap=timedelta(1)),
        *SINK_OPTIONS,
        *calibration_tags(""),
        *sql_tags("", "insert"),
    }
)
#: Prefixes of the tags named after a declared thing: a lookup's state table, a derived
#: column, another topic (``stream_backfill.lookup.<table>.*`` and so on).
TAG_FAMILIES = (LOOKUP, DERIVED, TOPIC)


class ApplyCheckError(ValueError):
    """Stream feature views the plugin cannot backfill as declared (one line per problem)."""


def check_views(config: RepoConfig, views: Iterable[object]) -> None:
    """Raise :class:`ApplyCheckError` listing every problem of every stream view among
    ``views`` (by view name), if any: a kind the plugin does not serve, and for windowed ones
    the job's declaration and tables (Spark is started only to read those)."""
    streams = sorted(
        (view for view in views if isinstance(view, StreamFeatureView)), key=lambda v: v.name
    )
    schemas = _Schemas(lambda: spark_for(config))
    by_view = {view.name: list(_problems(view, config.repo_path, schemas)) for view in streams}
    found = [line for lines in by_view.values() for line in lines]
    if found:
        names = ", ".join(repr(name) for name, lines in by_view.items() if lines)
        raise ApplyCheckError(
            f"{len(found)} problem(s) in stream feature view(s) {names} of Feast project "
            f"{config.project!r}:\n" + "\n".join(f"  {p}" for p in found)
        )


def _problems(
    view: StreamFeatureView, repo_path: Path | str | None, schemas: _Schemas
) -> Iterator[str]:
    reason = unsupported(view)
    if reason is not None:
        yield reason
        return
    if not is_windowed(view):  # Feast's batch rule over its batch source: nothing to model
        return
    where = f"stream feature view {view.name!r}"
    source, archive = view.stream_source, view.batch_source
    tags = {**getattr(archive, "tags", {}), **getattr(source, "tags", {}), **view.tags}
    unknown = [k for k in tags if _is_unknown(k)]
    bad_ms = [
        k for k in tags if k in KNOWN_TAGS and k.endswith(MILLISECONDS) and not tags[k].isdigit()
    ]
    not_modelled = [a for a in view.aggregations if a.function not in FUNCTIONS]
    for key in unknown:
        yield f"{where}: unknown tag {key!r} ({_hint(key)})"
    yield from _topic_problems(where, view)
    yield from _sink_tags_elsewhere(where, view)
    for key in bad_ms:
        yield f"{where}: tag {key} = {tags[key]!r} is not a whole number of milliseconds"
    for a in not_modelled:
        yield (
            f"{where}: aggregation {a.name or a.column!r}: function {a.function!r} is not "
            f"supported (the model has {', '.join(FUNCTIONS)})"
        )
    yield from _incoherent(where, tags, view)
    supported = [a for a in view.aggregations if a.function in FUNCTIONS]
    if not supported and not is_sql_view(view):
        return
    # Judge the rest with the problems above replaced by defaults: each is reported once.
    clean = view.__copy__()
    clean.aggregations = supported
    clean.tags = {k: v for k, v in view.tags.items() if k not in bad_ms}
    clean.tags.update({k: _DEFAULTS[k] for k in bad_ms if k in _DEFAULTS})
    try:
        job = stream_job(clean, repo_path)
    except (ValueError, NotImplementedError) as exc:
        message = str(exc)
        yield message if message.startswith(where) else f"{where}: {message}"
        return
    yield from _table_problems(where, job, view, schemas)


def _is_unknown(key: str) -> bool:
    return key.startswith(PREFIX) and key not in KNOWN_TAGS and not key.startswith(TAG_FAMILIES)


def _hint(key: str) -> str:
    close = get_close_matches(key, KNOWN_TAGS, n=1)
    return f"did you mean {close[0]!r}?" if close else "not an option of feast-stream-backfill"


def _topic_problems(where: str, view: StreamFeatureView) -> Iterator[str]:
    """The tags of the topics of ``topics_tags``: only per-topic options are read there."""
    try:
        others = job_sources(view)[1:]
    except ValueError:  # a tag that holds no KafkaSource: stream_job says so below
        return
    for source in others:
        label = f"{where}: topic {topic_name(source)!r} (source {source.name!r})"
        tags = own_tags(source)
        for key in filter(_is_unknown, tags):
            yield f"{label}: unknown tag {key!r} ({_hint(key)})"
        job_options = sorted(k for k in tags if k in KNOWN_TAGS and k not in TOPIC_OPTIONS)
        if job_options:
            yield (
                f"{label}: tag(s) {job_options} are the job's options, read from the view and "
                "its source only; a topic of topics_tags has its own archive_tags, "
                "sink_connector_tags and watermark_delay_threshold"
            )


def _sink_tags_elsewhere(where: str, view: StreamFeatureView) -> Iterator[str]:
    """Sink-connector options are read from the archive's own tags only."""
    try:
        sources = job_sources(view)
    except ValueError:  # stream_job says so
        return
    places = [("the view", view.tags)]
    places += [(f"KafkaSource {source.name!r}", source.tags) for source in sources]
    for place, tags in places:
        found = sorted(key for key in tags if key in SINK_OPTIONS)
        if found:
            yield (
                f"{where}: tag(s) {found} on {place} are read from the archive's tags only: "
                "put sink_connector_tags on the KafkaSource's batch_source"
            )


def _incoherent(where: str, tags: dict[str, str], view: StreamFeatureView) -> Iterator[str]:
    """Options that the job would silently ignore."""
    lateness = tags.get(PREFIX + "allowed_lateness_ms", "0")
    if tags.get(PREFIX + "window_domain") == "processing" and lateness.isdigit() and int(lateness):
        yield (
            f"{where}: allowed lateness ({lateness} ms) is set but the windows are "
            "processing-time ones, which are never late (Flink ignores it)"
        )
    timed = [a.name or a.column for a in view.aggregations if a.time_window or a.slide_interval]
    if PREFIX + "session_gap_ms" in tags and timed:
        yield (
            f"{where}: the session_gap tag makes session windows, so the time_window / "
            f"slide_interval of aggregation(s) {timed} would be ignored: declare one or the other"
        )


def _table_problems(
    where: str, job: StreamJob, view: StreamFeatureView, schemas: _Schemas
) -> Iterator[str]:
    """The archive and state tables exist and have the columns the job reads. A view with a
    udf reads the archive's record columns; its other columns are the udf's business."""
    udf = view_udf(view)
    for topic in job.topics:
        label = f"{where}: archive {topic.path or topic.archive.where}"
        record = [topic.partition_col, topic.offset_col, topic.timestamp_col]
        schema = schemas.topic(topic)
        yield from _missing(label, schema, record if udf else [*record, *job.payload_columns])
        if isinstance(schema, StructType) and topic.timestamp_col in schema.fieldNames():
            kind = schema[topic.timestamp_col].dataType
            if not isinstance(kind, TimestampType):
                yield (
                    f"{label}: event time column {topic.timestamp_col!r} is "
                    f"{kind.simpleString()}, not an instant (TIMESTAMP)"
                )
    if not udf:
        yield from _mismatched_types(where, job, schemas)
    for lookup in job.lookups:
        for path, columns in _state_columns(lookup.source, lookup.attributes):
            label = f"{where}: state table {lookup.source.name!r} ({path})"
            yield from _missing(label, schemas.delta(path), columns)


def _mismatched_types(where: str, job: StreamJob, schemas: _Schemas) -> Iterator[str]:
    """The topics' records are one stream: a key or aggregated column has one type in all."""
    if len(job.topics) < 2:
        return
    for column in job.payload_columns:
        types = {}
        for topic in job.topics:
            schema = schemas.topic(topic)
            if isinstance(schema, StructType) and column in schema.fieldNames():
                types[topic.name] = schema[column].dataType.simpleString()
        if len(set(types.values())) > 1:
            yield (
                f"{where}: column {column!r} has different types across topics "
                f"({', '.join(f'{name}: {kind}' for name, kind in types.items())}); the job "
                "reads the topics as one stream, so it needs one type (cast it in the archive)"
            )


def _state_columns(
    source: StateSource, attributes: Sequence[str]
) -> list[tuple[str, list[str | None]]]:
    """Each Delta table of a state source with the columns its ``versions`` reads there."""
    keyed = [*source.keys, *attributes]
    if isinstance(source, ScdTable):
        return [(source.path, [*keyed, source.valid_from, source.valid_to])]
    if isinstance(source, CdcLog):
        tables = [(source.path, [*keyed, source.time, source.op, source.sequence])]
        return tables + ([(source.snapshot_path, keyed)] if source.snapshot_path else [])
    if isinstance(source, DeltaHistory):
        return [(source.path, keyed)]
    raise TypeError(f"unknown state source {type(source).__name__}")


def _missing(label: str, schema: StructType | str, columns: Sequence[str | None]) -> Iterator[str]:
    if isinstance(schema, str):
        yield f"{label}: {schema}"
        return
    missing = [c for c in dict.fromkeys(columns) if c and c not in schema.fieldNames()]
    if missing:
        yield f"{label}: no column(s) {missing}; it has {schema.fieldNames()}"


class _Schemas:
    """Schemas read through Spark, once per table, or why a table cannot be read: a Delta
    table's from its log, another archive's from its reader (a catalog's or parquet footers'
    schema, no data; JSON's is inferred, a pass over the files, unless declared)."""

    def __init__(self, spark: Callable[[], SparkSession]) -> None:
        self._spark = spark
        self._read: dict[str, StructType | str] = {}

    def delta(self, path: str) -> StructType | str:
        def read(spark: SparkSession) -> StructType | str:
            if not DeltaTable.isDeltaTable(spark, path):
                return "no Delta table there"
            return spark.read.format("delta").load(path).schema

        return self._once(path, read)

    def topic(self, topic: ArchivedTopic) -> StructType | str:
        archive = topic.archive
        if archive is None:
            return self.delta(topic.path)

        def read(spark: SparkSession) -> StructType | str:
            try:
                return archive.read(spark).schema
            except BadArchiveError as exc:
                return str(exc)

        return self._once(archive.where, read)

    def _once(self, key: str, read: Callable[[SparkSession], StructType | str]) -> StructType | str:
        if key not in self._read:
            self._read[key] = read(self._spark())
        return self._read[key]
