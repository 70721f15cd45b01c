"""A stream view whose job is the team's Flink SQL script, named in the view's tags.

The view keeps what Feast needs to serve it (entities, the schema of its features, the
``KafkaSource`` with its archive) and :func:`sql_tags` names the script; the job (window,
functions, watermark, idleness) is the script's, mapped by
:func:`~feast_stream_backfill.flink_sql.job_from_sql`. What the two would both declare must
agree, and the tags that would restate the script are refused: a second declaration of the
job is one that drifts from the script in production.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from feast import StreamFeatureView
from pyspark.sql import SparkSession

from feast_stream_backfill.enrichment import StateSource
from feast_stream_backfill.feast_plugin.conventions import (
    MILLISECONDS,
    PREFIX,
    milliseconds,
    resolve_path,
)
from feast_stream_backfill.feast_plugin.state_tags import grouped, source_from, source_tags
from feast_stream_backfill.feast_plugin.topics import archived_topics, job_sources, topic_name
from feast_stream_backfill.flink_sql import job_from_sql
from feast_stream_backfill.job import StreamJob

SQL = PREFIX + "sql"
SQL_INSERT = PREFIX + "sql_insert"
#: A lookup table's history: ``stream_backfill.sql_state.<table name>.*``.
SQL_STATE = PREFIX + "sql_state."
#: The options a script declares itself (its window, trigger and watermark): as tags on a
#: SQL view they would restate it.
DECLARED_BY_SQL = tuple(
    PREFIX + name
    for name in (
        "allowed_lateness" + MILLISECONDS,
        "watermark_interval" + MILLISECONDS,
        "watermark_emission",
        "watermark_combine",
        "window_domain",
        "trigger",
        "idle_timeout" + MILLISECONDS,
        "session_gap" + MILLISECONDS,
    )
)
#: Tag families a script declares otherwise (enrichment lookups, derived columns: its lookup
#: joins and views do, ``sql_tags(states=...)`` says where their tables' history is): a SQL
#: view with them is refused rather than half mapped. The archives of a script's other Kafka
#: tables (read through a ``UNION ALL``) come with ``topics_tags``, as for any view.
NOT_IN_SQL = (PREFIX + "lookup.", PREFIX + "derived.")


def sql_tags(
    script: str | Path, insert: str | None = None, states: Iterable[StateSource] = ()
) -> dict[str, str]:
    """Tags for a ``StreamFeatureView`` whose job is the Flink SQL script at ``script``
    (relative to the feature repo, like Feast's source paths); ``insert`` names the target
    table of the ``INSERT`` to reproduce where the script has several; ``states``: the
    history of each table the script's lookup joins read, each named as the script names
    the table (Delta paths, relative to the feature repo or not)."""
    tags = {SQL: str(script), **({SQL_INSERT: insert} if insert else {})}
    for source in states:
        tags.update(source_tags(f"{SQL_STATE}{source.name}.", source))
    return tags


def is_sql_view(view: object) -> bool:
    return isinstance(view, StreamFeatureView) and SQL in view.tags


def sql_feature_names(view: StreamFeatureView) -> list[str]:
    """The view's features: its schema's columns other than its join keys (which Feast's
    registry may list among them)."""
    keys = {c.name for c in view.entity_columns}
    return [f.name for f in view.features if f.name not in keys]


def sql_job(
    view: StreamFeatureView, repo_path: Path | str | None, spark: SparkSession | None
) -> StreamJob:
    """The job the view's script runs over the view's archive. Without ``spark`` the archive
    is not read (``feast apply``, ``plan``): the check of its order that SQL's periodic
    watermarks need waits for the backfill, which passes a session."""
    where = f"stream feature view {view.name!r}"
    _refuse_restatements(view, where)
    path = resolve_path(view.tags[SQL], repo_path)
    try:
        script = Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"{where}: cannot read its Flink SQL script {path}: {exc}") from exc
    source = view.stream_source
    declared_bound = milliseconds(source.kafka_options.watermark_delay_threshold)
    topics = archived_topics(view, repo_path, declared_bound)
    states = {
        name: source_from(name, options, repo_path, f"{where}: tags {SQL_STATE}{name}.*")
        for name, options in grouped(view.tags, SQL_STATE).items()
    }
    try:
        job = job_from_sql(
            spark, script, {t.name: t for t in topics}, view.tags.get(SQL_INSERT), states
        )
    except ValueError as exc:  # UnsupportedSqlError names the construct, line and column
        raise ValueError(f"{where}: Flink SQL script {path}: {exc}") from exc
    _check_agreement(view, job, where)
    return job


def _refuse_restatements(view: StreamFeatureView, where: str) -> None:
    if view.aggregations:
        raise ValueError(
            f"{where}: declares `aggregations` and a Flink SQL script; the script's are the "
            "job's: remove `aggregations`"
        )
    tags = {**view.stream_source.tags, **view.tags}
    restated = sorted(k for k in tags if k in DECLARED_BY_SQL or k.startswith(NOT_IN_SQL))
    if restated:
        raise ValueError(
            f"{where}: tag(s) {restated} restate or extend what its Flink SQL script declares; "
            "declare them in the script (or declare the job with Feast objects instead)"
        )


def _check_agreement(view: StreamFeatureView, job: StreamJob, where: str) -> None:
    """What both the view and the script declare is the same."""
    keys = sorted(c.name for c in view.entity_columns)
    if keys != sorted(job.keys):
        raise ValueError(
            f"{where}: its entities' join keys {keys} are not the script's keys (GROUP BY or "
            f"PARTITION BY) {sorted(job.keys)}"
        )
    features = sorted(sql_feature_names(view))
    produced = sorted(a.name for a in job.aggregations)
    if features != produced:
        raise ValueError(
            f"{where}: its schema's features {features} are not the columns the script's "
            f"INSERT aggregates {produced}"
        )
    watermarked = job.window.domain == "event"  # an unbounded GROUP BY reads no watermark
    read = {t.name: t for t in job.topics}
    for source in job_sources(view):
        topic = read.get(topic_name(source))
        if topic is None:
            raise ValueError(
                f"{where}: its KafkaSource {source.name!r} reads topic {topic_name(source)!r}, "
                f"which its script's INSERT does not read (it reads {sorted(read)})"
            )
        declared_bound_ms = milliseconds(source.kafka_options.watermark_delay_threshold)
        sql_bound_ms = job.out_of_orderness(topic.name) + 1  # SQL's B is the model's B + 1 ms
        if watermarked and declared_bound_ms and declared_bound_ms != sql_bound_ms:
            raise ValueError(
                f"{where}: its KafkaSource {source.name!r}'s watermark_delay_threshold "
                f"({declared_bound_ms} ms) is not the script's WATERMARK bound ({sql_bound_ms} "
                "ms)"
            )
        if source.timestamp_field != topic.timestamp_col:
            raise ValueError(
                f"{where}: its KafkaSource {source.name!r}'s timestamp_field "
                f"{source.timestamp_field!r} is not the script's "
                f"{'watermark' if watermarked else 'time'} column {topic.timestamp_col!r}"
            )
