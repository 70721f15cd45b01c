"""A view whose job is a Flink SQL script (tests/sql_repo/user_spend.sql), through Feast's own
commands and the CLI, against the same job declared with Feast objects (B = 4.999 s: SQL's
watermark is ``ts - 5 s``, DataStream's ``max(ts) - B - 1 ms``).

Archive (D1 = D2 = 0, 200 ms ticks)::

    p0: u1 10:00:10 $10, u1 10:01:00 $20, u1 10:04:59 $5, u2 10:05:04.999 $7, u1 10:10:30 $1
    p1: u2 10:02:00 $3,  u1 10:05:05 $4,  u2 10:10:10 $2

SQL fires [10:00, 10:05) when every partition's watermark reaches 10:04:59.999: p0 at
10:05:04.999 - 5 s, p1 at 10:05:05 - 5 s, so on the tick at 10:05:05 (u1 $35, u2 $3); a
DataStream job with B = 5 s would wait for p0's 10:10:30. [10:05, 10:10) needs 10:09:59.999
+ 5 s: p0 at 10:10:30, p1 at 10:10:10, so 10:10:30 (u1 $4, u2 $7).
"""

from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from feast import FeatureStore
from pyspark.sql import functions as F

from feast_stream_backfill.cli import cli
from feast_stream_backfill.feast_plugin.apply_checks import ApplyCheckError, check_views
from feast_stream_backfill.feast_plugin.definitions import stream_job
from tests.conftest import apply_in_process
from tests.test_feast_integration import feast

REPO = Path(__file__).resolve().parent / "sql_repo"
ARCHIVE = [
    (0, 0, "10:00:10", "u1", 10.0),
    (0, 1, "10:01:00", "u1", 20.0),
    (0, 2, "10:04:59", "u1", 5.0),
    (0, 3, "10:05:04.999", "u2", 7.0),
    (0, 4, "10:10:30", "u1", 1.0),
    (1, 0, "10:02:00", "u2", 3.0),
    (1, 1, "10:05:05", "u1", 4.0),
    (1, 2, "10:10:10", "u2", 2.0),
]
FEATURES = ["spend_5m", "transactions_5m", "max_amount_5m"]


def t(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark, redis_server, monkeypatch_module):
    path = tmp_path_factory.mktemp("sql_repo")
    for name in ("feature_store.yaml", "features.py", "user_spend.sql", "user_totals.sql"):
        shutil.copy(REPO / name, path / name)
    rows = [(p, o, f"2026-01-01 {hms}", u, a) for p, o, hms, u, a in ARCHIVE]
    spark.createDataFrame(
        rows, "partition int, offset long, ts string, user_id string, amount double"
    ).withColumn("event_time", F.to_timestamp("ts")).drop("ts").write.format("delta").save(
        str(path / "data/archive/transactions")
    )
    monkeypatch_module.setenv("FSB_REDIS", redis_server)
    # `feast apply`, in this process (its Spark session is the tests').
    apply_in_process(path)
    return path


@pytest.fixture(scope="module")
def materialized(repo):
    """The repo after `feast materialize` of its four views to 10:20, the command in a process
    of its own: the tests that read the logs, the online store and the training rows share it."""
    feast("materialize", "2026-01-01T00:00:00", "2026-01-01T10:20:00", cwd=repo)
    return repo


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def emission_log(spark, repo: Path, view: str) -> list[tuple]:
    log = spark.read.format("delta").load(str(repo / f"data/emission_log/sql_payments/{view}"))
    return sorted(
        tuple(r) for r in log.select("user_id", "window_end", "emit_time", *FEATURES).collect()
    )


