"""``feast-stream-backfill calibrate VIEW`` on a real feature repo: the live job's writes
declared as a Feast FileSource, read back from the registry, paired with the view's emission
log; the fit printed, kept beside the log, and drawn."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from feast import FeatureStore
from matplotlib.image import imread
from pyspark.sql import functions as F

from feast_stream_backfill.calibration import load_calibration
from feast_stream_backfill.cli import cli
from tests.conftest import apply_in_process

REPO = Path(__file__).resolve().parent.parent / "feature_repo"
# (partition, offset, event time, user, amount); B = 5 s, 5-minute windows, no lateness. The
# watermark (the lower of the two partitions') passes 10:04:59.999 when partition 1 reads
# 10:07:00, and 10:09:59.999 when it reads 10:13:00: the backfill emits u1 [10:00, 10:05) = 30
# and u2 [10:00, 10:05) = 3 at 10:07:00, u2 [10:05, 10:10) = 5 and u1 [10:05, 10:10) = 4 at
# 10:13:00 (the ticks at those instants).
ARCHIVE = [
    (0, 0, "10:01:00", "u1", 10.0),
    (0, 1, "10:04:00", "u1", 20.0),
    (0, 2, "10:06:00", "u2", 5.0),
    (0, 3, "10:12:00", "u1", 1.0),
    (1, 0, "10:02:00", "u2", 3.0),
    (1, 1, "10:07:00", "u1", 4.0),
    (1, 2, "10:13:00", "u2", 2.0),
]
# What the live job wrote (its output topic): 2 s, 3 s, 4 s and 5 s after the backfill's
# emissions, the firing stamped 1 s before each write; u2's second window written twice.
WRITES = [
    ("u1", "10:00:00", "10:05:00", 30.0, "10:07:02"),
    ("u2", "10:00:00", "10:05:00", 3.0, "10:07:03"),
    ("u2", "10:05:00", "10:10:00", 5.0, "10:13:04"),
    ("u2", "10:05:00", "10:10:00", 5.0, "10:20:00"),
    ("u1", "10:05:00", "10:10:00", 4.0, "10:13:05"),
]
DECLARED = """

from feast_stream_backfill.feast_plugin import calibration_tags, observed_writes_tags

user_spend_5m_writes_renamed = FileSource(
    name="user_spend_5m_writes_renamed",
    path="data/live/user_spend_5m",
    file_format=DeltaFormat(),
    timestamp_field="written_at",
    field_mapping={"spend": "spend_5m"},
    tags=observed_writes_tags(processing_time_column="fired_at"),
)
user_spend_5m.tags.update(calibration_tags("user_spend_5m_writes_renamed"))

from feast import FeatureService
from feast.feature_logging import LoggingConfig
from feast.infra.offline_stores.file_source import FileLoggingDestination

