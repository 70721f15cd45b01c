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

from feast import KafkaSource, StreamFeatureView
from feast.data_source import DataSource
from feast.protos.feast.core.DataSource_pb2 import DataSource as DataSourceProto
from google.protobuf import json_format

from feast_stream_backfill.feast_plugin.archive_sources import SINK_OPTIONS, archive_of
from feast_stream_backfill.feast_plugin.conventions import PREFIX, milliseconds
from feast_stream_backfill.feast_plugin.transformations import record_transform
from feast_stream_backfill.records import ArchivedTopic

TOPIC = PREFIX + "topic."
#: The tags read per topic: the partition and offset columns (its archive's tags, then its
#: KafkaSource's; for the view's own source, then the view's, as before there were several
#: topics) and a sink connector's options (its archive's). Every other option is the job's,
#: read from the view and its first source.
TOPIC_OPTIONS = (PREFIX + "partition_column", PREFIX + "offset_column", *SINK_OPTIONS)


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
    """The view's ``KafkaSource``, then those of its :func:`topics_tags` in the order of
    their names; a ``ValueError`` names a tag that does not hold one."""
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


def own_tags(source: DataSource) -> dict[str, str]:
    """A topic's own tags: its archive's, then its KafkaSource's."""
    return {**getattr(source.batch_source, "tags", {}), **source.tags}


def archived_topics(
    view: StreamFeatureView, repo_path: Path | str | None, job_bound_ms: int
) -> list[ArchivedTopic]:
    """Each topic the view's job reads, as the core reads it. A topic whose
    ``watermark_delay_threshold`` differs from the first one's (the job's B) carries its own."""
    where = f"stream feature view {view.name!r}"
    first, *others = job_sources(view)
    topics = [
        _archived_topic(view, first, {**own_tags(first), **view.tags}, repo_path, job_bound_ms)
    ]
    topics += [_archived_topic(view, o, own_tags(o), repo_path, job_bound_ms) for o in others]
    names = [topic.name for topic in topics]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"{where}: topic(s) {repeated} declared twice (its source and topics_tags, or two "
            "KafkaSources of one topic): a job reads each topic once"
        )
    return topics


def _archived_topic(
    view: StreamFeatureView,
    source: DataSource,
    tags: dict[str, str],
    repo_path: Path | str | None,
    job_bound_ms: int,
) -> ArchivedTopic:
    where = f"stream feature view {view.name!r}"
    archive = source.batch_source
    try:
        path, layout = archive_of(archive, topic_name(source), repo_path)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc
    partition = tags.get(PREFIX + "partition_column", "partition")
    offset = tags.get(PREFIX + "offset_column", "offset")
    timestamp = archive.timestamp_field or source.timestamp_field
    bound = milliseconds(source.kafka_options.watermark_delay_threshold)
    return ArchivedTopic(
        name=topic_name(source),
        path=path,
        archive=layout,
        partition_col=partition,
        offset_col=offset,
        timestamp_col=timestamp,
        out_of_orderness_ms=None if bound == job_bound_ms else bound,
        transform=record_transform(view, [partition, offset, timestamp], where),
    )