def test_materialize_and_training_equal_the_feast_declared_job(materialized, spark):
    repo = materialized
    sql = emission_log(spark, repo, "spend_sql")
    assert sql == emission_log(spark, repo, "spend_feast")
    assert [(u, e.strftime("%H:%M:%S.%f")[:-3], *v) for u, _, e, *v in sql] == [
        ("u1", "10:05:05.000", 35.0, 3, 20.0),
        ("u1", "10:10:30.000", 4.0, 1, 4.0),
        ("u2", "10:05:05.000", 3.0, 1, 3.0),
        ("u2", "10:10:30.000", 7.0, 1, 7.0),
    ]

    store = FeatureStore(repo_path=str(repo))
    online = {
        view: store.get_online_features(
            [f"{view}:{f}" for f in FEATURES], [{"user_id": "u1"}, {"user_id": "u2"}]
        ).to_dict()
        for view in ("spend_sql", "spend_feast")
    }
    assert online["spend_sql"] == online["spend_feast"]
    assert online["spend_sql"]["spend_5m"] == [4.0, 7.0]

    entity_df = pd.DataFrame(
        {
            "user_id": ["u1", "u1", "u2", "u1"],
            "event_timestamp": [t("10:05:04.999"), t("10:05:05"), t("10:07:00"), t("10:10:30")],
        }
    )
    frames = {
        view: store.get_historical_features(
            entity_df=entity_df, features=[f"{view}:{f}" for f in FEATURES]
        ).to_df()
        for view in ("spend_sql", "spend_feast")
    }
    pd.testing.assert_frame_equal(frames["spend_sql"], frames["spend_feast"])
    spend = [None if pd.isna(v) else v for v in frames["spend_sql"]["spend_5m"]]
    assert spend == [None, 35.0, 3.0, 4.0]


def test_an_unbounded_group_by_equals_its_feast_declared_processing_time_sessions(
    materialized, spark
):
    """user_totals.sql: every record updates its user's totals at its processing time (its
    partition's highest event time so far); a state expires 5 min after its last update.
    u1: 10:00:10 $10, 10:01:00 $30, 10:04:59 $35, p1's 10:05:05 $39, then 10:10:30, past
    10:05:05 + 5 min: afresh, $1. u2: 10:02:00 $3, 10:05:04.999 $10, 10:10:10 (past
    10:10:04.999): afresh, $2."""
    repo = materialized
    logs = {
        view: sorted(
            tuple(r)
            for r in spark.read.format("delta")
            .load(str(repo / f"data/emission_log/sql_payments/{view}"))
            .select("user_id", "emit_time", "total_spend", "total_transactions")
            .collect()
        )
        for view in ("totals_sql", "totals_feast")
    }
    assert logs["totals_sql"] == logs["totals_feast"]
    assert [(u, e.strftime("%H:%M:%S.%f")[:-3], *v) for u, e, *v in logs["totals_sql"]] == [
        ("u1", "10:00:10.000", 10.0, 1),
        ("u1", "10:01:00.000", 30.0, 2),
        ("u1", "10:04:59.000", 35.0, 3),
        ("u1", "10:05:05.000", 39.0, 4),
        ("u1", "10:10:30.000", 1.0, 1),
        ("u2", "10:02:00.000", 3.0, 1),
        ("u2", "10:05:04.999", 10.0, 2),
        ("u2", "10:10:10.000", 2.0, 1),
    ]
    store = FeatureStore(repo_path=str(repo))
    entity_df = pd.DataFrame(
        {
            "user_id": ["u1", "u1", "u2", "u1"],
            "event_timestamp": [t("10:05:04.999"), t("10:05:05"), t("10:07:00"), t("10:10:30")],
        }
    )
    frames = {
        view: store.get_historical_features(
            entity_df=entity_df, features=[f"{view}:total_spend"]
        ).to_df()
        for view in ("totals_sql", "totals_feast")
    }
    pd.testing.assert_frame_equal(frames["totals_sql"], frames["totals_feast"])
    assert list(frames["totals_sql"]["total_spend"]) == [35.0, 39.0, 10.0, 1.0]
    online = store.get_online_features(
        ["totals_sql:total_spend"], [{"user_id": "u1"}, {"user_id": "u2"}]
    ).to_dict()
    assert online["total_spend"] == [1.0, 2.0]


