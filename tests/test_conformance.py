"""The plugin against real Apache Flink (tests/conformance): identical firings, values, emit
times and dropped records.

CI runs the hand-written scenarios against the reference simulator and 12 of them, which
together cover every option the plugin supports and the pairs of options in :data:`PAIRS`,
against the plugin's Spark backfill (a few seconds each); and 20 random ones from a fixed seed
against the simulator (which test_differential holds equal to the backfill, at small times).
One Flink JVM replays them all, fed in the simulator's processing order.
``python -m tests.conformance [--plugin]`` runs larger generated sets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from feast_stream_backfill.planner import plan
from feast_stream_backfill.strategies.aligned_unsorted import reaches_and_drops
from tests.conformance.harness import (
    FlinkRun,
    Scenario,
    build,
    compare,
    flink_log,
    processing_order,
    run_flink,
)
from tests.conformance.scenarios import (
    AGAINST_THE_PLUGIN,
    BASE,
    EXAMPLE,
    at_realistic_times,
    generated,
    hand_written,
    unsorted,
)
from tests.reference_simulator import Job, processing_times, simulate
from tests.test_differential import spark_backfill, stream_job

RANDOM = generated(20, seed=2026)
UNSORTED_TWO_TOPICS = "two_topics_own_bounds_unsorted"
EXAMPLE_JOB = Job(size=10, interval=10)
SHIFTED = replace(EXAMPLE_JOB, window_offset=1)


@pytest.fixture(scope="module")
def replays() -> dict[str, tuple[Scenario, FlinkRun]]:
    """Every scenario of this file replayed on Flink, in one JVM."""
    two_topics = next(s for s in hand_written() if s.name == "two_topics_own_bounds")
    scenarios = [
        Scenario("example_job", EXAMPLE, EXAMPLE_JOB),
        Scenario("shifted_job", EXAMPLE, SHIFTED),
        *hand_written(),
        # without its lateness, whose cleanup times start buckets of their own, which may
        # hold the far ticks this file's test of the reads again needs
        Scenario(
            UNSORTED_TWO_TOPICS, two_topics.records, replace(unsorted(two_topics.job), lateness=0)
        ),
        *RANDOM,
    ]
    runs = run_flink(build(), scenarios, processing_order(scenarios))
    for run in runs:  # Flink's own late-data side output agrees with the pairs we report
        assert run.fully_dropped <= set(run.side_output)
        assert not run.partly_dropped & set(run.side_output)
    return {s.name: (s, run) for s, run in zip(scenarios, runs, strict=True)}


def test_flink_fires_the_hand_computed_example(replays):
    # tests/test_event_time_windows.py's archive: partition 0 has et 1, 4, 12, 25 (key a);
    # partition 1 has 2 (a), 30, 31 (b), then 7 (a) at pt 31. Ticks every 10 ms: at tick 30
    # partition 0's max is 25 and partition 1's 30, so W = min(24, 29) = 24 fires [0, 10) and
    # [10, 20); the et=7 record (record 7, pt 31) finds W >= 9: dropped, side output.
    _, run = replays["example_job"]
    assert run.firings == [
        ("t", 30, "a", 0, 10, 24, 3, 19.0, 1.0, 16.0),
        ("t", 30, "a", 10, 20, 24, 1, 4.0, 4.0, 4.0),
    ]
    assert run.dropped == [(7, "a", 0)]
    assert run.side_output == [7]
    # The comparison sees a job that differs: windows shifted by 1 ms.
    expected = simulate(EXAMPLE, EXAMPLE_JOB)
    assert compare(flink_log(run, EXAMPLE_JOB), expected, EXAMPLE_JOB) == []
    _, shifted = replays["shifted_job"]
    assert compare(flink_log(shifted, SHIFTED), expected, EXAMPLE_JOB) != []


def test_flink_fires_the_reproduction_at_realistic_times(replays):
    # scenarios.REPRO (B = 0, I = 200, gap 60 s; ms after BASE, a multiple of 200): a's session
    # [0, 70000) fires on the tick at 200000 (W = 199999), after b's record of that ms; b's
    # [200000, 260000) on the tick at 400000, the last (the first at or after the last record).
    _, run = replays["sessions_periodic_epoch"]
    assert run.firings == [
        ("t", BASE + 200000, "a", BASE, BASE + 70000, BASE + 199999, 2, 3.0, 1.0, 2.0),
        ("t", BASE + 400000, "b", BASE + 200000, BASE + 260000, BASE + 399999, 1, 3.0, 3.0, 3.0),
    ]
    assert run.dropped == []


def test_flink_fires_the_hand_computed_late_sessions_at_realistic_times(replays):
    # scenarios.LATE_TICKS + BASE (gap 10, B = 0, I = 8, L = 15): on-time firings on ticks 32,
    # 48 and 64, between records; a late merge [22, 35) at pt 60; b's et 2 dropped.
    scenario, run = replays["sessions_lateness_periodic_epoch"]
    emissions, dropped = flink_log(run, scenario.job)
    shifted = [
        (k, BASE + s, BASE + e, BASE + t, f, n, v)
        for k, s, e, t, f, n, v in [
            ("a", 3, 19, 32, "on_time", 2, 3.0),
            ("b", 5, 15, 32, "on_time", 1, 6.0),
            ("a", 22, 32, 48, "on_time", 1, 7.0),
            ("b", 26, 36, 48, "on_time", 1, 3.0),
            ("a", 22, 35, 60, "late", 2, 17.0),
            ("a", 41, 51, 64, "on_time", 1, 4.0),
            ("b", 44, 54, 64, "on_time", 1, 8.0),
        ]
    ]
    assert sorted((*e[:4], *e[5:8]) for e in emissions) == sorted(shifted)
    assert dropped == {("b", BASE + 2): 1}


def test_flink_fires_sessions_when_every_split_is_idle(replays):
    # scenarios.ALL_IDLE + BASE: the MAX flush on tick 100, p1 back alone on tick 310, p0 on 400.
    scenario, run = replays["sessions_all_idle_epoch"]
    emissions, _ = flink_log(run, scenario.job)
    assert [(e[0], e[1] - BASE, e[2] - BASE, e[3] - BASE, e[7]) for e in emissions] == [
        ("a", 0, 14, 100, 9.0),
        ("b", 1, 15, 100, 20.0),
        ("a", 30, 40, 310, 9.0),
        ("b", 310, 320, 400, 10.0),
    ]


@pytest.mark.parametrize("name", [s.name for s in hand_written()])
def test_hand_written_scenario_identical_to_the_simulator_and_the_plugin(spark, replays, name):
    scenario, run = replays[name]
    flink = flink_log(run, scenario.job)
    assert flink[0], "Flink fired nothing: the scenario tests nothing"
    assert compare(flink, simulate(scenario.records, scenario.job), scenario.job) == []
    if name in AGAINST_THE_PLUGIN:
        plugin = spark_backfill(spark, scenario.records, scenario.job)
        assert compare(flink, plugin, scenario.job) == []


def test_two_topics_with_their_own_bounds_without_the_sort(spark, replays, monkeypatch):
    # The strategy without a sort over two topics whose B differ: a tick far from one topic's
    # reach thresholds can be close to the other's, so one topic's records are read again and
    # the other's not (the filter on the archive's own times then lists no range for one).
    reads = []
    range_minima = reaches_and_drops.range_minima
    monkeypatch.setattr(
        reaches_and_drops,
        "range_minima",
        lambda *args: reads.append(args[1]) or range_minima(*args),
    )
    scenario, run = replays[UNSORTED_TWO_TOPICS]
    job = stream_job(spark, scenario.records, scenario.job)
    assert plan(job).strategy.name == "aligned-unsorted"
    plugin = spark_backfill(spark, scenario.records, scenario.job)
    assert compare(flink_log(run, scenario.job), plugin, scenario.job) == []
    assert any(any(ranges.values()) and not all(ranges.values()) for ranges in reads)


def test_random_scenarios_identical_to_the_reference_simulator(replays):
    problems = {}
    for scenario in RANDOM:
        _, run = replays[scenario.name]
        expected = simulate(scenario.records, scenario.job)
        if diff := compare(flink_log(run, scenario.job), expected, scenario.job):
            problems[scenario.name] = diff
    assert problems == {}


def features(scenario: Scenario) -> set[str]:
    """What a scenario exercises, from its job, its records and the simulator's log."""
    job, records = scenario.job, scenario.records
    event = job.domain == "event"
    emissions, dropped = simulate(records, job)
    pts = {pt for pt, _ in processing_times(records, job)}
    on_ticks = {e[3] - job.operator_delay for e in emissions if e[5] == "on_time"}
    return {
        name
        for name, yes in {
            "tumbling": not job.gap and not job.slide,
            "sliding": not job.gap and job.slide,
            "sessions": job.gap,
            "offset": not job.gap and job.window_offset,
            "processing time": not event,
            "per record": job.trigger == "per_record",
            "lateness": event and job.lateness,
            "late firings": any(e[5] == "late" for e in emissions),
            "drops": dropped,
            "periodic": event and job.emission == "periodic" and job.interval,
            "on event": event and job.emission == "on_event",
            # On-time firings on a periodic tick strictly between records (the model's watermarks).
            "ticks between records": event and job.emission == "periodic" and on_ticks - pts,
            "max": job.combine == "max",
            "topic bounds": job.topic_bounds,
            "idleness": job.idleness,
            "delays": job.min_gap and job.min_delay and job.operator_delay,
            "duplicates": len({(r.topic, r.partition, r.offset) for r in records}) < len(records),
            "epoch times": at_realistic_times(scenario),
        }.items()
        if yes
    }


