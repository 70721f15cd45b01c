"""The archived topics a stream view's job reads: its ``KafkaSource``, and more in its tags.

Feast gives a ``StreamFeatureView`` one source. A Flink job that reads several topics (their
union before ``keyBy``, each topic with its own watermark bound) is declared with the view's
``source`` as its first topic and :func:`topics_tags` naming the others: each other
``KafkaSource`` travels whole in the view's tags (Feast's own proto, as JSON), with its topic,
its ``watermark_delay_threshold`` (that topic's B) and its ``batch_source`` (its archive).
The view then carries its whole job through ``feast apply`` and any registry. Naming
registered sources instead would leave ``feast apply`` unable to check them: Feast hands a
compute engine the views being applied, not the registry they are applied to.
"""

from __future__ import annotations

import re
from pathlib import Path

from feast import FileSource, KafkaSource, StreamFeatureView
from feast.data_format import DeltaFormat
from feast.data_source import DataSource
from feast.protos.feast.core.DataSource_pb2 import DataSource as DataSourceProto
from google.protobuf import json_format

from feast_stream_backfill.feast_plugin.conventions import PREFIX, milliseconds, resolve_path
from feast_stream_backfill.feast_plugin.transformations import record_transform
from feast_stream_backfill.records import ArchivedTopic

TOPIC = PREFIX + "topic."
#: The options read per topic (its archive's tags, then its KafkaSource's, then the view's);
#: every other option is the job's and is read from the view's first source and the view.
TOPIC_OPTIONS = ("partition_column", "offset_column")


def topics_tags(*sources: KafkaSource) -> dict[str, str]:
    """Tags for a ``StreamFeatureView`` whose job reads more topics than its ``source``: each
    ``KafkaSource`` (with its ``batch_source``, the archive) as ``stream_backfill.topic.<name>``.
    """
    tags = {}
    for source in sources:
        name = getattr(source, "name", repr(source))
        if not isinstance(source, KafkaSource) or source.batch_source is None:
            raise ValueError(
                f"topics_tags: {name!r} is not a KafkaSource with a batch_source (its archive)"
            )
        if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
            raise ValueError(f"topics_tags: a KafkaSource's name is [A-Za-z0-9_-]+, got {name!r}")
        tags[TOPIC + name] = json_format.MessageToJson(_declaration(source), indent=None)
    return tags


def _declaration(source: KafkaSource) -> DataSourceProto:
    """The source's proto without Feast's creation times, which change at every import of the
    repo: the tag, and so the view, stays equal while the declaration does."""
    proto = source.to_proto()
    proto.ClearField("meta")
    proto.batch_source.ClearField("meta")
    return proto


def job_sources(view: StreamFeatureView) -> list[KafkaSource]:
    """The view's ``KafkaSource``, then those of its :func:`topics_tags` by name; a
    ``ValueError`` names a tag that does not hold one."""
    others = []
    for key, text in sorted(view.tags.items()):
        if not key.startswith(TOPIC):
            continue
        try:
            source = DataSource.from_proto(json_format.Parse(text, DataSourceProto()))
        except Exception as exc:  # protobuf's ParseError, Feast's errors of an unknown type
            raise ValueError(
                f"tag {key}: not a KafkaSource declaration (write it with topics_tags): {exc}"
            ) from exc
        if not isinstance(source, KafkaSource) or source.batch_source is None:
            raise ValueError(
                f"tag {key}: holds {type(source).__name__} {source.name!r}, not a KafkaSource "
                "with a batch_source (its archive)"
            )
        others.append(source)
    return [view.stream_source, *others]


def topic_name(source: KafkaSource) -> str:
    return getattr(source.kafka_options, "topic", None) or source.name


def topic_tags(view: StreamFeatureView, source: DataSource) -> dict[str, str]:
    """The tags a topic's options are read from: its archive's, its source's, the view's."""
    return {**getattr(source.batch_source, "tags", {}), **source.tags, **view.tags}


def archived_topics(
    view: StreamFeatureView, repo_path: Path | str | None, job_bound_ms: int
) -> list[ArchivedTopic]:
    """Each topic the view's job reads, as the core reads it. A topic whose
    ``watermark_delay_threshold`` differs from the first one's (the job's B) carries its own."""
    where = f"stream feature view {view.name!r}"
    topics = [_archived_topic(view, s, repo_path, job_bound_ms) for s in job_sources(view)]
    names = [topic.name for topic in topics]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"{where}: topic(s) {repeated} declared twice (its source and topics_tags, or two "
            "KafkaSources of one topic): a job reads each topic once"
        )
    return topics


def _archived_topic(
    view: StreamFeatureView, source: DataSource, repo_path: Path | str | None, job_bound_ms: int
) -> ArchivedTopic:
    where = f"stream feature view {view.name!r}"
    archive = getattr(source, "batch_source", None)
    if not isinstance(archive, FileSource) or not isinstance(archive.file_format, DeltaFormat):
        raise ValueError(
            f"{where}: source {getattr(source, 'name', None)!r} needs a batch_source, a Delta "
            f"FileSource (the archive); got {type(archive).__name__}"
        )
    tags = topic_tags(view, source)
    partition = tags.get(PREFIX + "partition_column", "partition")
    offset = tags.get(PREFIX + "offset_column", "offset")
    timestamp = archive.timestamp_field or source.timestamp_field
    bound = milliseconds(source.kafka_options.watermark_delay_threshold)
    return ArchivedTopic(
        name=topic_name(source),
        path=resolve_path(archive.path, repo_path),
        partition_col=partition,
        offset_col=offset,
        timestamp_col=timestamp,
        out_of_orderness_ms=None if bound == job_bound_ms else bound,
        transform=record_transform(view, [partition, offset, timestamp], where),
    )
