"""The plugin through Feast's own commands, against a real redis-server.

Archive (B = 5 s, 5-minute windows, 200 ms watermark ticks, D1 = D2 = 0)::

    p0: u1 10:00:10 $10, u1 10:01:00 $20, u1 10:04:59 $5, u2 10:05:30 $7, u1 10:10:30 $1
    p1: u2 10:02:00 $3,  u1 10:06:00 $4,  u2 10:10:10 $2

Window [10:00, 10:05) fires when every partition has seen et >= 10:04:59.999 + 5 s + 1 ms
= 10:05:05: p0 at 10:05:30, p1 at 10:06:00, so on the tick at 10:06:00. [10:05, 10:10)
needs 10:10:05: p0 at 10:10:30, p1 at 10:10:10 -> 10:10:30. [10:10, 10:15) never fires.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from feast import FeatureStore
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin.consistency import compare

REPO = Path(__file__).resolve().parent.parent / "feature_repo"
FEAST = str(Path(sys.executable).parent / "feast")
FEATURES = [
    "user_spend_5m:spend_5m",
    "user_spend_5m:transactions_5m",
    "user_spend_5m:max_amount_5m",
]

ARCHIVE = [
    (0, 0, "10:00:10", "u1", 10.0),
    (0, 1, "10:01:00", "u1", 20.0),
    (0, 2, "10:04:59", "u1", 5.0),
    (0, 3, "10:05:30", "u2", 7.0),
    (0, 4, "10:10:30", "u1", 1.0),
    (1, 0, "10:02:00", "u2", 3.0),
    (1, 1, "10:06:00", "u1", 4.0),
    (1, 2, "10:10:10", "u2", 2.0),
]


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark, redis_server):
    path = tmp_path_factory.mktemp("feature_repo")
    for name in ("feature_store.yaml", "features.py"):
        shutil.copy(REPO / name, path / name)
    rows = [(p, o, f"2026-01-01 {hms}", u, a) for p, o, hms, u, a in ARCHIVE]
    spark.createDataFrame(
        rows, "partition int, offset long, ts string, user_id string, amount double"
    ).withColumn("event_time", F.to_timestamp("ts")).drop("ts").write.format("delta").save(
        str(path / "data/archive/transactions")
    )
    # The fee tiers of the enriched view user_fees_5m: u1 2% until 10:03, then 1%; u2 3%.
    tiers = [
        ("u1", "00:00", "10:03", 0.02),
        ("u1", "10:03", None, 0.01),
        ("u2", "00:00", None, 0.03),
    ]
    spark.createDataFrame(
        [(u, f"2026-01-01 {a}:00", b and f"2026-01-01 {b}:00", r) for u, a, b, r in tiers],
        "user_id string, valid_from string, valid_to string, fee_rate double",
    ).select(
        "user_id",
        F.to_timestamp("valid_from").alias("valid_from"),
        F.to_timestamp("valid_to").alias("valid_to"),
        "fee_rate",
    ).write.format("delta").save(str(path / "data/state/user_tiers"))
    os.environ["FSB_REDIS"] = redis_server
    feast("apply", cwd=path)
    return path


def feast(*args: str, cwd: Path) -> str:
    command = f"feast {' '.join(args)}"
    # PYTHONFAULTHANDLER: on SIGABRT, Python processes print their threads' stacks to stderr.
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(
        [FEAST, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            stacks = hung_stacks(process.pid)
            stdout, stderr = process.communicate()
            pytest.fail(f"{command} still running after 600 s:\n{stdout}\n{stderr}\n{stacks}")
    assert process.returncode == 0, f"{command} failed:\n{stdout}\n{stderr}"
    return stdout


def hung_stacks(pid: int) -> str:
    """What a hung command was doing: its JVMs' thread dumps (jstack), then SIGABRT to its
    Python processes (the command and Spark's Python workers), which print their stacks."""
    tree = descendants(pid)
    dumps = []
    for child in tree:
        if program(child).endswith(b"java") and shutil.which("jstack"):
            jstack = subprocess.run(["jstack", str(child)], capture_output=True, text=True)
            dumps.append(jstack.stdout + jstack.stderr)
    for child in [*reversed(tree), pid]:
        if b"python" in program(child):
            with contextlib.suppress(ProcessLookupError):  # ended meanwhile
                os.kill(child, signal.SIGABRT)
    return "\n".join(dumps)


def program(pid: int) -> bytes:
    """The process's program, as started (empty when it has ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return b""


def descendants(pid: int) -> list[int]:
    """Processes under ``pid``, parents before children (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue.extend(children.get(child, []))
    return found


def online(repo, users):
    store = FeatureStore(repo_path=str(repo))
    return store.get_online_features(FEATURES, [{"user_id": u} for u in users]).to_dict()


def test_materialize_writes_what_the_job_had_written_at_end(repo):
    # One view: each view costs a backfill and a write (user_fees_5m is materialized in the
    # enriched view's test; reruns changing nothing: test_materialize).
    feast(
        "materialize",
        "2026-01-01T00:00:00",
        "2026-01-01T10:08:00",
        "--views",
        "user_spend_5m",
        cwd=repo,
    )
    result = online(repo, ["u1", "u2", "u3"])
    assert result["spend_5m"] == [35.0, 3.0, None]
    assert result["transactions_5m"] == [3, 1, None]
    assert result["max_amount_5m"] == [20.0, 3.0, None]

    # The rest in this process (Feast's Python API, as a scheduler would call it): the CLI
    # path is the one above, and each feast command costs a JVM start.
    store = FeatureStore(repo_path=str(repo))
    # Continues from 10:08: window [10:05, 10:10) fired at 10:10:30.
    store.materialize_incremental(t("10:20:00"), ["user_spend_5m"])
    assert online(repo, ["u1", "u2"])["spend_5m"] == [4.0, 7.0]

    # Serving and training agree at 10:20 on every key and feature.
    mismatches = compare(store, "user_spend_5m", t("10:20:00"))
    assert mismatches.keys_compared == 2  # u1 and u2: every key that emitted by 10:20
    assert mismatches == {
        f: 0 for f in ("spend_5m", "transactions_5m", "mean_amount_5m", "max_amount_5m")
    }


def test_training_rows_see_a_window_only_once_it_fired(repo):
    entity_df = pd.DataFrame(
        {
            "user_id": ["u1", "u1", "u1", "u1", "u2", "u3"],
            "event_timestamp": [
                t("10:05:00"),
                t("10:06:00"),
                t("10:10:29"),
                t("10:10:30"),
                t("11:30:00"),
                t("10:07:00"),
            ],
            "label": [1, 0, 1, 0, 1, 0],
        }
    )
    store = FeatureStore(repo_path=str(repo))
    df = store.get_historical_features(entity_df=entity_df, features=FEATURES).to_df()
    assert list(df["label"]) == [1, 0, 1, 0, 1, 0], "rows keep their order and extra columns"
    # 10:05:00 is the window's end: an event-time join would show $35; Flink had not fired.
    # u2 at 11:30: the last value (10:10:30) is older than the view's 1 h ttl.
    spend = [None if pd.isna(v) else v for v in df["spend_5m"]]
    assert spend == [None, 35.0, 35.0, 4.0, None, None]


def test_materialize_against_a_dead_redis_fails_clearly(repo, monkeypatch):
    """In this process (the message is the command's; a feast command costs a JVM start)."""
    monkeypatch.setenv("FSB_REDIS", "127.0.0.1:1")
    store = FeatureStore(repo_path=str(repo))
    with pytest.raises(Exception, match="cannot reach the online store at '127.0.0.1:1'"):
        store.materialize(t("00:00:00"), t("10:08:00"))


def test_the_enriched_view_sums_fees_at_the_tier_rate_of_processing_time(repo):
    # user_fees_5m: sum(amount x fee_rate), the rate looked up at each record's pt (= et here).
    # [10:00, 10:05), fired at 10:06:00: u1 $10, $20 at 2%, $5 at 10:04:59 at 1% = 0.65;
    # u2 $3 at 3% = 0.09. [10:05, 10:10), fired at 10:10:30: u1 $4 x 1%, u2 $7 x 3%.
    store = FeatureStore(repo_path=str(repo))
    entity_df = pd.DataFrame(
        {
            "user_id": ["u1", "u2", "u1", "u2"],
            "event_timestamp": [t("10:06:00"), t("10:06:00"), t("10:10:30"), t("10:10:30")],
        }
    )
    df = store.get_historical_features(
        entity_df=entity_df, features=["user_fees_5m:fees_5m"]
    ).to_df()
    assert list(df["fees_5m"]) == pytest.approx([0.65, 0.09, 0.04, 0.21])
    # In this process: the CLI's materialize is the first test's (each costs a JVM start).
    store.materialize(t("00:00:00"), t("10:20:00"))
    online = store.get_online_features(
        ["user_fees_5m:fees_5m"], [{"user_id": "u1"}, {"user_id": "u2"}]
    ).to_dict()
    assert online["fees_5m"] == pytest.approx([0.04, 0.21])
