"""The command line's inputs: ``--predictions`` in any table format it can read, refused at
once when it is none; ``check`` says what instant the online store was materialized up to; a
pandas entity_df with nanosecond timestamps reaches Spark without a warning."""

from __future__ import annotations

import re
import warnings
from datetime import datetime, timezone

import click
import pandas as pd
import pytest
from click.testing import CliRunner
from feast import FeatureStore

from feast_stream_backfill.cli import cli
from feast_stream_backfill.explain.predictions import PredictionsTable
from feast_stream_backfill.feast_plugin.entity_rows import entity_frame
from tests.test_explain_cli import monkeypatch_module, repo  # noqa: F401  (fixtures)

POINTS = pd.DataFrame(
    {
        "user_id": ["u1", "u1"],
        "event_timestamp": pd.to_datetime(["2026-01-01 10:05:30", "2026-01-01 10:13:00"], utc=True),
    }
)


def run(repo_path, *args: str):
    return CliRunner().invoke(cli, ["--chdir", str(repo_path), *args])


@pytest.mark.parametrize("command", ["advise", "report"])
def test_predictions_that_are_no_table_are_refused_before_anything_is_read(tmp_path, command):
    # No feature_store.yaml in tmp_path: had the command started, it would say so instead.
    (tmp_path / "points").mkdir()
    (tmp_path / "points/notes.txt").write_text("u1")
    for given, said in [
        (tmp_path / "missing", f"no file or directory at {tmp_path / 'missing'}"),
        (tmp_path / "points", f"{tmp_path / 'points'} is not a Delta table (no _delta_log)"),
    ]:
        result = run(tmp_path, command, "v", "--predictions", str(given))
        assert result.exit_code == 2, result.output
        assert said in " ".join(result.output.split()) and "feature_store.yaml" not in result.output


def test_predictions_are_read_as_delta_parquet_or_csv(spark, tmp_path):
    POINTS.to_parquet(tmp_path / "points.parquet")  # pandas: nanosecond timestamps
    (tmp_path / "dir").mkdir()
    POINTS.to_parquet(tmp_path / "dir/part-0.parquet")
    POINTS.assign(event_timestamp=POINTS.event_timestamp.dt.strftime("%Y-%m-%d %H:%M:%S")).to_csv(
        tmp_path / "points.csv", index=False
    )
    spark.createDataFrame(POINTS).write.format("delta").save(str(tmp_path / "delta"))
    expected = [
        ("u1", datetime(2026, 1, 1, 10, 5, 30, tzinfo=timezone.utc)),
        ("u1", datetime(2026, 1, 1, 10, 13, tzinfo=timezone.utc)),
    ]
    for name, kind in [
        ("points.parquet", "parquet"),
        ("dir", "parquet"),
        ("points.csv", "csv"),
        ("delta", "delta"),
    ]:
        table = PredictionsTable.find(str(tmp_path / name))
        assert table.format == kind
        table.check(spark, ["user_id"], "event_timestamp")
        rows = table.read(spark).orderBy("event_timestamp").collect()
        assert [(r.user_id, r.event_timestamp.replace(tzinfo=timezone.utc)) for r in rows] == (
            expected
        ), name
    csv = PredictionsTable.find(str(tmp_path / "points.csv"))
    with pytest.raises(click.UsageError, match=r"no column\(s\) \['account'\]"):
        csv.check(spark, ["account"], "event_timestamp")
    with pytest.raises(click.UsageError, match="column 'user_id' is string, not a timestamp"):
        csv.check(spark, [], "user_id")


def test_advise_reads_parquet_predictions_and_refuses_a_missing_column_first(repo, tmp_path):  # noqa: F811
    points = tmp_path / "points.parquet"
    POINTS.to_parquet(points)
    args = ["advise", "user_spend_5m", "--B", "5s", "--L", "0", "--predictions", str(points)]
    result = run(repo, *args)
    assert result.exit_code == 0, result.output
    # As with the same points in Delta (test_explain_cli): 2 points, 1 wrong with B = 5 s.
    assert result.stdout.strip().splitlines()[1].split()[-2:] == ["2", "1"]
    result = run(repo, *args, "--prediction-time", "ts")
    assert result.exit_code == 2
    assert "no column(s) ['ts'] (the view's keys and --prediction-time)" in result.output


def test_report_judges_predictions_at_the_prediction_time_column_given(repo, tmp_path):  # noqa: F811
    points = tmp_path / "points.parquet"
    POINTS.rename(columns={"event_timestamp": "ts"}).to_parquet(points)
    page = tmp_path / "report.html"
    args = ["report", "user_spend_5m", "--B", "5s", "--L", "0", "-o", str(page)]
    result = run(repo, *args, "--predictions", str(points), "--prediction-time", "ts")
    assert result.exit_code == 0, result.output
    assert "wrong" in page.read_text()


def test_check_says_what_instant_the_online_store_was_materialized_to(
    repo,  # noqa: F811
    monkeypatch,
    redis_server,
):
    import redis

    # A Redis database of its own: test_explain_cli's check expects nothing materialized.
    monkeypatch.setenv("FSB_REDIS", f"{redis_server},db=7")
    at = datetime(2026, 1, 1, 10, 20, tzinfo=timezone.utc)
    try:
        FeatureStore(repo_path=str(repo)).materialize(
            datetime(2026, 1, 1, 9, tzinfo=timezone.utc), at, ["user_spend_5m"]
        )
        earlier = run(repo, "check", "user_spend_5m", "--at", "2026-01-01T10:10:00")
        assert "online store materialized up to: 2026-01-01T10:20:00+00:00" in earlier.stdout
        assert (
            "warning: the online store was materialized up to 2026-01-01T10:20:00+00:00, not "
            "--at 2026-01-01T10:10:00+00:00"
        ) in " ".join(earlier.stderr.split())
        same = run(repo, "check", "user_spend_5m")  # --at: the registry's instant
        assert same.exit_code == 0, same.output
        assert "compared at: 2026-01-01T10:20:00+00:00" in same.stdout
        assert "warning" not in same.stderr
        assert re.search(r"spend_5m\s+0 mismatches", same.stdout)
    finally:
        host, port = redis_server.split(":")
        redis.Redis(host=host, port=int(port), db=7).flushdb()


def test_a_nanosecond_entity_df_reaches_spark_in_microseconds_without_a_warning(spark):
    entity_df = pd.DataFrame(
        {
            "user_id": ["u1"],
            "event_timestamp": pd.to_datetime(["2026-01-01 10:05:30.123456789"], utc=True),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        row = entity_frame(spark, entity_df).first()
    assert row.event_timestamp.replace(tzinfo=timezone.utc) == datetime(
        2026, 1, 1, 10, 5, 30, 123456, tzinfo=timezone.utc
    )
    assert str(entity_df.event_timestamp.dtype) == "datetime64[ns, UTC]"  # the caller's, as given