#: Pairs of options that must meet in one scenario compared with the plugin: the bug that
#: motivated them (periodic sessions at realistic times) needed two at once.
PAIRS = [
    ("sessions", "ticks between records"),
    ("sessions", "epoch times"),
    ("sessions", "lateness"),
    ("sessions", "late firings"),
    ("sessions", "drops"),
    ("sessions", "on event"),
    ("sessions", "processing time"),
    ("sessions", "delays"),
    ("sessions", "idleness"),
    ("tumbling", "ticks between records"),
    ("tumbling", "epoch times"),
    ("tumbling", "lateness"),
    ("sliding", "per record"),
    ("sliding", "lateness"),
    ("sliding", "on event"),
    ("sliding", "epoch times"),
    ("sliding", "processing time"),
    ("per record", "lateness"),
    ("per record", "periodic"),
    ("idleness", "ticks between records"),
    ("idleness", "epoch times"),
    ("processing time", "epoch times"),
    ("lateness", "ticks between records"),
    ("offset", "epoch times"),
    ("duplicates", "delays"),
    ("max", "on event"),
    ("topic bounds", "lateness"),
]


def test_every_pair_of_options_is_compared_with_the_plugin():
    scenarios = [s for s in hand_written() if s.name in AGAINST_THE_PLUGIN]
    assert len(scenarios) == len(AGAINST_THE_PLUGIN) <= 12
    covered = [features(s) for s in scenarios]
    options = {o for pair in PAIRS for o in pair}
    assert sorted(o for o in options if not any(o in c for c in covered)) == []
    assert [p for p in PAIRS if not any(set(p) <= c for c in covered)] == []


