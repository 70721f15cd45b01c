"""Backfill what a Flink job would have written to Redis, and when.

The core (this package minus :mod:`feast_stream_backfill.feast_plugin`) works on plain Spark
DataFrames and knows nothing of Feast. Data flows one way::

    records -> processing_time -> enrichment -> watermarks -> windows/triggers -> emission log
            -> (training join | online state)
"""

from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.backfill import Backfill, StreamJob, backfill
from feast_stream_backfill.enrichment import CdcLog, DeltaHistory, Lookup, ScdTable
from feast_stream_backfill.errors import BadArchiveError, BadStateTableError
from feast_stream_backfill.processing_time import ProcessingTimeModel
from feast_stream_backfill.records import ArchivedTopic
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger, ProcessingTimeTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy
from feast_stream_backfill.windows import (
    CumulativeWindows,
    OverWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)

__all__ = [
    "Aggregation",
    "ArchivedTopic",
    "Backfill",
    "BadArchiveError",
    "BadStateTableError",
    "CdcLog",
    "CumulativeWindows",
    "DeltaHistory",
    "EventTimeTrigger",
    "Lookup",
    "OverWindows",
    "PerRecordTrigger",
    "ProcessingTimeModel",
    "ProcessingTimeTrigger",
    "ScdTable",
    "SessionWindows",
    "SlidingWindows",
    "StreamJob",
    "TumblingWindows",
    "WatermarkStrategy",
    "backfill",
]
