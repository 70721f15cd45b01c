"""An event-at-a-time reference simulator of SEMANTICS sections 1-4: the executable spec.

Deliberately naive: it replays the records in processing order, one at a time, interleaved
with the watermark timer's ticks, keeping Flink's state in dictionaries, exactly as
``WindowOperator`` and ``EventTimeTrigger`` would. Not fast, but easy to check by reading.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    et: int
    key: str
    value: float


@dataclass(frozen=True)
class Job:
    size: int
    window_offset: int = 0
    bound: int = 0  # B
    interval: int = 200  # I
    emission: str = "periodic"
    lateness: int = 0  # L
    min_gap: int = 0  # D1
    min_delay: int = 0  # D2
    operator_delay: int = 0  # D3


def processing_times(records: list[Record], job: Job) -> list[tuple[int, Record]]:
    """Dedupe (topic, partition, offset), then pt_i = max(pt_{i-1} + D1, et_i + D2)."""
    first_copy: dict[tuple, Record] = {}
    for r in records:
        first_copy.setdefault((r.topic, r.partition, r.offset), r)
    by_partition: dict[tuple, list[Record]] = defaultdict(list)
    for r in first_copy.values():
        by_partition[(r.topic, r.partition)].append(r)
    timed = []
    for rs in by_partition.values():
        pt = -math.inf
        for r in sorted(rs, key=lambda r: r.offset):
            pt = max(pt + job.min_gap, r.et + job.min_delay)
            timed.append((pt, r))
    return sorted(timed, key=lambda x: (x[0], x[1].topic, x[1].partition, x[1].offset))


def simulate(records: list[Record], job: Job) -> tuple[list[tuple], dict[tuple, int]]:
    """Returns (emissions, dropped). An emission is (key, window_start, window_end,
    emit_time, emit_sequence, firing, count, sum, min, max); dropped maps (key, start) -> n."""
    timed = processing_times(records, job)
    partitions = {(r.topic, r.partition) for _, r in timed}
    max_et: dict[tuple, float] = {p: -math.inf for p in partitions}
    watermark = -math.inf
    contents: dict[tuple, list[float]] = defaultdict(list)  # (key, start) -> values
    timers: set[tuple] = set()  # (maxTs, key, start)
    emissions: list[tuple] = []
    dropped: dict[tuple, int] = defaultdict(int)

    def emit(key: str, start: int, now: int, firing: str) -> None:
        values = contents[(key, start)]
        emissions.append(
            (
                key,
                start,
                start + job.size,
                now + job.operator_delay,
                firing,
                len(values),
                sum(values),
                min(values),
                max(values),
            )
        )

    def advance_watermark(now: int) -> None:
        nonlocal watermark
        watermark = max(watermark, min(m - job.bound - 1 for m in max_et.values()))
        for timer in sorted(t for t in timers if t[0] <= watermark):
            timers.discard(timer)
            emit(timer[1], timer[2], now, "on_time")

    def process(pt: int, r: Record) -> None:
        start = r.et - (r.et - job.window_offset) % job.size
        max_ts = start + job.size - 1
        if max_ts + job.lateness <= watermark:
            dropped[(r.key, start)] += 1
        else:
            contents[(r.key, start)].append(r.value)
            if max_ts <= watermark:
                emit(r.key, start, pt, "late")
            else:
                timers.add((max_ts, r.key, start))
        max_et[(r.topic, r.partition)] = max(max_et[(r.topic, r.partition)], r.et)
        if job.emission == "on_event":
            advance_watermark(pt)

    next_tick = 0
    for pt, r in timed:
        if job.emission == "periodic":
            if next_tick == 0:
                next_tick = (pt // job.interval) * job.interval
            while next_tick < pt:  # a record and a tick at the same ms: the record first
                advance_watermark(next_tick)
                next_tick += job.interval
        process(pt, r)
    if job.emission == "periodic" and timed:
        last = timed[-1][0]
        while next_tick <= -(-last // job.interval) * job.interval:
            advance_watermark(next_tick)
            next_tick += job.interval

    sequence: dict[tuple, int] = defaultdict(int)
    numbered = []
    for e in emissions:
        numbered.append((*e[:4], sequence[(e[0], e[3])], *e[4:]))
        sequence[(e[0], e[3])] += 1
    return numbered, dict(dropped)