spend_served = FeatureService(
    name="spend_served",
    features=[user_spend_5m],
    logging_config=LoggingConfig(destination=FileLoggingDestination(path="data/served")),
)
"""
# Requests Feast logged for the view (user, instant, the spend served; the other features as
# the backfill has them for that value): u1's first value served 5 s after the backfill's
# emission (written by then), u1's first value again 1 s after its second emission (not yet
# written), u2's second value 6 s after it, and nothing for u1 before its first emission.
SERVED = [
    ("u1", "10:07:05", 30.0),
    ("u1", "10:13:01", 30.0),
    ("u2", "10:13:06", 5.0),
    ("u1", "10:06:00", None),
]
VALUES = {30.0: (2, 15.0, 20.0), 5.0: (1, 5.0, 5.0), None: (None, None, None)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory, spark):
    path = tmp_path_factory.mktemp("feature_repo")
    shutil.copy(REPO / "feature_store.yaml", path / "feature_store.yaml")
    features = (REPO / "features.py").read_text() + DECLARED
    (path / "features.py").write_text(features)
    rows = [(p, o, f"2026-01-01 {t}", u, a) for p, o, t, u, a in ARCHIVE]
    spark.createDataFrame(
        rows, "partition int, offset long, ts string, user_id string, amount double"
    ).select(
        "partition", "offset", F.to_timestamp("ts").alias("event_time"), "user_id", "amount"
    ).write.format("delta").save(str(path / "data/archive/transactions"))
    day = "2026-01-01 "
    writes = spark.createDataFrame(
        [(u, day + s, day + e, v, day + w) for u, s, e, v, w in WRITES],
        "user_id string, s string, e string, spend double, w string",
    )
    # the view's other features, as the backfill has them (calibration compares them all)
    others = {"u1": (2, 15.0, 20.0), "u2": (1, 3.0, 3.0)}
    later = {"u1": (1, 4.0, 4.0), "u2": (1, 5.0, 5.0)}
    shape = "user_id string, s string, transactions long, mean double, largest double"
    extra = spark.createDataFrame(
        [(u, day + "10:00:00", *v) for u, v in others.items()]
        + [(u, day + "10:05:00", *v) for u, v in later.items()],
        shape,
    )
    writes.join(extra, ["user_id", "s"]).select(
        "user_id",
        F.to_timestamp("s").alias("window_start"),
        F.to_timestamp("e").alias("window_end"),
        "spend",
        F.col("transactions").alias("transactions_5m"),
        F.col("mean").alias("mean_amount_5m"),
        F.col("largest").alias("max_amount_5m"),
        F.to_timestamp("w").alias("written_at"),
        (F.to_timestamp("w") - F.expr("INTERVAL 1 SECOND")).alias("fired_at"),
    ).write.format("delta").save(str(path / "data/live/user_spend_5m"))
    served = [(u, day + t, v, *VALUES[v], 3 if v is None else 1) for u, t, v in SERVED]
    spark.createDataFrame(
        served,
        "user_id string, t string, s double, n long, m double, x double, status int",
    ).select(
        "user_id",
        F.to_timestamp("t").alias("__log_timestamp"),
        *(
            column
            for feature, value in [
                ("spend_5m", "s"),
                ("transactions_5m", "n"),
                ("mean_amount_5m", "m"),
                ("max_amount_5m", "x"),
            ]
            for column in (
                F.col(value).alias(f"user_spend_5m__{feature}"),
                F.col("status").alias(f"user_spend_5m__{feature}__status"),
            )
        ),
    ).write.parquet(str(path / "data/served"))
    spark.createDataFrame(
        [("u1", "2026-01-01 00:00:00", 0.02)], "user_id string, ts string, fee_rate double"
    ).select(
        "user_id",
        F.to_timestamp("ts").alias("valid_from"),
        F.lit(None).cast("timestamp").alias("valid_to"),
        "fee_rate",
    ).write.format("delta").save(str(path / "data/state/user_tiers"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FSB_REDIS", "localhost:6379")
        apply_in_process(path)
    return path


@pytest.fixture(scope="module")
def calibrated(repo):
    """``calibrate user_spend_5m`` run once: its output and picture."""
    picture = repo / "calibration.png"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FSB_REDIS", "localhost:6379")
        result = CliRunner().invoke(
            cli, ["--chdir", str(repo), "calibrate", "user_spend_5m", "-o", str(picture)]
        )
    assert result.exit_code == 0, result.output
    return result.output, picture


def test_calibrate_fits_the_delays_keeps_the_fit_and_draws_it(repo, spark, calibrated):
    out, picture = calibrated
    assert "writes read 5: 4 match the backfill" in out
    assert "1 repeat a value" in out
    # delays 2, 3, 4, 5 s: the median read by percentile_approx is the lower middle one
    assert "write time - backfilled emit time: +3.000 s" in out
    # the requests, placed: two as the backfill, one its previous value, one before the first
    assert (
        "requests read 4: served the backfill's value 2, its previous value 1, its next 0, "
        "nothing before the first 1; none of these 0 (0.00%)"
    ) in out
    # Under the writes' residuals (2-5 s), the requests at 5 s, 1 s, 6 s past their value's
    # emission and 60 s before the first: 1 s is uncertain (F = 0), the others sure.
    assert "training values uncertain (probability < 0.95): 25.00% of the logged requests" in out
    assert "firing to write (D3): +1.000 s" in out
    assert "read later than the backfill assumes (D2): +2.000 s" in out
    assert "tags to set: min_delay=2000 ms, operator_delay=1000 ms" in out
    kept = load_calibration(
        spark, str(repo / "data/emission_log/payments/user_spend_5m_calibration")
    )
    assert kept.counts.matched == 4 and kept.delays.sink.median == 1000
    assert kept.serves.counts.requests == 4 and kept.uncertain.share == 0.25
    image = imread(picture)
    assert image.shape[0] > 300 and image[..., :3].std() > 0.05  # drawn, not blank


def test_a_view_without_observed_writes_is_told_what_to_declare(repo, monkeypatch):
    monkeypatch.setenv("FSB_REDIS", "localhost:6379")
    result = CliRunner().invoke(cli, ["--chdir", str(repo), "calibrate", "user_fees_5m"])
    assert result.exit_code == 2
    assert "no 'stream_backfill.observed_writes' tag" in result.output


def test_training_rows_get_the_probability_the_live_job_showed_them(repo, calibrated, monkeypatch):
    # The kept residuals are 2, 3, 4 and 5 s: F is 0 below 2 s, 0.25 at 2 s, 0.5 at 3 s,
    # 0.75 at 4 s, 1 at 5 s, and rises by 0.005 (one level) between those.
    monkeypatch.setenv("FSB_REDIS", "localhost:6379")
    store = FeatureStore(repo_path=str(repo))
    asked = ["10:06:00", "10:07:01", "10:07:03", "10:13:02.500"]
    entity_df = pd.DataFrame(
        {
            "user_id": ["u1"] * len(asked),
            "event_timestamp": pd.to_datetime(
                [f"2026-01-01T{t}" for t in asked], utc=True, format="ISO8601"
            ),
        }
    )
    job = store.get_historical_features(entity_df, ["user_spend_5m:spend_5m"])
    plain = job.to_df()
    rows = job.with_probabilities().to_df()
    assert list(rows["spend_5m"].fillna(-1)) == [-1, 30.0, 30.0, 4.0]
    assert list(plain.columns) + ["user_spend_5m__visible_probability"] == list(rows.columns)
    expected = [
        1.0,  # before u1's first emission (10:07:00) nothing was visible: 1 - F(-60 s)
        0.0,  # written 2 s after it at the earliest: F(1 s)
        0.5,  # F(3 s), and u1's next emission (10:13:00) is far off
        0.2525,  # the last emission, 2.5 s after it: F(2.5 s)
    ]
    assert list(rows["user_spend_5m__visible_probability"]) == pytest.approx(expected)


def test_a_view_never_calibrated_is_refused_named(repo, monkeypatch):
    monkeypatch.setenv("FSB_REDIS", "localhost:6379")
    store = FeatureStore(repo_path=str(repo))
    entity_df = pd.DataFrame(
        {"user_id": ["u1"], "event_timestamp": pd.to_datetime(["2026-01-01 10:10"], utc=True)}
    )
    job = store.get_historical_features(entity_df, ["user_fees_5m:fees_5m"])
    with pytest.raises(ValueError, match="'user_fees_5m' has no calibration"):
        job.with_probabilities().to_df()
