"""The console script on a real feature repo: every subcommand's --help, advise, timeline,
report (one self-contained page, opened in headless Chromium, with the view's calibration) and
check."""

from __future__ import annotations

import base64
import html
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from matplotlib.figure import Figure
from matplotlib.image import imread
from pyspark.sql import functions as F

from feast_stream_backfill.calibration import Calibration
from feast_stream_backfill.calibration.fit import LEVELS, Counts, Delay, Delays
from feast_stream_backfill.cli import cli, parse_durations, parse_key
from feast_stream_backfill.explain.anomalies import Anomalies
from feast_stream_backfill.explain.report import ViewReport, render_html
from tests.conftest import apply_in_process

REPO = Path(__file__).resolve().parent.parent / "feature_repo"
# (partition, offset, event time, user, amount); B = 5 s, 5-minute windows, no lateness.
ARCHIVE = [
    (0, 0, "10:01:00", "u1", 10.0),
    (0, 1, "10:04:00", "u1", 20.0),
    (0, 2, "10:06:00", "u2", 5.0),
    (0, 3, "10:12:00", "u1", 1.0),
    (0, 4, "10:03:00", "u1", 7.0),  # late: [10:00, 10:05) has fired at 10:06
    (1, 0, "10:02:00", "u2", 3.0),
    (1, 1, "10:07:00", "u1", 4.0),
    (1, 2, "10:13:00", "u2", 2.0),
]
COMMANDS = ["plan", "advise", "timeline", "report", "check"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark, redis_server, monkeypatch_module):
    path = tmp_path_factory.mktemp("feature_repo")
    for name in ("feature_store.yaml", "features.py"):
        shutil.copy(REPO / name, path / name)
    rows = [(p, o, f"2026-01-01 {t}", u, a) for p, o, t, u, a in ARCHIVE]
    spark.createDataFrame(
        rows, "partition int, offset long, ts string, user_id string, amount double"
    ).select(
        "partition", "offset", F.to_timestamp("ts").alias("event_time"), "user_id", "amount"
    ).write.format("delta").save(str(path / "data/archive/transactions"))
    spark.createDataFrame(
        [("u1", "2026-01-01 10:05:30"), ("u1", "2026-01-01 10:13:00")],
        "user_id string, ts string",
    ).select("user_id", F.to_timestamp("ts").alias("event_timestamp")).write.format("delta").save(
        str(path / "data/predictions")
    )
    # The enriched view's state table, which `feast apply` checks.
    spark.createDataFrame(
        [("u1", "2026-01-01 00:00:00", 0.02)], "user_id string, ts string, fee_rate double"
    ).select(
        "user_id",
        F.to_timestamp("ts").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        "fee_rate",
    ).write.format("delta").save(str(path / "data/state/user_tiers"))
    # A Redis database of the file's own: `check` finds nothing materialized there, whatever
    # other files in this process wrote for project payments (tests/test_feast_integration.py
    # materializes the same views into database 0).
    monkeypatch_module.setenv("FSB_REDIS", f"{redis_server},db=8")
    # `feast apply`, in this process (its Spark session is the tests').
    apply_in_process(path)
    return path


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def run(repo, *args: str):
    result = CliRunner().invoke(cli, ["--chdir", str(repo), *args], catch_exceptions=False)
    return result


@pytest.mark.parametrize("command", [None, *COMMANDS])
def test_help(command):
    result = CliRunner().invoke(cli, [command, "--help"] if command else ["--help"])
    assert result.exit_code == 0
    assert result.output.startswith("Usage: ")
    if command is None:
        assert all(c in result.output for c in COMMANDS)


def test_parsing():
    assert parse_durations("0,500ms,5s,1m,2h") == [0, 500, 5_000, 60_000, 7_200_000]
    assert parse_durations("none,30s", none=True) == [None, 30_000]
    assert parse_key("u1", ["user_id"]) == {"user_id": "u1"}
    with pytest.raises(Exception, match="not a duration"):
        parse_durations("5 parsecs")
    with pytest.raises(Exception, match="give exactly the view's keys"):
        parse_key("a=1", ["user_id", "b"])


