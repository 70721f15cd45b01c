"""Enrichment with external state, as of when the job would have looked it up.

The model: docs/concepts/model.md#enrichment.

A Flink job enriches each record before windowing it: a processing-time lookup join
(``JOIN rates FOR SYSTEM_TIME AS OF t.proc_time``) reads the external state as it is when the
record is processed; an event-time temporal join (``FOR SYSTEM_TIME AS OF t.event_time``)
takes the latest version at or before the record's event time. A backfill must read the state
as it was then, or it leaks future state into training.

- :mod:`~feast_stream_backfill.enrichment.state`: where versions come from (:class:`ScdTable`,
  :class:`CdcLog`, :class:`DeltaHistory`), each normalized to one versions table.
- :mod:`~feast_stream_backfill.enrichment.lookup`: :class:`Lookup`, the join of each record to
  the version valid at its lookup time, :func:`enrich` and the derived columns.
- :mod:`~feast_stream_backfill.enrichment.sql_columns`: which columns a derived column's Spark
  SQL reads (:func:`expression_columns`), so the archive is read for them.

**Decisions where the model is silent.**

- *The watermark comes from all records.* In Flink the lookup join runs after the source,
  so the source's watermark reflects every record read, including those an inner join then
  removes: they never reach the window operator, but they advanced the watermark. The
  backfill feeds the watermark with the un-enriched records and windows only the enriched
  ones (``Backfill.stats["records_without_state"]`` counts those removed).
- *A record keeps its own processing time.* The lookup delay only shifts which version is
  read (a slow lookup, an async I/O round trip, a replica lagging behind: negative); the
  record is windowed at its ``_pt``, as the model has no latency for operators.
- *An event-time temporal join is modelled by its result*, the version at ``et``. Flink also
  buffers each record until the watermark passes its time (and the versioned side's
  watermark, an idle changelog stalls it); that can delay when a record reaches the window
  operator, which this model does not do.
"""

from feast_stream_backfill.enrichment.lookup import (
    Lookup,
    enrich,
    enrichment_inputs,
    enrichment_outputs,
    with_derived,
)
from feast_stream_backfill.enrichment.sql_columns import expression_columns
from feast_stream_backfill.enrichment.state import CdcLog, DeltaHistory, ScdTable, StateSource

__all__ = [
    "CdcLog",
    "DeltaHistory",
    "Lookup",
    "ScdTable",
    "StateSource",
    "enrich",
    "enrichment_inputs",
    "enrichment_outputs",
    "expression_columns",
    "with_derived",
]
