"""Every strategy takes its arithmetic from feast_stream_backfill/rules.py, shown by behaviour:
a rule varied there (its constant shifted, its inverse shifted to match) changes every
strategy's emission log, and changes them all alike.

The strategies accept different jobs: the aligned ones tumbling windows, the merging one
sessions. So each job has a session twin the model fires identically: times on multiples of
the gap ``G`` (event times, or processing times for processing-time windows) and a key's
distinct times at least ``2G`` apart, so that every session is the tumbling window
``[t, t + G)``, and a late record rejoins its own. Every strategy that accepts the job or its
twin (:func:`planner.eligible`) runs under each variant; its log must differ from the model's
(the reference simulator's, which knows nothing of rules.py) and equal the aligned-in-order
strategy's under the variant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from pyspark.sql import SparkSession

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    ProcessingTimeTrigger,
    SessionWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
    rules,
)
from feast_stream_backfill.planner import eligible
from tests.conftest import archive, collect_log
from tests.reference_simulator import Job as Simulated
from tests.reference_simulator import Record, simulate

G = 100
#: (partition, offset, event time, key, amount). A partition's records are read at its highest
#: event time so far (D1 = D2 = 0): p0's records at 0, 100, 300, 400, 400 (the late et-0 one),
#: 600, 700, 700 (the late et-100 one), 900.
EVENT_TIME_ROWS = [
    (0, 0, 0, "a", 1.0),
    (0, 1, 100, "b", 2.0),
    (0, 2, 300, "a", 4.0),
    (0, 3, 400, "b", 8.0),
    (0, 4, 0, "a", 16.0),
    (0, 5, 600, "a", 32.0),
    (0, 6, 700, "b", 64.0),
    (0, 7, 100, "b", 128.0),
    (0, 8, 900, "a", 256.0),
    (1, 0, 0, "a", 512.0),
    (1, 1, 300, "a", 1024.0),
    (1, 2, 400, "b", 2048.0),
    (1, 3, 300, "a", 4096.0),
    (1, 4, 1000, "b", 8192.0),
]
#: Event times rising in each partition: each record is read at its event time.
PROCESSING_TIME_ROWS = [
    (0, 0, 0, "a", 1.0),
    (0, 1, 100, "b", 2.0),
    (0, 2, 300, "a", 4.0),
    (0, 3, 400, "b", 8.0),
    (0, 4, 600, "a", 16.0),
    (0, 5, 700, "b", 32.0),
    (1, 0, 0, "a", 64.0),
    (1, 1, 100, "b", 128.0),
    (1, 2, 300, "a", 256.0),
    (1, 3, 700, "b", 512.0),
    (1, 4, 900, "a", 1024.0),
]


@dataclass(frozen=True)
class Job:
    """A job and its session twin: ``domain`` of the windows, ``lateness`` allowed."""

    domain: str
    lateness: int = 0

    def build(self, spark: SparkSession, sessions: bool) -> StreamJob:
        event = self.domain == "event"
        rows = EVENT_TIME_ROWS if event else PROCESSING_TIME_ROWS
        window = (
            SessionWindows(G, domain=self.domain)
            if sessions
            else TumblingWindows(G, 0, self.domain)
        )
        return StreamJob(
            topics=[ArchivedTopic("clicks", dataframe=archive(spark, rows))],
            keys=["user"],
            window=window,
            aggregations=[Aggregation("amount", f, f) for f in ("sum", "min", "max")],
            trigger=EventTimeTrigger(self.lateness) if event else ProcessingTimeTrigger(),
            watermark=WatermarkStrategy(interval_ms=50),
        )

    def simulated(self, sessions: bool) -> tuple:
        """The model's log of the job (or its twin), by the reference simulator."""
        event = self.domain == "event"
        rows = EVENT_TIME_ROWS if event else PROCESSING_TIME_ROWS
        records = [Record("clicks", p, o, et, key, amount) for p, o, et, key, amount in rows]
        size = {"size": 1, "gap": G} if sessions else {"size": G}
        job = Simulated(**size, domain=self.domain, lateness=self.lateness, interval=50)
        emissions, dropped = simulate(records, job)
        return sorted(emissions), dropped


