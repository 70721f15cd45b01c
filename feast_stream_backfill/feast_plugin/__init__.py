"""The thin Feast layer: definitions from Feast objects, an offline store, a compute engine."""

import logging
import warnings

from feast_stream_backfill.feast_plugin.archive_sources import sink_connector_tags
from feast_stream_backfill.feast_plugin.definitions import (
    archive_tags,
    backfill_tags,
    derived_tags,
    lookup_tags,
    stream_job,
)
from feast_stream_backfill.feast_plugin.observed_writes import (
    calibration_tags,
    observed_writes_tags,
)
from feast_stream_backfill.feast_plugin.sql_views import sql_tags
from feast_stream_backfill.feast_plugin.topics import topics_tags

#: Feast warns that stream feature views are alpha each time it builds one (from the registry
#: too, in every command and Spark task); every view this plugin serves is one, so the warning
#: tells its users nothing. Filtered after Feast's imports, whose ``simplefilter`` calls would
#: go before it; where Feast may be imported later (a Spark task), around the call.
ALPHA_WARNING = "Stream feature views are experimental"
warnings.filterwarnings("ignore", ALPHA_WARNING, RuntimeWarning)
# py4j logs the Spark gateway's shutdown at INFO under Feast's CLI, which logs at INFO
logging.getLogger("py4j").setLevel(logging.WARNING)

__all__ = [
    "archive_tags",
    "backfill_tags",
    "calibration_tags",
    "derived_tags",
    "lookup_tags",
    "observed_writes_tags",
    "sink_connector_tags",
    "sql_tags",
    "stream_job",
    "topics_tags",
]
