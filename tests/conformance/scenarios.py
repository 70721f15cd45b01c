"""Conformance scenarios: hand-written archives covering every option, and random ones.

Times are small (ms from the epoch) so that windows, ticks and watermarks are easy to read;
``*_epoch`` scenarios shift event times to a realistic instant (:data:`BASE`, ~1.77e12 ms),
where a bug hid that tiny times near the epoch never showed (sessions x periodic emission).
Every job is one Flink can express: MAX combining is one generator over every record (a
reader's main output, or an assigner after the union), so it takes one bound for all topics.
"""

from __future__ import annotations

import random
from dataclasses import replace

from tests.conformance.harness import Scenario
from tests.reference_simulator import Job, Record

#: 2026-01-05T00:00:00Z in ms: a multiple of 200 and of 8, so ticks keep their small-time places.
BASE = 1_767_571_200_000


def _records(topic: str, partition: int, rows: list[tuple]) -> list[Record]:
    """``(et, key, value)`` rows at offsets 0, 1, 2, ..."""
    return [Record(topic, partition, o, et, k, float(v)) for o, (et, k, v) in enumerate(rows)]


# The hand-computed example of tests/test_event_time_windows.py: partition 1's record at
# et=7 arrives after the watermark passed window [0, 10): dropped.
EXAMPLE = _records("t", 0, [(1, "a", 1), (4, "a", 2), (12, "a", 4), (25, "a", 8)]) + _records(
    "t", 1, [(2, "a", 16), (30, "b", 32), (31, "b", 64), (7, "a", 128)]
)
# Out of order within partitions, ties in processing time, a late partition start.
JITTER = (
    _records(
        "t",
        0,
        [
            (10, "a", 1),
            (7, "a", 2),
            (11, "b", 3),
            (12, "a", 4),
            (15, "b", 5),
            (9, "a", 6),
            (40, "a", 7),
            (33, "b", 8),
            (61, "a", 9),
            (45, "b", 1),
            (90, "a", 2),
        ],
    )
    + _records(
        "t",
        1,
        [
            (12, "b", 1),
            (12, "a", 2),
            (19, "a", 3),
            (38, "b", 4),
            (29, "a", 5),
            (70, "b", 6),
            (52, "a", 7),
            (95, "b", 8),
        ],
    )
    + _records("t", 2, [(35, "a", 9), (20, "b", 1), (66, "a", 2), (58, "a", 3), (99, "b", 4)])
)
TWO_TOPICS = JITTER + _records(
    "u",
    0,
    [(5, "a", 10), (18, "b", 20), (31, "a", 30), (27, "a", 40), (64, "b", 50), (88, "a", 60)],
)
# Partition 1 goes quiet after two records and comes back much later (below the watermark).
QUIET = _records(
    "t", 0, [(et, "ab"[et % 20 // 10], et % 7) for et in range(0, 300, 10)]
) + _records("t", 1, [(5, "a", 1), (12, "b", 2), (140, "a", 3), (250, "b", 4)])
# Sessions (gap 10): key a's record at et 21 arrives late alone, but merges with a live session.
SESSIONS = _records(
    "t", 0, [(0, "a", 1), (6, "a", 2), (30, "a", 3), (33, "b", 4), (60, "a", 5), (41, "b", 6)]
) + _records("t", 1, [(2, "b", 7), (28, "a", 8), (21, "a", 9), (70, "a", 1), (80, "b", 2)])
# Records archived twice (at-least-once ingestion) and an offset gap (compaction).
COPIES = EXAMPLE + [EXAMPLE[2], EXAMPLE[5]] + [Record("t", 0, 9, 40, "a", 1.0)]
# The independent check's reproduction (ms after BASE; one partition, offsets 1-4): with B = 0,
# I = 200, gap 60 s, a's session [0, 70000) fires on time on the tick at 200000 (right after
# b's record of that ms), b's [200000, 260000) on the tick at 400000; [400000, 460000) never.
REPRO = [
    Record("t", 0, o, BASE + et, k, float(v))
    for o, et, k, v in [
        (1, 0, "a", 1),
        (2, 10000, "a", 2),
        (3, 200000, "b", 3),
        (4, 400000, "b", 4),
    ]
]
# Sessions (gap 10, B = 0, I = 8) whose on-time firings come on ticks between records:
#   p0: 3 a, 9 a, 26 b, 41 a, 58 b      p1: 5 b, 22 a, 44 b, 60 a      (pt = et)
# Watermark on ticks 8..64 (first at or after 60): 2, 4, 8, 21, 21, 40, 40, 57. Sessions:
# a [3, 19) (maxTs 18) and b [5, 15) fire at tick 32; a [22, 32), b [26, 36) at 48;
# a [41, 51), b [44, 54) at 64; b [58, 68), a [60, 70) never.
TICKS = _records("t", 0, [(3, "a", 1), (9, "a", 2), (26, "b", 3), (41, "a", 4), (58, "b", 5)])
TICKS += _records("t", 1, [(5, "b", 6), (22, "a", 7), (44, "b", 8), (60, "a", 9)])
# ... and two late records at pt 60 (W = 40 since tick 56). With L = 15: a's 25 makes [25, 35),
# which merges with a's fired-but-kept [22, 32) into [22, 35): late (34 <= 40), not dropped
# (34 + 15 > 40): a late firing at 60 of 2 records, 17. b's 2 makes [2, 12): b's [5, 15) was
# purged at tick 48 (14 + 15 <= 40); 11 + 15 <= 40: dropped.
LATE_TICKS = TICKS + [Record("t", 1, 4, 25, "a", 10.0), Record("t", 1, 5, 2, "b", 11.0)]

# Sessions (gap 10, B = 0, I = 10, T = 30, D1 = 10) whose splits all go idle: p0's et 0-5 are
# read at pt 0, 10, ..., 50 (D1), p1's at 2 and 30; p1 goes idle on tick 80, p0 on tick 100
# (40 > T after its inactivity clock started on tick 60): all idle, the combined watermark is
# flushed to the MAX, p1's 29: a [0, 14) (1 + 3 + 5) and b [1, 15) (2 + 4 + 6 + 8) fire on
# tick 100. p1, idle first, is back first, at 310: alone active, it sets 309: a [30, 40) fires
# on tick 310. p1 idle again on tick 360; p0 back at 400: 399, b [310, 320) fires on tick 400.
ALL_IDLE = _records("t", 0, [(et, "ab"[et % 2], et + 1) for et in range(6)] + [(400, "a", 7)])
ALL_IDLE += _records("t", 1, [(2, "b", 8), (30, "a", 9), (310, "b", 10)])


def at_epoch(records: list[Record], base: int = BASE) -> list[Record]:
    """The records with event times shifted by ``base``."""
    return [replace(r, et=r.et + base) for r in records]


def hand_written() -> list[Scenario]:
    """One scenario per option of the plugin, and combinations (test_conformance.PAIRS)."""
    base = Job(size=10, interval=10)
    ticks = Job(size=10, gap=10, interval=8)
    delays = {"min_gap": 2, "min_delay": 5, "operator_delay": 7}
    return [
        Scenario("example", EXAMPLE, base),
        Scenario("duplicates_and_offset_gaps", COPIES, base),
        Scenario("tumbling_periodic", JITTER, replace(base, bound=3, interval=5)),
        Scenario("tumbling_on_event", JITTER, replace(base, bound=3, emission="on_event")),
        Scenario("on_event_no_timer", JITTER, replace(base, emission="on_event", interval=0)),
        Scenario("window_offset", JITTER, replace(base, size=20, window_offset=7, interval=3)),
        Scenario("allowed_lateness", JITTER, replace(base, lateness=15, interval=1)),
        Scenario(
            "lateness_on_event", JITTER, replace(base, lateness=20, emission="on_event", bound=2)
        ),
        Scenario("sliding", JITTER, replace(base, size=30, slide=10, interval=4)),
        Scenario("sliding_gaps", JITTER, replace(base, size=10, slide=25, window_offset=3)),
        Scenario(
            "sliding_lateness_on_event",
            JITTER,
            replace(base, size=20, slide=5, lateness=10, emission="on_event"),
        ),
        Scenario("per_record", JITTER, replace(base, trigger="per_record", lateness=5)),
        Scenario(
            "per_record_sliding_lateness",
            JITTER,
            replace(base, size=20, slide=10, trigger="per_record", lateness=5, interval=3),
        ),
        Scenario(
            "per_record_sliding", JITTER, replace(base, size=20, slide=10, trigger="per_record")
        ),
        Scenario("processing_time_tumbling", JITTER, replace(base, domain="processing")),
        Scenario(
            "processing_time_sliding", JITTER, replace(base, domain="processing", size=30, slide=10)
        ),
        Scenario(
            "processing_time_per_record",
            JITTER,
            replace(base, domain="processing", trigger="per_record", size=20),
        ),
        Scenario("max_combine", JITTER, replace(base, combine="max", bound=2)),
        Scenario(
            "max_combine_on_event", TWO_TOPICS, replace(base, combine="max", emission="on_event")
        ),
        Scenario("two_topics", TWO_TOPICS, replace(base, bound=1)),
        Scenario(
            "two_topics_own_bounds",
            TWO_TOPICS,
            replace(base, topic_bounds=(("u", 12),), lateness=15),
        ),
        Scenario("idleness", QUIET, replace(base, size=50, idleness=30)),
        Scenario(
            "idleness_on_event", QUIET, replace(base, size=50, idleness=15, emission="on_event")
        ),
        Scenario("sessions", SESSIONS, replace(base, gap=10, interval=5)),
        Scenario("sessions_lateness", SESSIONS, replace(base, gap=10, lateness=10, interval=1)),
        Scenario("sessions_per_record", SESSIONS, replace(base, gap=10, trigger="per_record")),
        Scenario(
            "sessions_on_event_idleness",
            QUIET,
            replace(base, gap=15, emission="on_event", idleness=20, bound=5),
        ),
        Scenario("processing_time_sessions", SESSIONS, replace(base, gap=10, domain="processing")),
        Scenario(
            "delays_d1_d2_d3",
            JITTER,
            replace(base, min_gap=2, min_delay=5, operator_delay=7, lateness=10),
        ),
        Scenario(
            "copies_delays_offset",
            COPIES,
            replace(base, min_gap=2, min_delay=5, operator_delay=7, lateness=10, window_offset=3),
        ),
        # Periodic emission with ticks between records, and realistic (epoch) times.
        Scenario("sessions_periodic_epoch", REPRO, Job(size=60000, gap=60000, interval=200)),
        Scenario("sessions_periodic_ticks", TICKS, ticks),
        Scenario("sessions_periodic_ticks_epoch", at_epoch(TICKS), ticks),
        Scenario("sessions_lateness_periodic", LATE_TICKS, replace(ticks, lateness=15)),
        Scenario(
            "sessions_lateness_periodic_epoch", at_epoch(LATE_TICKS), replace(ticks, lateness=15)
        ),
        Scenario(
            "sessions_on_event_delays_epoch",
            at_epoch(LATE_TICKS),
            replace(ticks, emission="on_event", lateness=15, **delays),
        ),
        Scenario(
            "processing_time_sessions_epoch",
            at_epoch(SESSIONS),
            replace(base, gap=10, domain="processing", min_gap=1),
        ),
        Scenario(
            "tumbling_lateness_periodic_epoch",
            at_epoch(JITTER + [JITTER[3], JITTER[12]]),  # and two copies
            replace(
                base,
                interval=3,
                lateness=10,
                window_offset=3,
                min_gap=1,
                min_delay=5,
                operator_delay=7,
            ),
        ),
        Scenario(
            "per_record_sliding_epoch",
            at_epoch(JITTER),
            replace(base, size=20, slide=10, trigger="per_record", lateness=5, interval=7),
        ),
        Scenario(
            "sessions_idleness_lateness_epoch",
            at_epoch(LATE_TICKS),
            Job(size=10, gap=10, interval=5, lateness=10, idleness=5),
        ),
        Scenario(
            "sessions_all_idle_epoch",
            at_epoch(ALL_IDLE),
            Job(size=10, gap=10, interval=10, idleness=30, min_gap=10),
        ),
        Scenario("idleness_periodic_ticks", QUIET, replace(base, size=50, idleness=30, interval=7)),
        Scenario(
            "idleness_periodic_epoch",
            at_epoch(QUIET),
            replace(base, size=50, idleness=30, interval=7),
        ),
    ]


#: The hand-written scenarios CI also compares with the Spark backfill (a few seconds each):
#: together they cover every option and the pairs of test_conformance.PAIRS (test_differential
#: holds the plugin to the simulator at small times only, hence the epoch ones); CI compares
#: all of them with the simulator.
AGAINST_THE_PLUGIN = (
    "tumbling_lateness_periodic_epoch",  # offset, D1-D3, a late firing, duplicates, MIN
    "sliding_lateness_on_event",  # sliding, on-event watermarks, late firings
    "per_record_sliding_epoch",  # CountTrigger.of(1) over sliding windows, lateness
    "processing_time_sliding",  # processing-time timers
    "two_topics_own_bounds",  # two sources, per-topic bounds (the valve)
    "max_combine_on_event",  # MAX combining
    "idleness_periodic_epoch",  # WatermarksWithIdleness, ticks between records
    "sessions_all_idle_epoch",  # sessions, every split idle: the MAX flush fires them
    "sessions_periodic_epoch",  # the reproduction: on-time session firings on ticks
    "sessions_lateness_periodic_epoch",  # ... between records, late merges, drops
    "sessions_on_event_delays_epoch",  # sessions, on-event watermarks, D1, D2, D3
    "processing_time_sessions_epoch",  # processing-time sessions at realistic times
)


def _partition(rng: random.Random, topic: str, partition: int) -> list[Record]:
    """tests/test_differential.py's generator: roughly increasing event times with jitter,
    some severely late records, offset gaps and copies; some partitions start late or pause."""
    out, offset, step = [], -1, rng.choice([1, 5, 20])
    start = rng.choice([0, 0, 0, 500])
    pause_at, pause = rng.randint(0, 12), rng.choice([0, 0, 400, 1500])
    for i in range(rng.randint(0, 12)):
        offset += rng.choice([1, 1, 3])
        late = rng.randint(50, 400) if rng.random() < 0.1 else 0
        shift = start + (pause if i >= pause_at else 0)
        et = max(0, shift + i * step * 5 + rng.randint(-30, 30) - late)
        value = float(rng.randint(1, 9))
        out.append(Record(topic, partition, offset, et, rng.choice("abc"), value))
    return out + [rng.choice(out) for _ in range(rng.randint(0, 2))] if out else out


def _job(rng: random.Random, topics: int) -> Job:
    """Jobs as test_differential draws them, restricted to what both the plugin (idleness:
    one topic, MIN) and Flink (MAX: one bound) express."""
    combine = rng.choice(["min", "min", "max"])
    bounds = rng.choice([(), (), (("t2", 40),), (("t1", 0), ("t2", 15))])
    return Job(
        size=rng.choice([10, 50, 100, 300]),
        slide=rng.choice([0, 0, 20, 35]),
        window_offset=rng.choice([0, 7]),
        domain=rng.choice(["event", "event", "processing"]),
        trigger=rng.choice(["default", "default", "per_record"]),
        combine=combine,
        topic_bounds=() if combine == "max" else bounds,
        bound=rng.choice([0, 5, 30]),
        interval=rng.choice([1, 7, 50, 200]),
        emission=rng.choice(["periodic", "on_event"]),
        lateness=rng.choice([0, 0, 20, 100]),
        min_gap=rng.choice([0, 0, 1, 3]),
        min_delay=rng.choice([0, 10]),
        operator_delay=rng.choice([0, 5]),
        idleness=rng.choice([0, 10, 60, 300]) if combine == "min" and topics == 1 else 0,
        gap=rng.choice([0, 0, 0, 15, 60, 400]),
    )


def generated(n: int, seed: int = 0) -> list[Scenario]:
    """``n`` random scenarios from ``seed`` (non-empty archives); half at a realistic epoch
    base, on or off the ticks' grid."""
    rng = random.Random(seed)
    scenarios: list[Scenario] = []
    while len(scenarios) < n:
        records = []
        topics = rng.choice([["t1"], ["t1", "t2"]])
        for topic in topics:
            for p in range(rng.randint(1, 3)):
                records += _partition(rng, topic, p)
        job = _job(rng, len(topics))
        base = rng.choice([0, 0, BASE, BASE + rng.randint(1, 86_400_000)])
        if records:
            name = f"random_{seed}_{len(scenarios)}"
            scenarios.append(Scenario(name, at_epoch(records, base), job))
    return scenarios


def kind(scenario: Scenario) -> str:
    """Window kind x emission (event time) or x processing time, e.g. ``sessions/periodic``."""
    job = scenario.job
    shape = "sessions" if job.gap else "sliding" if job.slide else "tumbling"
    return f"{shape}/{job.emission if job.domain == 'event' else 'processing time'}"


def at_realistic_times(scenario: Scenario) -> bool:
    """Event times near today (~1.77e12 ms), not near the epoch."""
    return min(r.et for r in scenario.records) >= 10**12


def unsorted(job: Job) -> Job:
    """The job as one the strategy without a sort accepts: event time, the default trigger
    with the job's lateness, periodic watermarks (every 200 ms where the job has none), D1 =
    0; idleness kept (where no partition goes idle, the job runs without the sort)."""
    return replace(
        job,
        domain="event",
        trigger="default",
        emission="periodic",
        interval=job.interval or 200,
        min_gap=0,
    )
