"""The live-job logs of tests/conformance/live.py: real Flink at known, non-minimal processing
times, with a slow partition and a restart from a checkpoint.

With no lag, jitter, slow partition or restart the live writes are exactly the minimal
emission log (the reference simulator's and Flink's), which proves the generator; a restart
re-writes the windows fired since the checkpoint and leaves the writes before the failure
alone; a slow partition delays the windows its records fire by at least its extra lag.
"""

from __future__ import annotations

import shutil
from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conformance.live import (
    FEATURES,
    NOT_FOUND,
    PRESENT,
    VIEW,
    LiveParams,
    kafka_partition,
    live_log,
    murmur2,
    write_live_log,
)

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("java", "javac", "mvn")),
    reason="the Flink replay needs java, javac and mvn",
)

#: A few thousand records over half an hour, 1-minute windows (many firings), late records.
MINIMAL = LiveParams(
    records=3_000,
    keys=80,
    partitions=4,
    hours=0.5,
    seed=5,
    late_fraction=0.01,
    window_ms=60_000,
    d2_ms=700,
    d3_ms=40,
    lag_mean_ms=0,
    jitter_mean_ms=0,
    requests_per_key_hour=20,
)
RESTART = replace(MINIMAL, lag_mean_ms=300, jitter_mean_ms=15, restart_at_s=1_000)
SLOW = replace(MINIMAL, slow_from_s=300, slow_hours=0.3, slow_extra_ms=20_000)


@pytest.fixture(scope="module")
def minimal():
    return live_log(MINIMAL)


def test_murmur2_is_kafkas():
    # Kafka's own UtilsTest vectors.
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"abc") == 479470107
    assert kafka_partition("21", 8) == (-973932308 & 0x7FFFFFFF) % 8


def test_the_archive_is_a_keyed_topic(minimal):
    archive = minimal.archive
    assert archive.groupby("user_id")["partition"].nunique().max() == 1
    for _, part in archive.groupby("partition"):
        assert part["offset"].tolist() == list(range(len(part)))
        assert (part["event_time"].diff().dropna() < 0).any()  # out of order


def test_minimal_live_writes_are_the_minimal_emission_log(minimal):
    from tests.conformance.harness import Scenario, build, flink_log, run_flink
    from tests.reference_simulator import Record, processing_times, simulate

    records = [
        Record("transactions", int(p), int(o), int(et), key, amount)
        for p, o, et, key, amount in minimal.archive.itertuples(index=False)
    ]
    job = MINIMAL.job()
    timed = processing_times(records, job)
    reads = minimal.reads.set_index(["partition", "offset"])["pt"]
    assert all(reads[(r.partition, r.offset)] == pt for pt, r in timed)

    emissions, dropped = simulate(records, job)
    assert dropped, "no late record: the comparison would miss drops"
    expected = Counter((e[0], e[1], e[2], e[3], e[6], e[7], e[8], e[9]) for e in emissions)
    flink = flink_log(run_flink(build(), [Scenario("m", records, job)], [timed])[0], job)[0]
    assert Counter((e[0], e[1], e[2], e[3], e[6], e[7], e[8], e[9]) for e in flink) == expected

    w = minimal.writes
    assert (w["write_time"] == w["processing_time"] + MINIMAL.d3_ms).all()
    assert (w["mean_amount_5m"] == w["spend_5m"] / w["transactions_5m"]).all()
    got = Counter(
        zip(
            w["user_id"],
            w["window_start"],
            w["window_end"],
            w["write_time"],
            w["transactions_5m"],
            w["spend_5m"],
            w["min_amount_5m"],
            w["max_amount_5m"],
            strict=True,
        )
    )
    assert got == expected
    assert minimal.truth["restart"] is None and minimal.truth["slow_partition"] is None


