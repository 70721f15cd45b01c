"""The internal columns one stage adds and a later stage reads: one registry.

Every such column is declared here once, with the stage that adds it and what it means, so no
stage reads a bare string another stage wrote (``tests/test_columns.py`` checks). Scratch
columns that live and die inside one function stay local to it. Internal names start with
``_`` so that they never collide with an archive's own columns.
"""

from __future__ import annotations

from typing import NamedTuple


class InternalColumn(NamedTuple):
    name: str
    stage: str
    meaning: str


REGISTRY: dict[str, InternalColumn] = {}


def _column(name: str, stage: str, meaning: str) -> str:
    if name in REGISTRY:
        raise ValueError(f"internal column {name!r} is declared twice")
    REGISTRY[name] = InternalColumn(name, stage, meaning)
    return name


# records: the archive, normalized
TOPIC = _column("_topic", "records", "the archived topic's name")
PARTITION = _column("_partition", "records", "the Kafka partition")
OFFSET = _column("_offset", "records", "the Kafka offset")
EVENT_TIME = _column("_et", "records", "the record's event time, epoch ms")
ARCHIVE_TIME = _column(
    "_archive_et",
    "records",
    "the archive's own event-time column (a TIMESTAMP): a filter on it reaches the reader",
)
VIEW_KEEPS = _column(
    "_view_keeps",
    "records",
    "a Flink SQL view's WHERE holds for the record (it still takes processing time)",
)

# processing_time
PROCESSING_TIME = _column("_pt", "processing_time", "inferred processing time, epoch ms")
DUPLICATE = _column("_duplicate", "processing_time", "a later copy of an archived record")
CONFLICT = _column("_conflict", "processing_time", "a copy whose content differs")
RISES = _column(
    "_rises", "processing_time", "raises its partition's highest event time (moves its watermark)"
)

# processing_order
POSITION = _column(
    "_pos", "processing_order", "a moment in the global processing order (a Position struct)"
)

# watermarks and their replay
TARGET = _column("_target", "watermarks", "a watermark value a trigger waits for, epoch ms")
WATERMARK = _column("_w", "watermarks", "the combined watermark from _pos on")
EVENT_KIND = _column("_kind", "watermark_replay", "REACH, IDLE or ACTIVE: what a partition did")
EVENT_VALUE = _column("_value", "watermark_replay", "the partition's watermark (or level)")
EVENT_AT = _column("_at", "watermark_replay", "where an event stands in processing order")
RISE_FROM = _column("_from", "watermark_replay", "the combined watermark before a rise")
RISE_TO = _column("_to", "watermark_replay", "the combined watermark after a rise")
IDLE_FROM = _column("_idle_from", "idleness", "the tick at which a partition goes idle")
IDLE_UNTIL = _column("_idle_until", "idleness", "the position of the record that wakes it")
WAKES_AT = _column("_wakes_at", "idleness", "that record's processing time")

# windows
WINDOW_START = _column("_window_start", "windows", "the window's start, epoch ms")
WINDOW_END = _column("_window_end", "windows", "the window's end (exclusive), epoch ms")

# triggers (and the session replay, which states the same rules)
STATUS = _column("_status", "triggers", "what became of a (record, window) pair")
FIRE_POSITION = _column("_fire_pos", "triggers", "where in processing order a window fired")
FIRED_BY_RECORD = _column(
    "_fired_by_record", "triggers", "fired by a record (late, per record), not by a timer"
)
FIRE_ORDER = _column(
    "_fire_order",
    "triggers",
    "a replay's order of a key's firings where their windows do not tell it (OVER rows)",
)
SHARED_INSTANT = _column(
    "_shared_instant", "triggers", "a fire time at which a key may fire twice, epoch ms"
)

# enrichment: the normalized versions table every state source yields (enrichment.state) and
# the lookup reads (enrichment.lookup)
VERSION_TIME = _column("_vt", "enrichment", "when a state version starts, epoch ms")
SEQUENCE = _column("_seq", "enrichment", "order of a key's versions at the same instant")
DELETED = _column("_deleted", "enrichment", "a tombstone: from then on the key has no state")
VALID_TO = _column("_valid_to", "enrichment", "epoch ms the version stops (exclusive), or null")
