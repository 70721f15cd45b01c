"""The Spark backfill against the reference simulator on random archives: identical logs.

Profiles: ``ci`` (default, bounded) and ``long`` (HYPOTHESIS_PROFILE=long: 2000 examples, or
HYPOTHESIS_MAX_EXAMPLES; a few seconds each, as every example is a real Spark backfill).
"""

from __future__ import annotations

import os
from dataclasses import replace

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    EventTimeTrigger,
    PerRecordTrigger,
    ProcessingTimeModel,
    ProcessingTimeTrigger,
    SessionWindows,
    SlidingWindows,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
    backfill,
)
from tests.conftest import collect_log
from tests.reference_simulator import Job, Record, simulate

settings.register_profile(
    "ci",
    max_examples=25,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
settings.register_profile(
    "long",
    max_examples=int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "2000")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@st.composite
def partitions(draw, topic: str, partition: int) -> list[Record]:
    """Roughly increasing event times with jitter, some severely late, some copies; some
    partitions start late or pause (they may go idle)."""
    n = draw(st.integers(0, 12))
    step = draw(st.sampled_from([1, 5, 20]))
    start = draw(st.sampled_from([0, 0, 0, 500]))
    pause_at, pause = draw(st.integers(0, 12)), draw(st.sampled_from([0, 0, 400, 1500]))
    out, offset = [], -1
    for i in range(n):
        offset += draw(st.sampled_from([1, 1, 3]))  # compacted topics have offset gaps
        jitter = draw(st.integers(-30, 30))
        late = draw(st.sampled_from([0] * 9 + [draw(st.integers(50, 400))]))
        et = max(0, start + (pause if i >= pause_at else 0) + i * step * 5 + jitter - late)
        out.append(
            Record(
                topic,
                partition,
                offset,
                et,
                draw(st.sampled_from("abc")),
                float(draw(st.integers(1, 9))),
            )
        )
    copies = draw(st.lists(st.sampled_from(out), max_size=2)) if out else []
    return out + copies


@st.composite
def archives(draw) -> list[Record]:
    topics = draw(st.sampled_from([["t1"], ["t1", "t2"]]))
    records = []
    for topic in topics:
        for p in range(draw(st.integers(1, 3))):
            records += draw(partitions(topic, p))
    return records


jobs = st.builds(
    Job,
    size=st.sampled_from([10, 50, 100, 300]),
    slide=st.sampled_from([0, 0, 20, 35]),
    domain=st.sampled_from(["event", "event", "processing"]),
    trigger=st.sampled_from(["default", "default", "per_record"]),
    combine=st.sampled_from(["min", "min", "max"]),
    topic_bounds=st.sampled_from([(), (), (("t2", 40),), (("t1", 0), ("t2", 15))]),
    window_offset=st.sampled_from([0, 7]),
    bound=st.sampled_from([0, 5, 30]),
    interval=st.sampled_from([1, 7, 50, 200]),
    emission=st.sampled_from(["periodic", "on_event"]),
    lateness=st.sampled_from([0, 0, 20, 100]),
    min_gap=st.sampled_from([0, 0, 1, 3]),
    min_delay=st.sampled_from([0, 10]),
    operator_delay=st.sampled_from([0, 5]),
    idleness=st.sampled_from([0, 10, 60, 300]),
    gap=st.sampled_from([0, 0, 15, 60]),
)


def modelled(job: Job, records: list[Record]) -> Job:
    """Idleness is modelled for one topic combined by MIN (StreamJob refuses the rest)."""
    if job.combine == "max" or len({r.topic for r in records}) > 1:
        return replace(job, idleness=0)
    return job


def spark_backfill(spark, records: list[Record], job: Job):
    topics = []
    for name in sorted({r.topic for r in records}):
        rows = [(r.partition, r.offset, r.et, r.key, r.value) for r in records if r.topic == name]
        df = spark.createDataFrame(
            rows, "partition int, offset long, et long, user string, amount double"
        )
        bound = dict(job.topic_bounds).get(name)
        topics.append(
            ArchivedTopic(
                name,
                out_of_orderness_ms=bound,
                dataframe=df.withColumn("event_time", F.timestamp_millis("et")).drop("et"),
            )
        )
    spec = StreamJob(
        topics=topics,
        keys=["user"],
        window=(
            SessionWindows(job.gap, job.domain)
            if job.gap
            else SlidingWindows(job.size, job.slide, job.window_offset, job.domain)
            if job.slide
            else TumblingWindows(job.size, job.window_offset, job.domain)
        ),
        aggregations=[Aggregation("amount", f, f) for f in ("sum", "min", "max")],
        trigger=(
            PerRecordTrigger(job.lateness)
            if job.trigger == "per_record"
            else EventTimeTrigger(job.lateness)
            if job.domain == "event"
            else ProcessingTimeTrigger()
        ),
        watermark=WatermarkStrategy(
            job.bound, job.interval, job.emission, job.combine, job.idleness or None
        ),
        processing_time=ProcessingTimeModel(job.min_gap, job.min_delay),
        operator_delay_ms=job.operator_delay,
    )
    result = backfill(spark, spec)
    return collect_log(result)


@given(records=archives(), job=jobs)
def test_spark_backfill_equals_reference_simulator(spark, records, job):
    if not records:
        return  # an empty archive is refused; test_bad_input covers it
    job = modelled(job, records)
    expected_emissions, expected_dropped = simulate(records, job)
    emissions, dropped = spark_backfill(spark, records, job)
    order = lambda e: (e[0], e[3], e[4])  # noqa: E731  per key: (emit_time, emit_sequence)
    assert sorted(emissions, key=order) == sorted(expected_emissions, key=order)
    assert dropped == expected_dropped


def test_simulator_reproduces_the_hand_computed_example():
    # tests/test_event_time_windows.py's archive, by the simulator: same expectations.
    rows = [
        (0, 0, 1, "a", 1.0),
        (0, 1, 4, "a", 2.0),
        (0, 2, 12, "a", 4.0),
        (0, 3, 25, "a", 8.0),
        (1, 0, 2, "a", 16.0),
        (1, 1, 30, "b", 32.0),
        (1, 2, 31, "b", 64.0),
        (1, 3, 7, "a", 128.0),
    ]
    records = [Record("t", *r) for r in rows]
    emissions, dropped = simulate(records, Job(size=10, interval=10))
    assert emissions == [
        ("a", 0, 10, 30, 0, "on_time", 3, 19.0, 1.0, 16.0),
        ("a", 10, 20, 30, 1, "on_time", 1, 4.0, 4.0, 4.0),
    ]
    assert dropped == {("a", 0): 1}
