"""An event-at-a-time reference simulator of the model: the executable spec.

docs/concepts/model.md, from records and processing time to the emission log.

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
    key: str | None  # None: the source's watermark sees it, no window does (inner lookup)
    value: float


@dataclass(frozen=True)
class Job:
    size: int
    slide: int = 0  # 0: tumbling
    window_offset: int = 0
    domain: str = "event"  # or "processing": windows placed and fired by processing time
    trigger: str = "default"  # or "per_record" (CountTrigger.of(1))
    combine: str = "min"  # or "max" across partitions
    topic_bounds: tuple = ()  # ((topic, B), ...): a topic's own out-of-orderness
    bound: int = 0  # B
    interval: int = 200  # I
    emission: str = "periodic"
    lateness: int = 0  # L
    min_gap: int = 0  # D1
    min_delay: int = 0  # D2
    operator_delay: int = 0  # D3
    idleness: int = 0  # withIdleness(T); 0: off
    gap: int = 0  # > 0: session windows with this gap (size and slide unused)
    step: int = 0  # > 0: cumulative windows [start, start + k * step), k * step <= size
    over: int | None = None  # Flink SQL's event-time OVER, RANGE of this many ms PRECEDING
    over_rows: int | None = None  # OVER, ROWS of this many rows PRECEDING
    over_unbounded: str = ""  # OVER, "range" or "rows" BETWEEN UNBOUNDED PRECEDING
    over_ttl: int = 0  # a processing-time ROWS OVER's table.exec.state.ttl; 0: none
    #: Flink SQL's GROUP BY without a state TTL: a per-record firing whose results named here
    #: (of "count", "sum", "min", "max", "mean": the job's features) all equal the ones its
    #: key last wrote is not written; (): every firing is
    skip_unchanged: tuple[str, ...] = ()

    @property
    def is_over(self) -> bool:
        return self.over is not None or self.over_rows is not None or bool(self.over_unbounded)


#: Java's Long.MAX_VALUE.
LONG_MAX = (1 << 63) - 1


class Split:
    """One partition: Flink's generator wrapped by ``WatermarksWithIdleness``, and the
    partial watermark ``WatermarkOutputMultiplexer`` keeps for it."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.max_et = -math.inf
        self.partial = -math.inf
        self.idle = False
        self.counter = 0  # IdlenessTimer: records seen
        self.last_counter = 0
        self.inactive_since: int | None = None

    def emit(self) -> None:
        """``PartialWatermark.setWatermark``: never lower, and active again."""
        self.partial = max(self.partial, self.max_et - self.bound - 1)
        self.idle = False

    def check_idle(self, now: int, timeout: int) -> bool:
        """``IdlenessTimer.checkIfIdle``, on a periodic tick."""
        if self.counter != self.last_counter:
            self.last_counter = self.counter
            self.inactive_since = None
            return False
        if self.inactive_since is None:
            self.inactive_since = now
            return False
        return now - self.inactive_since > timeout


def source_watermark(splits: list[Split]) -> float:
    """``CombinedWatermarkStatus`` (Flink 2.3): MIN over active splits; all idle: MAX."""
    active = [s.partial for s in splits if not s.idle]
    return min(active) if active else max(s.partial for s in splits)


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


def windows_of(t: int, job: Job) -> list[tuple[int, int]]:
    """The windows ``(start, end)`` holding time t: latest start first (Flink's assignWindows
    order); cumulative ones, all of the same start, by end."""
    if job.step:
        start = t - (t - job.window_offset) % job.size
        first_end = t - (t - job.window_offset) % job.step + job.step
        return [(start, end) for end in range(first_end, start + job.size + 1, job.step)]
    slide = job.slide or job.size
    start = t - (t - job.window_offset) % slide
    windows = []
    while start > t - job.size:
        windows.append((start, start + job.size))
        start -= slide
    return windows


STATUSES = ("on_time", "late", "per_record", "dropped", "pending")


def java_min(values: list[float]) -> float:
    """``Math.min`` folded over the values: NaN if any is NaN, whatever the order (Python's
    ``min`` depends on where the NaN stands)."""
    return math.nan if any(math.isnan(v) for v in values) else min(values)


def java_max(values: list[float]) -> float:
    """``Math.max`` folded over the values, likewise."""
    return math.nan if any(math.isnan(v) for v in values) else max(values)


