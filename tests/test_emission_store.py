"""Emission logs are reused while job and archive are unchanged, recomputed otherwise."""

from delta.tables import DeltaTable

from feast_stream_backfill import (
    Aggregation,
    ArchivedTopic,
    StreamJob,
    TumblingWindows,
    WatermarkStrategy,
)
from feast_stream_backfill.emission_store import ensure_emission_log, stored_metadata

ROWS = [(0, 0, 1, "a", 1.0), (0, 1, 12, "a", 2.0), (0, 2, 25, "a", 4.0)]


def test_log_is_reused_until_the_archive_changes(spark, make_archive, tmp_path):
    archive, log = str(tmp_path / "archive"), str(tmp_path / "log")
    make_archive(ROWS).write.format("delta").save(archive)
    job = StreamJob(
        topics=[ArchivedTopic("t", path=archive)],
        keys=["user"],
        window=TumblingWindows(10),
        aggregations=[Aggregation("amount", "sum", "s")],
        watermark=WatermarkStrategy(interval_ms=1),
    )

    def log_version() -> int:
        return DeltaTable.forPath(spark, log).history(1).first()["version"]

    first = sorted(
        tuple(r) for r in ensure_emission_log(spark, job, log).select("s", "emit_time").collect()
    )
    assert [s for s, _ in first] == [1.0, 2.0]  # [0,10) and [10,20) fire; [20,30) waits
    assert stored_metadata(spark, log)["stats"]["records_pending"] == 1
    ensure_emission_log(spark, job, log)
    assert log_version() == 0, "same job, same archive: no second backfill"

    make_archive([(0, 3, 40, "a", 8.0)]).write.format("delta").mode("append").save(archive)
    again = ensure_emission_log(spark, job, log)
    assert log_version() == 1
    assert sorted(r.s for r in again.collect()) == [1.0, 2.0, 4.0]  # [20,30) fires now