def test_a_disagreement_is_reported():
    # The comparison itself: an emit time 1 ms apart and a drop count differ.
    job = Job(size=10)
    flink = ([("a", 0, 10, 30, 0, "on_time", 2, 3.0, 1.0, 2.0)], {("a", 0): 1})
    plugin = ([("a", 0, 10, 31, 0, "on_time", 2, 3.0, 1.0, 2.0)], {("a", 0): 2})
    assert compare(flink, plugin, job) == [
        "Flink only:  ('a', 0, 10, 30, 0, 'on_time', 2, 3.0, 1.0, 2.0)",
        "plugin only: ('a', 0, 10, 31, 0, 'on_time', 2, 3.0, 1.0, 2.0)",
        "dropped ('a', 0): Flink 1, plugin 2",
    ]


def test_a_repeated_or_missing_copy_of_a_firing_is_reported():
    # Firings are multisets: the same row twice on one side is one difference, not none.
    job = Job(size=10)
    e = ("a", 0, 10, 30, 0, "on_time", 2, 3.0, 1.0, 2.0)
    assert compare(([e], {}), ([e, e], {}), job) == [f"plugin only: {e}"]
    assert compare(([e, e, e], {}), ([e], {}), job) == [f"Flink only:  {e}"] * 2
    assert compare(([e, e], {}), ([e, e], {}), job) == []