def simulate(
    records: list[Record], job: Job, counts: dict[str, int] | None = None
) -> tuple[list[tuple], dict[tuple, int]]:
    """Returns (emissions, dropped). An emission is (key, window_start, window_end,
    emit_time, emit_sequence, firing, count, sum, min, max); dropped maps (key, start) -> n.
    Aggregates follow Java doubles (a NaN makes sum, min and max NaN); a null value (a Flink SQL
    expression's) is counted, and skipped by sum, min and max.

    ``counts``, if given, is filled with the plugin's ``Backfill.stats`` statuses of the
    distinct (record, window) pairs (:data:`STATUSES`): ``on_time`` once an on-time firing
    emitted it, ``late`` if it fired a late firing, ``per_record``, ``dropped`` (a session's
    dropped record in its own window), ``pending`` if still waiting when the archive ends; with
    ``skip_unchanged``, ``updates_unchanged``: the per-record firings not written."""
    timed = processing_times(records, job)
    bounds = dict(job.topic_bounds)
    splits = {(r.topic, r.partition): Split(bounds.get(r.topic, job.bound)) for _, r in timed}
    by_topic: dict[str, list[Split]] = defaultdict(list)
    for (topic, _), split in splits.items():
        by_topic[topic].append(split)
    topic_watermark = {topic: -math.inf for topic in by_topic}
    watermark = -math.inf
    contents: dict[tuple, list[float]] = defaultdict(list)  # (key, start, end) -> values
    live: dict[str, set[tuple]] = defaultdict(set)  # key -> (start, end) of its live sessions
    event_timers: set[tuple] = set()  # (maxTs, key, start, end)
    clock_timers: set[tuple] = set()  # processing-time timers, likewise
    emissions: list[tuple] = []
    dropped: dict[tuple, int] = defaultdict(int)  # (key, start) -> n, over the start's windows
    status: dict[str, int] = dict.fromkeys(STATUSES, 0)
    status["unchanged"] = 0  # per-record firings not written (counted in per_record too)
    buffered: dict[tuple, int] = defaultdict(int)  # window -> records awaiting its timer
    # OVER (RowTimeRangeBoundedPrecedingFunction): per key, its rows in state by time, the
    # SUM's running accumulator (added and retracted as Flink does: rounding and NaN stay),
    # lastTriggeringTs (0: none) and the cleanup timer's time; timers (time, key). ROWS and
    # UNBOUNDED frames (RowTimeRowsBoundedPrecedingFunction,
    # RowTimeUnboundedPrecedingOverFunctionV2) keep their frame's rows, oldest first, as
    # (time, value) in over_frame, over_rows holding the rows not yet fired.
    over_rows: dict[str, dict[int, list[float]]] = defaultdict(dict)
    over_frame: dict[str, list[tuple[int, float]]] = defaultdict(list)
    over_sum: dict[str, float | None] = defaultdict(lambda: None)
    over_last: dict[str, int] = defaultdict(int)
    over_cleanup: dict[str, int] = {}
    over_timers: set[tuple[int, str]] = set()
    # OVER ordered by processing time (ProcTimeRangeBoundedPrecedingFunction,
    # ProcTimeRowsBoundedPrecedingFunction): rows placed at the time they are read; a RANGE
    # frame's rows of a ms wait for a timer set for the next ms, a ROWS frame writes each row
    # as it is read. Timers (time, key) fire 1 ms after their time, as the windows' do.
    clock_over_timers: set[tuple[int, str]] = set()
    clock_rows: dict[str, dict] = {}  # a ROWS frame's state, as ProcTimeRowsBounded... keeps it
    # skip_unchanged: per key, the results of its last firing written
    last_written: dict[str, tuple] = {}

    def emit(key: str, start: int, end: int, now: int, firing: str) -> None:
        """Write the window's aggregates: sum, min and max of its values but the nulls (null
        where all are), count of them all. A per-record firing repeating what its key last
        wrote, with ``skip_unchanged``, is not written."""
        values = contents[(key, start, end)]
        present = [v for v in values if v is not None]
        total = sum(present) if present else None
        low, high = (java_min(present), java_max(present)) if present else (None, None)
        if firing in ("on_time", "late"):  # the records it waited for are out
            status["on_time"] += buffered.pop((key, start, end), 0)
        if job.skip_unchanged and firing == "per_record":
            results = {"count": len(values), "sum": total, "min": low, "max": high}
            results["mean"] = None if total is None else total / len(present)
            written = tuple(results[name] for name in job.skip_unchanged)
            before = last_written.get(key)
            # Java's ==: a NaN equals nothing (Python's == agrees); two nulls are equal
            if before is not None and all(
                a == b or a is None and b is None for a, b in zip(before, written, strict=True)
            ):
                status["unchanged"] += 1
                return
            last_written[key] = written
        emissions.append(
            (key, start, end, now + job.operator_delay, firing, len(values), total, low, high)
        )

    def advance_watermark(now: int) -> None:
        """Each source combines its splits, the operator takes MIN over sources (or the seed's
        MAX over every partition); no watermark ever goes down. Then due timers fire."""
        nonlocal watermark
        before = watermark
        if job.combine == "max":
            watermark = max(watermark, max(s.partial for s in splits.values()))
        else:
            for topic, topic_splits in by_topic.items():
                topic_watermark[topic] = max(topic_watermark[topic], source_watermark(topic_splits))
            watermark = max(watermark, min(topic_watermark.values()))
        for timer in sorted(t for t in event_timers if t[0] <= watermark):
            event_timers.discard(timer)
            emit(*timer[1:], now, "on_time")
        if watermark > before:  # a watermark only reaches the operator when it rises
            for time, key in sorted(t for t in over_timers if t[0] <= watermark):
                over_timers.discard((time, key))
                over_fire(key, time, now)
        purge_sessions(lambda max_ts: max_ts + job.lateness <= watermark)

    def purge_sessions(expired) -> None:
        """A session's state is cleared at its cleanup time (maxTs + L, or maxTs by the
        clock): a later record can no longer merge with it."""
        for key, sessions in live.items():
            for start, end in [w for w in sessions if expired(w[1] - 1)]:
                sessions.discard((start, end))
                del contents[(key, start, end)]

    def over_emit(key: str, start: int, time: int, now: int, values: list[float]) -> None:
        emissions.append(
            (
                key,
                start,
                time + 1,
                now + job.operator_delay,
                "on_time",
                len(values),
                over_sum[key],
                java_min(values),
                java_max(values),
            )
        )
        status["on_time"] += 1

    def over_plus(key: str, v: float, sign: int) -> None:
        """The SUM's accumulator, adding (1) or retracting (-1) ``v``."""
        over_sum[key] = sign * v if over_sum[key] is None else over_sum[key] + sign * v

    def over_fire(key: str, time: int, now: int) -> None:
        """``onTimer``: a cleanup timer due clears the key's state; otherwise the rows at
        ``time`` (if any) are added after those more than ``over`` ms older are retracted (in
        time order, as RocksDB iterates), and each is emitted with the result. Any timer,
        with rows or not, becomes the key's lastTriggeringTs. ROWS: each row, in turn, after
        the oldest is retracted from a full frame (n + 1 rows), with the rows up to it;
        UNBOUNDED: nothing is retracted."""
        if job.over is None:
            rows = over_rows[key].pop(time, [])
            frame = over_frame[key]
            for v in rows:
                if job.over_rows is not None and len(frame) >= job.over_rows + 1:
                    over_plus(key, frame.pop(0)[1], -1)
                over_plus(key, v, 1)
                frame.append((time, v))
                if job.over_unbounded != "range":
                    over_emit(key, frame[0][0], time, now, [v for _, v in frame])
            if job.over_unbounded == "range":
                for _ in rows:
                    over_emit(key, frame[0][0], time, now, [v for _, v in frame])
            over_last[key] = time
            return
        cleanup = over_cleanup.get(key)
        if cleanup is not None and cleanup <= time:
            for state in (over_rows, over_sum, over_last, over_cleanup):
                state.pop(key, None)
            return
        rows = over_rows[key]
        if time in rows:
            gone = [t for t in sorted(rows) if time - t > job.over]
            for t in gone:
                for v in rows[t]:
                    over_plus(key, v, -1)
            for v in rows[time]:
                over_plus(key, v, 1)
            for t in gone:
                del rows[t]
            values = [v for t in sorted(rows) if t <= time for v in rows[t]]
            for _ in rows[time]:
                over_emit(key, time - job.over, time, now, values)
        over_last[key] = time

    def over_add(r: Record) -> None:
        """``processElement``: a bounded frame drops a row no later than the key's
        lastTriggeringTs, an unbounded one a row the watermark has reached; otherwise the row
        is kept with a timer at its time, and a RANGE frame's cleanup timer pushed to at least
        ``over`` ms past it."""
        time, key = r.et, r.key
        late = time <= watermark if job.over_unbounded else time <= over_last[key]
        if late:
            dropped[(key, time if job.over is None else time - job.over)] += 1
            status["dropped"] += 1
            return
        over_rows[key].setdefault(time, []).append(r.value)
        over_timers.add((time, key))
        if job.over is None:
            return
        cleanup = over_cleanup.get(key)
        if cleanup is None or cleanup < time + job.over + 1:
            over_cleanup[key] = time + int(job.over * 1.5) + 1
            over_timers.add((over_cleanup[key], key))

    def clock_over_add(pt: int, r: Record) -> None:
        """``processElement`` of a processing-time frame: RANGE keeps the row under its time,
        a timer set for the next ms when it is the first of its time, and pushes the cleanup
        timer as the event-time function does; ROWS moves its retention timer to ``pt +
        ttl * 3 / 2`` (deleting the old one) when the one set is within ``ttl`` of ``pt``,
        retracts the oldest of a full frame, adds the row and writes it at once."""
        key = r.key
        if job.over is not None:
            if pt not in over_rows[key]:
                clock_over_timers.add((pt + 1, key))
                cleanup = over_cleanup.get(key)
                if cleanup is None or cleanup < pt + job.over + 1:
                    over_cleanup[key] = pt + int(job.over * 1.5) + 1
                    clock_over_timers.add((over_cleanup[key], key))
            over_rows[key].setdefault(pt, []).append(r.value)
            return
        if job.over_ttl:
            cleanup = over_cleanup.get(key)
            if cleanup is None or pt + job.over_ttl > cleanup:
                clock_over_timers.discard((cleanup, key))
                over_cleanup[key] = pt + job.over_ttl * 3 // 2
                clock_over_timers.add((over_cleanup[key], key))
        # Flink's own state: rows by time, a counter up to n + 1, the smallest time (a long's
        # maximum once a retraction took the last row: the next retraction then finds none)
        state = clock_rows.setdefault(key, {"rows": {}, "counter": 0, "smallest": pt})
        rows = state["rows"]
        if state["counter"] == job.over_rows + 1:
            gone = rows.get(state["smallest"])
            if gone:
                over_plus(key, gone.pop(0), -1)
            if not gone:
                rows.pop(state["smallest"], None)
                state["smallest"] = min(rows, default=LONG_MAX)
        else:
            state["counter"] += 1
        rows.setdefault(pt, []).append(r.value)
        over_plus(key, r.value, 1)
        over_emit(key, min(rows), pt, pt, [v for t in sorted(rows) for v in rows[t]])

    def clock_over_fire(key: str, timer: int) -> None:
        """``onTimer`` at ``timer + 1``: the cleanup clears the key (rows, frame, sum); a RANGE
        frame's timer retracts the rows read more than ``over`` ms before ``timer - 1``, adds
        the rows read then and writes each with them all."""
        cleanup = over_cleanup.get(key)
        if cleanup is not None and cleanup <= timer:
            for state in (over_rows, clock_rows, over_sum, over_last, over_cleanup):
                state.pop(key, None)
            return
        time, rows = timer - 1, over_rows[key]
        if job.over is None or time not in rows:
            return
        gone = [t for t in sorted(rows) if t < time - job.over]
        for t in gone:
            for v in rows.pop(t):
                over_plus(key, v, -1)
        for v in rows[time]:
            over_plus(key, v, 1)
        values = [v for t in sorted(rows) if t <= time for v in rows[t]]
        for _ in rows[time]:
            over_emit(key, time - job.over, time, timer + 1, values)
        over_last[key] = time

    def tick(now: int) -> None:
        """The periodic timer: idleness checks, periodic emission, then the combination."""
        for split in splits.values():
            if job.idleness and split.check_idle(now, job.idleness):
                split.idle = True
            elif job.emission == "periodic":
                split.emit()
        advance_watermark(now)

    def advance_clock(before: float) -> None:
        """Processing-time timers strictly before ``before`` (records of a ms come first)."""
        for timer in sorted(t for t in clock_timers if t[0] < before):
            clock_timers.discard(timer)  # Flink fires it 1 ms after maxTs (getProcessingTimeDelay)
            emit(*timer[1:], timer[0] + 1, "on_time")
        while due := sorted(t for t in clock_over_timers if t[0] < before):
            clock_over_timers.discard(due[0])
            clock_over_fire(due[0][1], due[0][0])
        if job.domain == "processing":
            purge_sessions(lambda max_ts: max_ts < before)

    def merge_session(key: str, time: int) -> tuple[int, int] | None:
        """Flink's MergingWindowSet: the new window [time, time + gap) and every session it
        touches (TimeWindow.intersects: start <= other.end and end >= other.start) merge; the
        lateness test applies to the merged window. Returns the merged window, or None if late.
        """
        start, end = time, time + job.gap
        touching = [(s, e) for s, e in live[key] if s <= end and e >= start]
        start = min([start, *(s for s, _ in touching)])
        end = max([end, *(e for _, e in touching)])
        if job.domain == "event" and end - 1 + job.lateness <= watermark:
            return None
        values, waiting = [], 0
        for s, e in touching:
            live[key].discard((s, e))
            values += contents.pop((key, s, e))
            waiting += buffered.pop((key, s, e), 0)
            timer = (e - 1, key, s, e)
            event_timers.discard(timer)
            clock_timers.discard(timer)
        live[key].add((start, end))
        contents[(key, start, end)] = values
        buffered[(key, start, end)] += waiting  # the merged session's timer fires them all
        return start, end

    def windows_for(time: int, r: Record) -> list[tuple[int, int]]:
        """The windows a record goes to (its merged session, or none when late)."""
        if not job.gap:
            return windows_of(time, job)
        merged = merge_session(r.key, time)
        if merged is None:
            dropped[(r.key, time)] += 1
            status["dropped"] += 1
            return []
        return [merged]

    def process(pt: int, r: Record) -> None:
        time = r.et if job.domain == "event" else pt
        if job.is_over and r.key is not None and job.domain == "processing":
            clock_over_add(pt, r)
        elif job.is_over and r.key is not None:
            over_add(r)
        assigned = r.key is not None and not job.is_over
        for start, end in windows_for(time, r) if assigned else []:
            window = (r.key, start, end)
            max_ts = end - 1
            if job.domain == "event" and max_ts + job.lateness <= watermark:
                dropped[(r.key, start)] += 1
                status["dropped"] += 1
                continue
            contents[window].append(r.value)
            if job.trigger == "per_record":
                emit(*window, pt, "per_record")
                status["per_record"] += 1
            elif job.domain == "event" and max_ts <= watermark:
                status["late"] += 1
                emit(*window, pt, "late")
            else:
                buffered[window] += 1
                timers = clock_timers if job.domain == "processing" else event_timers
                timers.add((max_ts, *window))
        split = splits[(r.topic, r.partition)]
        split.max_et = max(split.max_et, r.et)
        split.counter += 1
        if job.emission == "on_event":
            split.emit()
            advance_watermark(pt)

    next_tick = -(-timed[0][0] // job.interval) * job.interval if timed and job.interval else 0
    for pt, r in timed:
        advance_clock(pt)
        while job.interval and next_tick < pt:  # a record and a tick at the same ms: record first
            tick(next_tick)
            next_tick += job.interval
        process(pt, r)
    advance_clock(math.inf)  # a live job's clock goes on: every processing-time window fires
    if job.interval and timed:  # ticks up to the first one at or after the last record
        while next_tick <= -(-timed[-1][0] // job.interval) * job.interval:
            tick(next_tick)
            next_tick += job.interval

    if counts is not None:
        status["pending"] += sum(buffered.values())
        # a RANGE frame keeps the rows it wrote until they leave it: those after the key's
        # last timer are pending; the other frames keep only the rows not written yet
        status["pending"] += sum(
            len(values)
            for key, rows in over_rows.items()
            for time, values in rows.items()
            if job.over is None or time > over_last[key]
        )
        unchanged = status.pop("unchanged")
        counts.update(status)
        if job.skip_unchanged:
            counts["updates_unchanged"] = unchanged

    sequence: dict[tuple, int] = defaultdict(int)
    numbered = []
    for e in emissions:
        numbered.append((*e[:4], sequence[(e[0], e[3])], *e[4:]))
        sequence[(e[0], e[3])] += 1
    return numbered, dict(dropped)
