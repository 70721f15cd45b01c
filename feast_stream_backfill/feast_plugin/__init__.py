"""The thin Feast layer: definitions from Feast objects, an offline store, a compute engine."""

from feast_stream_backfill.feast_plugin.archive_sources import sink_connector_tags
from feast_stream_backfill.feast_plugin.definitions import (
    archive_tags,
    backfill_tags,
    derived_tags,
    lookup_tags,
    stream_job,
)
from feast_stream_backfill.feast_plugin.topics import topics_tags

__all__ = [
    "archive_tags",
    "backfill_tags",
    "derived_tags",
    "lookup_tags",
    "sink_connector_tags",
    "stream_job",
    "topics_tags",
]