def test_the_cli_backfills_the_script_and_the_view_alike(repo, spark, tmp_path):
    runner = CliRunner()
    out = tmp_path / "log"
    archive = repo / "data/archive/transactions"
    result = runner.invoke(
        cli,
        [
            "backfill",
            "--sql",
            str(repo / "user_spend.sql"),
            "--archive",
            f"transactions={archive}",
            "-o",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == f"4 emissions written to {out}\n"
    by_sql = spark.read.format("delta").load(str(out))
    # The explain commands take the script's job as any view's: tumbling, no lateness.
    result = runner.invoke(cli, ["--chdir", str(repo), "plan", "spend_sql"])
    assert result.stdout.startswith("strategy: aligned-unsorted\n"), result.output
    # The advisor at the script's bound: SQL's 5 s is the model's 4.999 s.
    result = runner.invoke(cli, ["--chdir", str(repo), "advise", "spend_sql"])
    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[-1].split()
    assert row[:6] == ["4.999", "0.000", "-", "0", "2", "4"], result.stdout
    result = runner.invoke(cli, ["--chdir", str(repo), "backfill", "spend_sql"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("4 emissions written to ")
    stored = spark.read.format("delta").load(str(repo / "data/emission_log/sql_payments/spend_sql"))
    columns = ["user_id", "window_end", "emit_time", *FEATURES]
    assert sorted(map(tuple, by_sql.select(columns).collect())) == sorted(
        map(tuple, stored.select(columns).collect())
    )


def test_the_cli_says_what_is_wrong(repo, tmp_path):
    runner = CliRunner()
    script = tmp_path / "job.sql"
    script.write_text((repo / "user_spend.sql").read_text().replace("TUMBLE(", "CUMULATE(", 1))
    result = runner.invoke(
        cli, ["backfill", "--sql", str(script), "--archive", "transactions=x", "-o", "y"]
    )
    assert result.exit_code == 2
    assert f"{script}: " in result.output and "CUMULATE" in result.output
    assert "line 28" in result.output
    result = runner.invoke(cli, ["backfill"])
    assert "give a VIEW of the feature repo, or --sql with a script" in result.output


def test_a_sql_view_that_disagrees_with_its_script_is_refused_by_name(repo, spark):
    store = FeatureStore(repo_path=str(repo))
    view = store.get_stream_feature_view("spend_sql")

    def refusal(change) -> str:
        changed = view.__copy__()
        change(changed)
        with pytest.raises(ValueError) as caught:
            stream_job(changed, repo)
        return str(caught.value)

    def extra_feature(v):
        v.features = [*v.features, v.features[0].__class__(name="other", dtype=v.features[0].dtype)]

    message = refusal(extra_feature)
    assert message == (
        "stream feature view 'spend_sql': its schema's features ['max_amount_5m', 'other', "
        "'spend_5m', 'transactions_5m'] are not the columns the script's INSERT aggregates "
        "['max_amount_5m', 'spend_5m', 'transactions_5m']"
    )

    def restated(v):
        v.tags = {**v.tags, "stream_backfill.allowed_lateness_ms": "1000"}

    assert "tag(s) ['stream_backfill.allowed_lateness_ms'] restate" in refusal(restated)

    def missing_script(v):
        v.tags = {**v.tags, "stream_backfill.sql": "nowhere.sql"}

    assert f"cannot read its Flink SQL script {repo / 'nowhere.sql'}" in refusal(missing_script)

    # feast apply's checks name the script, the construct, its line and column.
    (repo / "cumulate.sql").write_text(
        (repo / "user_spend.sql").read_text().replace("TUMBLE(", "CUMULATE(", 1)
    )
    cumulate = view.__copy__()
    cumulate.tags = {**view.tags, "stream_backfill.sql": "cumulate.sql"}
    with pytest.raises(ApplyCheckError) as caught:
        check_views(store.config, [cumulate])
    assert f"stream feature view 'spend_sql': Flink SQL script {repo / 'cumulate.sql'}: " in str(
        caught.value
    )
    assert "CUMULATE" in str(caught.value) and "line 28" in str(caught.value)