def test_plan_says_which_strategy_runs_and_why(repo):
    fast = run(repo, "plan", "user_spend_5m")
    assert fast.exit_code == 0, fast.output
    assert fast.output.splitlines() == [
        "strategy: aligned-unsorted",
        "  aligned-unsorted: accepts",
        "  processing-time-unsorted: needs processing-time windows; the processing-time trigger",
        "  aligned-in-order: accepts",
        "  merging: needs session windows",
        "  over: needs OVER windows",
    ]
    enriched = run(repo, "plan", "user_fees_5m")  # a lookup and a derived column
    assert enriched.output.splitlines()[:2] == [
        "strategy: aligned-in-order",
        "  aligned-unsorted: needs no lookups or derived columns",
    ]


def test_advise(repo):
    predictions = str(repo / "data/predictions")
    result = run(
        repo, "advise", "user_spend_5m", "--B", "5s,3m", "--L", "0", "--predictions", predictions
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split() == [
        "B_s",
        "L_s",
        "T_s",
        "dropped",
        "pending",
        "emissions",
        "delay_median_s",
        "delay_p99_s",
        "delay_max_s",
        "points",
        "wrong",
    ]
    # Read at 10:12 (partition 0's clock), the record at 10:03 is dropped with B = 5 s
    # ([10:00, 10:05) fired at 10:07) and pending [10:10, 10:15) holds 2; with B = 3 min the
    # watermark is 10:09 at the end: nothing dropped, [10:05, 10:10) pending too (4).
    # Wrong points: 10:05:30 (nothing written yet, the naive join has 37.0) with both; 10:13
    # with B = 3 min only ([10:00, 10:05) fired then, the naive join has [10:05, 10:10)).
    assert [line.split()[:5] + line.split()[-2:] for line in lines[1:]] == [
        ["5.000", "0.000", "-", "1", "2", "2", "1"],
        ["180.000", "0.000", "-", "0", "4", "2", "2"],
    ]


def test_timeline_and_report(repo, spark, tmp_path):
    png = tmp_path / "u1.png"
    result = run(repo, "timeline", "user_spend_5m", "--key", "u1", "-o", str(png))
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 10_000 and result.output.strip().endswith(f"drawn to {png}")
    # The view calibrated (where `calibrate` keeps it): writes 0 to 10 s after the emissions.
    calibration = Calibration(
        Counts(4, 4, 0, 0, 0, 0),
        Delays(Delay(5_000, 4_000, 6_000, (500, 9_500)), None, None, [10_000 * x for x in LEVELS]),
        {"operator_delay": "5000 ms"},
        [],
        None,
    )
    kept = repo / "data/emission_log/payments/user_spend_5m_calibration"
    calibration.store(spark, str(kept))
    page = tmp_path / "report.html"
    # L = 0 alone: the default Bs (0, the job's, 30 s) without the sorted path's lateness cells
    try:
        result = run(repo, "report", "user_spend_5m", "--L", "0", "-o", str(page))
    finally:
        shutil.rmtree(kept)
    assert result.exit_code == 0, result.output
    text = page.read_text()
    against = text.index("<h3>Against the live job</h3>")
    assert text.index("What to look at") < against < text.index("Watermark bound B")
    assert all(html.escape(line) in text[against:] for line in calibration.summary())
    assert "has no calibration" not in text
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(images) == 2 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert text.count("<table") >= 2 and "What to look at" in text
    assert '<pre class="plan">strategy: aligned-unsorted' in text
    assert 'src="http' not in text and "<link" not in text  # self-contained
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed: scripts/setup.sh installs Debian's")
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    pixels = imread(shot)[..., :3]
    ink = (pixels.mean(axis=2) < 0.9).mean()  # share of pixels that are not near white
    assert 0.01 < ink < 0.9 and len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50


def test_a_view_without_calibration_is_told_how_to_make_one():
    nothing = pd.DataFrame()
    found = Anomalies(nothing, {"ahead": 0, "behind": 0}, nothing, nothing, 0, 0)
    view = ViewReport("user_spend_5m", nothing, found, Figure(), {"user_id": "u1"}, Figure(), "")
    text = render_html([view])
    assert "Against the live job" not in text
    assert "user_spend_5m has no calibration" in text
    assert "<code>feast-stream-backfill calibrate user_spend_5m</code>" in text


def test_check_counts_mismatches_before_materialization(repo):
    # Nothing materialized: Redis has no value where the training join has one.
    result = run(repo, "check", "user_spend_5m", "--at", "2026-01-01T10:20:00")
    assert result.exit_code == 1
    assert "2 keys compared" in result.stdout
    assert re.search(r"spend_5m\s+2 mismatches", result.stdout)