def test_served_values_are_the_last_landed_write(minimal):
    served, writes = minimal.served, minimal.writes
    assert len(served) > 500
    assert set(served["__request_id"].str.len()) == {32}
    spend = f"{VIEW}__spend_5m"
    for row in served.sample(200, random_state=1).to_dict("records"):
        key, at = row["user_id"], row["__log_timestamp"]
        before = writes[(writes["user_id"] == key) & (writes["write_time"] <= at)]
        if before.empty:
            assert row[f"{spend}__status"] == NOT_FOUND and pd.isna(row[spend])
        else:  # every stamp distinct per key here: the landed write is the last
            last = before.loc[before["write_time"].idxmax()]
            assert row[f"{spend}__status"] == PRESENT
            assert row[spend] == last["spend_5m"]
            assert row[f"{spend}__timestamp"] == last["processing_time"]
    assert served.columns[1:4].tolist() == [spend, f"{spend}__timestamp", f"{spend}__status"]


def test_a_restart_rewrites_what_fired_since_the_checkpoint():
    restarted = live_log(RESTART)
    straight = live_log(replace(RESTART, restart_at_s=None))
    r = restarted.truth["restart"]
    checkpoint, failed, restored = r["checkpoint_at_ms"], r["failed_at_ms"], r["restored_at_ms"]
    assert r["records_read_again"] > 0

    # Before the failure: the very same writes (rows, order, jitter).
    before = restarted.writes[restarted.writes["processing_time"] < failed]
    unchanged = straight.writes[straight.writes["processing_time"] < failed]
    pd.testing.assert_frame_equal(before, unchanged)
    # Nothing while the job is down; then what fired between C and R is written again.
    w = restarted.writes
    assert not w["processing_time"].between(failed, restored - 1).any()
    window = ["user_id", "window_start", "window_end"]
    since = before[before["processing_time"] > checkpoint]
    assert len(since) > 0
    again = w[w["processing_time"] >= restored]
    rewritten = since.merge(again, on=window, suffixes=("", "_again"))
    assert len(rewritten) == len(since)
    assert (rewritten["write_time_again"] > restored).all()
    # The restored windows hold what the checkpoint and the records read again hold: the same.
    for name in FEATURES:
        assert (rewritten[name] == rewritten[f"{name}_again"]).all(), name
    # Later windows: the restored job fires what the job without a restart fired.
    later = w[w["window_start"] > since["window_end"].max()]
    expected = straight.writes[straight.writes["window_start"] > since["window_end"].max()]
    assert sorted(map(tuple, later[window + list(FEATURES)].to_numpy())) == sorted(
        map(tuple, expected[window + list(FEATURES)].to_numpy())
    )


def test_a_slow_partition_delays_the_windows_its_records_fire(minimal):
    counts = minimal.archive["partition"].value_counts()
    slow_partition = int(counts.idxmin())  # the sparsest: the one that decides most windows
    slow = live_log(replace(SLOW, slow_partition=slow_partition))
    s = slow.truth["slow_partition"]
    assert slow.truth["slow_partition"]["extra_ms"] % MINIMAL.interval_ms == 0

    # Where the slow partition decides a window in the minimal run (its threshold record, a new
    # maximum event time, read at et + D2, is the last partition's), within the stretch.
    archive = minimal.archive.merge(minimal.reads, on=["partition", "offset"])
    archive["max_et"] = archive.groupby("partition")["event_time"].cummax()
    decided = []
    for end in sorted(minimal.writes["window_end"].unique()):
        reached = archive[archive["max_et"] >= end + MINIMAL.bound_ms]
        first = reached.groupby("partition")["pt"].min()
        if len(first) == MINIMAL.partitions and first.idxmax() == slow_partition:
            if s["from_ms"] <= first.max() < s["until_ms"]:
                decided.append(end)
    assert len(decided) >= 3

    keys = set(minimal.archive.loc[minimal.archive["partition"] == slow_partition, "user_id"])
    on = ["user_id", "window_start", "window_end"]
    pairs = minimal.writes.merge(slow.writes, on=on, suffixes=("", "_slow"))
    ours = pairs[pairs["window_end"].isin(decided) & pairs["user_id"].isin(keys)]
    assert len(ours) > 0
    assert (ours["write_time_slow"] - ours["write_time"] >= s["extra_ms"]).all()
    # Before the stretch the two runs wrote the same.
    early = minimal.writes[minimal.writes["processing_time"] < s["from_ms"]]
    early_slow = slow.writes[slow.writes["processing_time"] < s["from_ms"]]
    pd.testing.assert_frame_equal(early.reset_index(drop=True), early_slow.reset_index(drop=True))
    # Nothing is written earlier than at the minimal processing times.
    assert (pairs["write_time_slow"] >= pairs["write_time"]).all()


