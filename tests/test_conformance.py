"""The plugin against real Apache Flink (tests/conformance): identical firings, values, emit
times and dropped records.

CI runs the hand-written scenarios against the reference simulator and 8 of them, which
together cover every option the plugin supports, against the plugin's Spark backfill (a few
seconds each); and 20 random ones from a fixed seed against the simulator (which
test_differential holds equal to the backfill). One Flink JVM replays them all.
``python -m tests.conformance [--plugin]`` runs larger generated sets.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conformance.harness import (
    FlinkRun,
    Scenario,
    build,
    compare,
    flink_log,
    processing_order,
    run_flink,
)
from tests.conformance.scenarios import AGAINST_THE_PLUGIN, EXAMPLE, generated, hand_written
from tests.reference_simulator import Job, simulate
from tests.test_differential import spark_backfill

RANDOM = generated(20, seed=2026)
EXAMPLE_JOB = Job(size=10, interval=10)
SHIFTED = replace(EXAMPLE_JOB, window_offset=1)


@pytest.fixture(scope="module")
def replays(spark) -> dict[str, tuple[Scenario, FlinkRun]]:
    """Every scenario of this file replayed on Flink, in one JVM."""
    scenarios = [
        Scenario("example_job", EXAMPLE, EXAMPLE_JOB),
        Scenario("shifted_job", EXAMPLE, SHIFTED),
        *hand_written(),
        *RANDOM,
    ]
    runs = run_flink(build(), scenarios, processing_order(spark, scenarios))
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


@pytest.mark.parametrize("name", [s.name for s in hand_written()])
def test_hand_written_scenario_identical_to_the_simulator_and_the_plugin(spark, replays, name):
    scenario, run = replays[name]
    flink = flink_log(run, scenario.job)
    assert flink[0], "Flink fired nothing: the scenario tests nothing"
    assert compare(flink, simulate(scenario.records, scenario.job), scenario.job) == []
    if name in AGAINST_THE_PLUGIN:
        plugin = spark_backfill(spark, scenario.records, scenario.job)
        assert compare(flink, plugin, scenario.job) == []


def test_random_scenarios_identical_to_the_reference_simulator(replays):
    problems = {}
    for scenario in RANDOM:
        _, run = replays[scenario.name]
        expected = simulate(scenario.records, scenario.job)
        if diff := compare(flink_log(run, scenario.job), expected, scenario.job):
            problems[scenario.name] = diff
    assert problems == {}


def test_every_option_is_compared_with_the_plugin():
    jobs = [s.job for s in hand_written() if s.name in AGAINST_THE_PLUGIN]
    assert len(jobs) == len(AGAINST_THE_PLUGIN)
    covered = {
        "sliding": any(j.slide for j in jobs),
        "sessions": any(j.gap for j in jobs),
        "offset": any(j.window_offset for j in jobs),
        "processing time": any(j.domain == "processing" for j in jobs),
        "per record": any(j.trigger == "per_record" for j in jobs),
        "lateness": any(j.lateness for j in jobs),
        "on event": any(j.emission == "on_event" for j in jobs),
        "max": any(j.combine == "max" for j in jobs),
        "topic bounds": any(j.topic_bounds for j in jobs),
        "idleness": any(j.idleness for j in jobs),
        "delays": any(j.min_gap and j.min_delay and j.operator_delay for j in jobs),
    }
    assert [option for option, yes in covered.items() if not yes] == []


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