EVENT_TIME, WITH_LATENESS, PROCESSING_TIME = Job("event"), Job("event", 100), Job("processing")


@dataclass(frozen=True)
class Variant:
    """Rules shifted by ``by`` ms (each restated with its constant moved, so that a Python
    worker receiving it needs nothing else), shown on ``job``."""

    name: str
    job: Job
    rules: Callable[[int], dict[str, Callable[..., Any]]]
    by: int


def _bound(by: int) -> dict[str, Callable[..., Any]]:  # every watermark lags ``by`` more
    return {
        "partition_watermark": lambda highest, bound: highest - (bound + by) - 1,
        "reach_threshold": lambda target, bound: target + (bound + by) + 1,
        "target_of_threshold": lambda threshold, bound: threshold - (bound + by) - 1,
    }


def _read(by: int) -> dict[str, Callable[..., Any]]:  # every record read ``by`` later
    return {
        "read_at": lambda highest, delay: highest + (delay + by),
        "highest_read_after": lambda time, delay: time - (delay + by) + 1,
    }


def _cleanup(by: int) -> dict[str, Callable[..., Any]]:  # state kept ``by`` longer
    return {"cleanup_time": lambda max_ts, lateness: max_ts + (lateness + by)}


def _clock(by: int) -> dict[str, Callable[..., Any]]:  # processing-time timers ``by`` later
    return {
        "clock_fires_at": lambda max_ts: max_ts + 1 + by,
        "clock_watermark": lambda time: time - 1 - by,
    }


VARIANTS = [
    Variant("reach_threshold", EVENT_TIME, _bound, 150),
    Variant("read_at", EVENT_TIME, _read, 30),
    Variant("cleanup_time", WITH_LATENESS, _cleanup, 200),
    Variant("clock_fires_at", PROCESSING_TIME, _clock, 30),
    Variant("read_at_by_clock", PROCESSING_TIME, _read, 100),
]
REFERENCE = "aligned-in-order"
#: The strategies accepting each variant's job or its twin (checked against the planner).
ACCEPTING = {
    EVENT_TIME: ["aligned-unsorted", "aligned-in-order", "merging"],
    WITH_LATENESS: ["aligned-unsorted", "aligned-in-order", "merging"],
    PROCESSING_TIME: ["processing-time-unsorted", "aligned-in-order", "merging"],
}
CASES = [pytest.param(v, s, id=f"{v.name}-{s}") for v in VARIANTS for s in ACCEPTING[v.job]]

_logs: dict[tuple, tuple] = {}


def _log(spark: SparkSession, job: Job, strategy: str, variant: Variant) -> tuple:
    """The emission log and dropped records of ``strategy`` (on the job's twin where it only
    accepts that), under ``variant``; computed once."""
    key = (job, strategy, variant.name)
    if key not in _logs:
        with pytest.MonkeyPatch.context() as patch:
            for name, rule in variant.rules(variant.by).items():
                patch.setattr(rules, name, rule)
            result = backfill(spark, job.build(spark, strategy == "merging"), strategy=strategy)
            try:
                emissions, dropped = collect_log(result)
            finally:
                result.release()
        _logs[key] = (sorted(emissions), dropped)
    return _logs[key]


@pytest.mark.parametrize("job", list(ACCEPTING), ids=lambda job: f"{job.domain}-{job.lateness}")
def test_every_strategy_accepting_the_job_or_its_twin_is_tried(spark, job: Job):
    accepting = {s.name for twin in (False, True) for s in eligible(job.build(spark, twin))}
    assert accepting == set(ACCEPTING[job])


@pytest.mark.parametrize("job", list(ACCEPTING), ids=lambda job: f"{job.domain}-{job.lateness}")
def test_the_twins_fire_alike(job: Job):
    emissions, dropped = job.simulated(sessions=False)
    assert (emissions, dropped) == job.simulated(sessions=True)
    assert len(emissions) > 4


@pytest.mark.parametrize(("variant", "strategy"), CASES)
def test_the_strategy_follows_the_varied_rule(spark, variant: Variant, strategy: str):
    varied = _log(spark, variant.job, strategy, variant)
    assert varied != variant.job.simulated(sessions=False)
    assert varied == _log(spark, variant.job, REFERENCE, variant)