def test_the_hand_checked_restart():
    # Two partitions, key a on 0 and b on 1, read at their event times (D2 = 0, no lag), 1 s
    # windows, B = 0, ticks every 100 ms. [0, 1000) fires on tick 1200 (b's 1150 is the last
    # threshold), [1000, 2000) on 2200. Checkpoint at 2000 (both partitions at offset 3), fail
    # at 2400, restore at 2900: offsets 4.. are read again at 2900, 2901 (1000 a second), then
    # 3100 and 3150 (their own times). Tick 2900 sees W = min(2099, 2149): [1000, 2000) fires
    # again from the checkpoint's state; [2000, 3000) on tick 3200, the archive's last.
    rows = [(0, o, et, "a", o + 1.0) for o, et in enumerate(range(100, 3101, 500))]
    rows += [(1, o, et, "b", 10.0 * (o + 1)) for o, et in enumerate(range(150, 3151, 500))]
    archive = pd.DataFrame(rows, columns=["partition", "offset", "event_time", "user_id", "amount"])
    p = LiveParams(
        start="1970-01-01T00:00:00Z",
        hours=0.001,
        window_ms=1000,
        bound_ms=0,
        interval_ms=100,
        d2_ms=0,
        d3_ms=5,
        lag_mean_ms=0,
        jitter_mean_ms=0,
        restart_at_s=2.4,
        restart_back_ms=400,
        downtime_ms=500,
    )
    log = live_log(p, archive)
    assert log.truth["restart"]["checkpoint_offsets"] == {0: 3, 1: 3}
    again = log.reads[log.reads["incarnation"] == 1].sort_values(["partition", "offset"])
    assert again["pt"].tolist() == [2900, 2901, 3100, 2900, 2901, 3150]
    got = sorted(
        log.writes[["user_id", "window_start", "processing_time", "write_time", "spend_5m"]]
        .itertuples(index=False, name=None)
    )  # fmt: skip
    assert got == sorted(
        [
            ("a", 0, 1200, 1205, 3.0),
            ("b", 0, 1200, 1205, 30.0),
            ("a", 1000, 2200, 2205, 7.0),
            ("b", 1000, 2200, 2205, 70.0),
            ("a", 1000, 2900, 2905, 7.0),  # written again after the restore
            ("b", 1000, 2900, 2905, 70.0),
            ("a", 2000, 3200, 3205, 11.0),
            ("b", 2000, 3200, 3205, 110.0),
        ]
    )


def test_written_out_as_the_plugin_and_feast_read_them(spark, tmp_path, minimal):
    write_live_log(minimal, tmp_path, spark)
    archive = spark.read.format("delta").load(str(tmp_path / "archive"))
    assert archive.dtypes == [
        ("partition", "int"),
        ("offset", "bigint"),
        ("event_time", "timestamp"),
        ("user_id", "string"),
        ("amount", "double"),
    ]
    assert archive.count() == len(minimal.archive)
    writes = spark.read.format("delta").load(str(tmp_path / "writes"))
    assert dict(writes.dtypes)["write_time"] == "timestamp"
    assert writes.count() == len(minimal.writes)
    served = pq.read_table(tmp_path / "served")
    assert served.schema.field("__log_timestamp").type.unit == "us"
    assert str(served.schema.field("__log_date").type) == "date32[day]"
    assert served.schema.field(f"{VIEW}__spend_5m__status").type == "int32"
    stamps = served.column(f"{VIEW}__spend_5m__timestamp").drop_null().cast("int64")
    assert (np.asarray(stamps) % 1000 == 0).all()  # Feast logs seconds
    truth = (tmp_path / "truth.json").read_text()
    assert '"bound_ms": 5000' in truth and '"window_size_ms": 60000' in truth
