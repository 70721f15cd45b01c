"""Flink SQL scripts read with Flink's parser and mapped onto StreamJob: the mapped subset,
the refusals, and SQL's watermark boundary (ts - B, where DataStream's is max(ts) - B - 1)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import pytest
from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String
from pyspark.sql import functions as F

from feast_stream_backfill import backfill
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.errors import BadArchiveError, UnsupportedSqlError
from feast_stream_backfill.feast_plugin import sql_tags, topics_tags
from feast_stream_backfill.feast_plugin.sql_views import sql_job
from feast_stream_backfill.flink_sql import job_from_sql
from feast_stream_backfill.flink_sql.mapping import NEVER_EXPIRES
from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.records import ArchivedTopic
from feast_stream_backfill.triggers import EventTimeTrigger, PerRecordTrigger, ProcessingTimeTrigger
from feast_stream_backfill.watermarks import WatermarkStrategy
from feast_stream_backfill.windows import (
    CumulativeWindows,
    OverWindows,
    SessionWindows,
    SlidingWindows,
    TumblingWindows,
)

SCRIPT = """SET 'pipeline.auto-watermark-interval' = '200ms';
CREATE TABLE transactions (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json',
        'scan.watermark.idle-timeout' = '1 min'%s);
INSERT INTO user_spend_5m
SELECT user_id, window_start, window_end, SUM(amount) AS spend_5m, COUNT(*) AS transactions_5m
FROM TABLE(%s)
GROUP BY user_id, window_start, window_end;
"""
TUMBLE = "TUMBLE(TABLE transactions, DESCRIPTOR(ts), INTERVAL '5' MINUTE)"
#: An unbounded aggregation, upserting each user's running spend with every transaction;
#: a user's state expires 10 minutes of processing time after its last update.
UNBOUNDED = """SET 'table.exec.state.ttl' = '10 min';
CREATE TABLE transactions (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3)
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json');
INSERT INTO user_spend
SELECT user_id, SUM(amount) AS spend, MAX(amount) AS largest
FROM transactions
GROUP BY user_id;
"""

#: An OVER aggregation: each transaction written with its user's spend in the hour up to it.
OVER = """CREATE TABLE transactions (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json');
INSERT INTO user_spend_1h
SELECT user_id, ts, SUM(amount) OVER w AS spend_1h, COUNT(*) OVER w AS transactions_1h
FROM transactions
WINDOW w AS (PARTITION BY user_id ORDER BY ts
  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW);
"""
HOUR = (
    "(PARTITION BY user_id ORDER BY ts RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW)"
)
TWO_HOURS = HOUR.replace("'1' HOUR", "'2' HOUR")


def script(window: str = TUMBLE, options: str = "") -> str:
    return SCRIPT % (options, window)


def archive(spark, rows: list[tuple[int, int, str, str, float]]) -> ArchivedTopic:
    values = ", ".join(f"({p}, {o}, '{ts}', '{u}', {a}D)" for p, o, ts, u, a in rows)
    records = spark.sql(
        "SELECT partition, offset, to_timestamp(ts) AS ts, user_id, amount FROM VALUES "
        f"{values} AS t(partition, offset, ts, user_id, amount)"
    )
    return ArchivedTopic("transactions", dataframe=records, timestamp_col="ts")


IN_ORDER = [
    (0, 0, "2026-01-01 10:00:10", "u1", 1.0),
    (0, 1, "2026-01-01 10:02:50", "u1", 2.0),
    (0, 2, "2026-01-01 10:05:10", "u2", 4.0),
    (0, 3, "2026-01-01 10:06:20", "u1", 8.0),
    (0, 4, "2026-01-01 10:10:40", "u2", 16.0),
    (0, 5, "2026-01-01 10:12:20", "u1", 32.0),
]


def hand_declared(topic: ArchivedTopic) -> StreamJob:
    """The DataStream job the example script is: B' = 5000 - 1 ms."""
    return StreamJob(
        topics=[topic],
        keys=["user_id"],
        window=TumblingWindows(size_ms=300_000),
        aggregations=[
            Aggregation("amount", "sum", "spend_5m"),
            Aggregation("user_id", "count", "transactions_5m"),
        ],
        trigger=EventTimeTrigger(),
        watermark=WatermarkStrategy(
            out_of_orderness_ms=4_999, interval_ms=200, idle_timeout_ms=60_000
        ),
    )


def test_the_example_maps_to_the_hand_declared_job_and_backfills_the_same(spark):
    topic = archive(spark, IN_ORDER)
    mapped = job_from_sql(spark, script(), {"transactions": topic})
    declared = hand_declared(topic)
    for field in ("topics", "keys", "window", "aggregations", "trigger", "watermark"):
        assert getattr(mapped, field) == getattr(declared, field), field
    logs = [
        backfill(spark, j).emissions.orderBy("user_id", "window_start") for j in (mapped, declared)
    ]
    assert logs[0].collect() == logs[1].collect()
    assert len(logs[0].collect()) == 3  # [10:00, 10:05) u1 and u2's [10:05, 10:10) fire


def test_a_hop_job_maps(spark):
    hop = "HOP(TABLE transactions, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)"
    job = job_from_sql(spark, script(hop), {"transactions": archive(spark, IN_ORDER)})
    assert job.window == SlidingWindows(size_ms=300_000, slide_ms=60_000)


def test_a_cumulate_job_maps(spark):
    cumulate = (
        "CUMULATE(TABLE transactions, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)"
    )
    job = job_from_sql(spark, script(cumulate), {"transactions": archive(spark, IN_ORDER)})
    assert job.window == CumulativeWindows(size_ms=300_000, step_ms=60_000)


def test_a_session_job_maps(spark):
    session = (
        "SESSION(TABLE transactions PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '5' MINUTE)"
    )
    job = job_from_sql(spark, script(session), {"transactions": archive(spark, IN_ORDER)})
    assert job.window == SessionWindows(gap_ms=300_000)


def test_an_over_aggregation_maps_named_or_inline(spark):
    """``RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW`` partitioned by user:
    the user is the key, the watermark the table's (B' = B - 1 ms), fired by the watermark
    without lateness; the window written in each aggregate maps the same."""
    topic = archive(spark, IN_ORDER)
    mapped = job_from_sql(spark, OVER, {"transactions": topic})
    assert mapped.topics == [topic]
    assert mapped.keys == ["user_id"]
    assert mapped.window == OverWindows(preceding_ms=3_600_000)
    assert mapped.trigger == EventTimeTrigger(0)
    assert mapped.watermark == WatermarkStrategy(out_of_orderness_ms=4_999)
    assert mapped.aggregations == [
        Aggregation("amount", "sum", "spend_1h"),
        Aggregation("user_id", "count", "transactions_1h"),
    ]
    inline = (
        OVER.replace("OVER w", f"OVER {HOUR}")
        .replace("WINDOW w AS (PARTITION BY user_id ORDER BY ts\n", "WHERE amount > 1;")
        .replace("  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW);\n", "")
    )
    filtered = job_from_sql(spark, inline, {"transactions": topic})
    assert filtered.window == mapped.window
    assert filtered.aggregations == mapped.aggregations
    assert (
        filtered.where
        == "(CASE WHEN isnan(`amount`) OR isnan(1) THEN false ELSE (`amount` > 1) END)"
    )


#: The frame of OVER's window clause, as written in the script.
OVER_FRAME = "\n  RANGE BETWEEN INTERVAL '1' HOUR PRECEDING AND CURRENT ROW"


@pytest.mark.parametrize(
    ("frame", "window"),
    [
        ("RANGE INTERVAL '1' HOUR PRECEDING", OverWindows(3_600_000)),
        ("RANGE BETWEEN INTERVAL '0' SECOND PRECEDING AND CURRENT ROW", OverWindows(0)),
        ("ROWS BETWEEN 5 PRECEDING AND CURRENT ROW", OverWindows(frame="rows", preceding_rows=5)),
        ("ROWS 0 PRECEDING", OverWindows(frame="rows", preceding_rows=0)),
        ("RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", OverWindows()),
        ("RANGE UNBOUNDED PRECEDING", OverWindows()),
        ("", OverWindows()),
        ("ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW", OverWindows(frame="rows")),
        ("ROWS UNBOUNDED PRECEDING", OverWindows(frame="rows")),
    ],
    ids=[
        "range-without-between",
        "range-0",
        "rows",
        "rows-0",
        "range-unbounded",
        "range-unbounded-without-between",
        "no-frame",
        "rows-unbounded",
        "rows-unbounded-without-between",
    ],
)
def test_each_over_frame_maps_named_or_inline(frame, window):
    """Each frame Flink runs over event time, up to the current row: a ``RANGE`` of time or
    ``ROWS`` before it, or either from ``UNBOUNDED PRECEDING`` (none written: ``RANGE``'s),
    with or without ``BETWEEN ... AND CURRENT ROW``; keyed and fired as the hour's range."""
    named = OVER.replace(OVER_FRAME, f"\n  {frame}" if frame else "")
    inline = named.replace(
        "OVER w", f"OVER (PARTITION BY user_id ORDER BY ts {frame})".replace(" )", ")")
    ).replace(named[named.index("\nWINDOW w AS") :], ";\n")
    assert "WINDOW" not in inline
    for sql in (named, inline):
        mapped = job_from_sql(None, sql, {"transactions": ArchivedTopic("transactions")})
        assert mapped.window == window
        assert mapped.keys == ["user_id"]
        assert mapped.trigger == EventTimeTrigger(0)
        assert mapped.watermark == WatermarkStrategy(out_of_orderness_ms=4_999)
        assert [a.name for a in mapped.aggregations] == ["spend_1h", "transactions_1h"]


def test_periodic_watermarks_over_out_of_order_records_are_refused(spark):
    rows = [*IN_ORDER[:2], (0, 2, "2026-01-01 10:01:00", "u1", 1.0)]
    with pytest.raises(UnsupportedSqlError, match="partition 0 offset 2 goes back"):
        job_from_sql(spark, script(), {"transactions": archive(spark, rows)})


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            script("SESSION(TABLE transactions, DESCRIPTOR(ts), INTERVAL '5' MINUTE)"),
            "line 9, column 19: a SESSION without PARTITION BY is not supported",
        ),
        (
            script(
                "SESSION(TABLE transactions PARTITION BY amount, DESCRIPTOR(ts), "
                "INTERVAL '5' MINUTE)"
            ),
            "line 10, column 1: a SESSION partitioned by amount grouped by user_id is not "
            "supported: the GROUP BY keys must be the PARTITION BY columns",
        ),
        (
            script(
                "CUMULATE(TABLE transactions, DESCRIPTOR(ts), INTERVAL '2' MINUTE, "
                "INTERVAL '5' MINUTE)"
            ),
            "line 7, column 13: a CUMULATE of size 300000 ms and step 120000 ms is not "
            "supported: Flink's sliced CUMULATE windows need the step to divide the size",
        ),
        (
            script().replace(
                "SUM(amount) AS", "SUM(amount) OVER (PARTITION BY user_id ORDER BY ts) AS"
            ),
            "line 10, column 1: GROUP BY with OVER aggregations is not supported: an OVER "
            "aggregation writes a row per record, a GROUP BY one per group",
        ),
        (
            OVER.replace("INTERVAL '1' HOUR PRECEDING", "CURRENT ROW"),
            "line 9, column 17: the OVER frame from CURRENT ROW is not supported: a frame from "
            "n PRECEDING or UNBOUNDED PRECEDING to the CURRENT ROW is mapped",
        ),
        (
            OVER.replace("CURRENT ROW", "INTERVAL '1' MINUTE FOLLOWING"),
            "line 9, column 49: the OVER frame's end INTERVAL '1' MINUTE FOLLOWING is not "
            "supported: a frame ending at the CURRENT ROW is mapped",
        ),
        (
            OVER.replace(
                OVER_FRAME, "\n  ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
            ),
            "line 9, column 40: the OVER frame's end UNBOUNDED FOLLOWING is not supported",
        ),
        (
            OVER.replace("RANGE BETWEEN INTERVAL '1' HOUR", "ROWS BETWEEN 1.5"),
            "line 9, column 16: the OVER frame of ROWS 1.5 PRECEDING is not supported: a whole "
            "number of rows >= 0 is mapped",
        ),
        (
            OVER.replace("INTERVAL '1' HOUR", "5"),
            "line 9, column 17: the OVER range 5 PRECEDING is not supported: a RANGE of "
            "INTERVAL 'n' unit >= 0 is mapped",
        ),
        (
            OVER.replace("RANGE BETWEEN INTERVAL '1' HOUR", "ROWS BETWEEN 5").replace(
                "CURRENT ROW)", "CURRENT ROW DISALLOW PARTIAL)"
            ),
            "line 8, column 13: an OVER window that DISALLOWs PARTIAL frames is not supported",
        ),
        (
            OVER.replace("ORDER BY ts", "ORDER BY ts DESC"),
            "line 8, column 35: an OVER window ordered by `ts` DESC is not supported",
        ),
        (
            "SET 'table.exec.unbounded-over.version' = '1';\n"
            + OVER.replace(OVER_FRAME, "\n  ROWS UNBOUNDED PRECEDING"),
            "line 1, column 1: SET 'table.exec.unbounded-over.version' is not supported",
        ),
        (
            OVER.replace("SELECT user_id, ts,", "SELECT user_id,")
            .replace("ts TIMESTAMP(3),", "ts TIMESTAMP(3), seen TIMESTAMP(3),")
            .replace("ORDER BY ts", "ORDER BY seen"),
            "line 8, column 44: ORDER BY seen is not supported: not the watermark's column ts",
        ),
        (
            OVER.replace("PARTITION BY user_id", "PARTITION BY amount"),
            "line 6, column 8: the column user_id is not supported: not a PARTITION BY key or "
            "the ORDER BY time column",
        ),
        (
            OVER.replace("COUNT(*) OVER w", f"COUNT(*) OVER {TWO_HOURS}"),
            "line 6, column 67: aggregates over different windows, one OVER (PARTITION BY "
            "`user_id` ORDER BY `ts` RANGE BETWEEN INTERVAL '2' HOUR PRECEDING AND CURRENT ROW) "
            "is not supported: every aggregate is mapped OVER one window",
        ),
        (
            OVER.replace(
                "COUNT(*) OVER w",
                "COUNT(*) OVER (PARTITION BY user_id ORDER BY ts ROWS 5 PRECEDING)",
            ),
            "line 6, column 67: aggregates over different windows, one OVER (PARTITION BY "
            "`user_id` ORDER BY `ts` ROWS 5 PRECEDING) is not supported",
        ),
        (
            OVER.replace("COUNT(*) OVER w", "COUNT(*)"),
            "line 6, column 53: the select item COUNT(*) AS `transactions_1h` beside OVER "
            "aggregations is not supported: every aggregate is OVER the same window",
        ),
        (
            OVER.replace("FROM transactions", f"FROM TABLE({TUMBLE})"),
            "line 7, column 6: OVER aggregations over TABLE(TUMBLE(TABLE `transactions`, "
            "DESCRIPTOR(`ts`), ... is not supported: OVER aggregations of a table are mapped",
        ),
        (
            "SET 'table.exec.state.ttl' = '1 h';\n" + OVER,
            "line 1, column 1: SET 'table.exec.state.ttl' with an OVER aggregation is not "
            "supported",
        ),
        (
            "SET 'table.exec.state.ttl' = '1 h';\n" + OVER.replace(OVER_FRAME, ""),
            "line 1, column 1: SET 'table.exec.state.ttl' with an OVER aggregation is not "
            "supported",
        ),
        (
            OVER.replace(",\n  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND", ""),
            "line 1, column 1: the table transactions without a WATERMARK is not supported: "
            "OVER is mapped ordered by event time",
        ),
        (
            script().replace(
                f"TABLE({TUMBLE})", "transactions JOIN users ON transactions.user_id = users.id"
            ),
            "line 9, column 19: a join is not supported",
        ),
        (
            "SET 'table.exec.state.ttl' = '1 h';\n" + script(),
            "line 1, column 1: SET 'table.exec.state.ttl' with a window aggregation is not "
            "supported: the state TTL is modelled for an unbounded GROUP BY and a "
            "processing-time OVER only",
        ),
        (
            "SET 'table.exec.mini-batch.enabled' = 'true';\n" + UNBOUNDED,
            "line 1, column 1: SET 'table.exec.mini-batch.enabled' is not supported",
        ),
        (
            UNBOUNDED.replace("GROUP BY user_id", "GROUP BY user_id, window_start"),
            "line 8, column 19: GROUP BY window_start without a window is not supported",
        ),
        (
            UNBOUNDED.replace(
                "SELECT user_id,", "SELECT /*+ STATE_TTL('transactions' = '1d') */ user_id,"
            ),
            "line 6, column 12: the query hint `STATE_TTL`('transactions' = '1d') is not supported",
        ),
        (
            script().replace("GROUP BY", "WHERE amount / 2 > 1\nGROUP BY"),
            "line 10, column 7: the expression `amount` / 2 is not supported: Flink divides "
            "integers as integers, Spark as doubles",
        ),
        (
            script().replace("GROUP BY", "WHERE NOT (amount > 1)\nGROUP BY"),
            "line 10, column 7: NOT over a floating-point comparison",
        ),
        (
            script().replace("GROUP BY", "WHERE upper(user_id) = 'U1'\nGROUP BY"),
            "line 10, column 7: the expression UPPER(`user_id`) is not supported: functions are "
            "not mapped",
        ),
        (
            UNBOUNDED.replace("SUM(amount)", "SUM(CASE WHEN amount > 3 THEN 1 ELSE 0 END)"),
            "line 6, column 17: SUM of an expression of type INT is not supported: Flink's result "
            "keeps that type; DOUBLE, BIGINT are mapped (to count the records a condition holds "
            "for, COUNT(CASE WHEN condition THEN 1 END))",
        ),
        (
            script(options=", 'scan.watermark.alignment.group' = 'g'"),
            "line 6, column 50: the option 'scan.watermark.alignment.group' is not supported",
        ),
        (
            script().replace("ts - INTERVAL '5' SECOND", "ts"),
            "line 4, column 3: the watermark bound of 0 ms is not supported",
        ),
        (
            # Flink's AVG of a BIGINT divides as longs (AVG of 3 and 8 is 5), not as the mean
            script().replace("amount DOUBLE", "amount BIGINT").replace("SUM(", "AVG("),
            "line 8, column 43: AVG of the BIGINT column amount is not supported",
        ),
    ],
    ids=[
        "session-alone",
        "session-keys",
        "cumulate-step",
        "over-with-group-by",
        "over-from-current-row",
        "over-following",
        "over-rows-following",
        "over-rows-fraction",
        "over-range-number",
        "over-disallow-partial",
        "over-descending",
        "over-unbounded-version",
        "over-order-by",
        "over-partition-by",
        "over-different-windows",
        "over-different-frames",
        "over-and-plain-aggregate",
        "over-window-tvf",
        "over-state-ttl",
        "over-unbounded-state-ttl",
        "over-without-watermark",
        "join",
        "set",
        "mini-batch",
        "unbounded-window-column",
        "hint",
        "where-divide",
        "where-not-floating",
        "where-function",
        "sum-of-int",
        "alignment",
        "bound-0",
        "avg-bigint",
    ],
)
def test_refusals_name_the_construct_line_and_column(sql, message):
    with pytest.raises(UnsupportedSqlError) as refused:
        job_from_sql(None, sql, {"transactions": ArchivedTopic("transactions")})
    assert message in str(refused.value)


@pytest.mark.parametrize(("after_end_ms", "fires"), [(4_998, False), (4_999, True), (5_000, True)])
def test_sql_watermark_boundary(spark, after_end_ms, fires):
    """SQL's watermark after a record at ``ts`` is ``ts - B`` (on-event: per record); the
    window [10:00, 10:05) fires at ``W >= 10:04:59.999``, so a record ``B - 1`` ms after its
    end fires it. DataStream's ``max(ts) - B - 1`` would need ``B`` ms."""
    later = datetime(2026, 1, 1, 10, 5, 5).timestamp() * 1000 - 5_000 + after_end_ms
    at = datetime.fromtimestamp(later / 1000).isoformat(sep=" ", timespec="milliseconds")
    rows = [(0, 0, "2026-01-01 10:00:10", "u1", 1.0), (0, 1, at, "u2", 2.0)]
    on_event = ", 'scan.watermark.emit.strategy' = 'on-event'"
    job = job_from_sql(spark, script(options=on_event), {"transactions": archive(spark, rows)})
    assert job.watermark.emission == "on_event"
    fired = backfill(spark, job).emissions.where("user_id = 'u1'").collect()
    assert [r["spend_5m"] for r in fired] == ([1.0] if fires else [])


def test_an_unbounded_aggregation_updates_every_record_until_its_state_expires(spark):
    """Each record updates its user's result at its processing time (here its event time:
    one partition, in order), written even when unchanged (with a TTL, Flink emits every
    update). A record read exactly 10 minutes after the user's last update finds the state
    expired (``last + TTL <= now``) and starts afresh; 1 ms earlier it joins."""
    rows = [
        (0, 0, "2026-01-01 10:00:00", "u1", 1.0),
        (0, 1, "2026-01-01 10:04:00", "u1", 2.0),
        (0, 2, "2026-01-01 10:05:00", "u2", 4.0),
        (0, 3, "2026-01-01 10:14:00", "u1", 8.0),  # 10:04 + 10 min: expired, afresh
        (0, 4, "2026-01-01 10:23:59.999", "u1", 16.0),  # 10:14 + 10 min - 1 ms: joins
        (0, 5, "2026-01-01 10:25:00", "u1", 0.0),  # nothing changes: written again
        (0, 6, "2026-01-01 10:30:00", "u2", 32.0),  # 10:05 + 25 min: expired
    ]
    job = job_from_sql(spark, UNBOUNDED, {"transactions": archive(spark, rows)})
    assert job.window == SessionWindows(gap_ms=600_000, domain="processing")
    assert job.trigger == PerRecordTrigger()
    log = backfill(spark, job).emissions.orderBy("emit_time", "user_id").collect()
    assert [
        (r["user_id"], r["emit_time"].strftime("%H:%M:%S.%f")[:12], r["spend"], r["largest"])
        for r in log
    ] == [
        ("u1", "10:00:00.000", 1.0, 1.0),
        ("u1", "10:04:00.000", 3.0, 2.0),
        ("u2", "10:05:00.000", 4.0, 4.0),
        ("u1", "10:14:00.000", 8.0, 8.0),
        ("u1", "10:23:59.999", 24.0, 16.0),
        ("u1", "10:25:00.000", 24.0, 16.0),
        ("u2", "10:30:00.000", 32.0, 32.0),
    ]
    assert {r["firing"] for r in log} == {"per_record"}
    # The state's life: from its first record to TTL after its last update.
    assert [
        (r["window_start"].strftime("%H:%M"), r["window_end"].strftime("%H:%M"))
        for r in log
        if r["user_id"] == "u1"
    ][-1] == ("10:14", "10:35")


def test_an_unbounded_aggregation_without_a_ttl_counting_records_writes_every_update(spark):
    """Without a TTL the state never expires and Flink skips an update equal to the previous
    result, but a COUNT(*) makes every update differ: each record's is written, u1's 10:14
    record joining the 10:00 state (a 10-minute TTL would have expired it). The trigger skips
    unchanged updates all the same: Flink's rule, which never finds one here."""
    rows = [
        (0, 0, "2026-01-01 10:00:00", "u1", 1.0),
        (0, 1, "2026-01-01 10:04:00", "u1", 2.0),
        (0, 2, "2026-01-01 10:05:00", "u2", 4.0),
        (0, 3, "2026-01-01 10:14:00", "u1", 8.0),
        (0, 4, "2026-01-01 10:25:00", "u1", 0.0),  # the sum unchanged, the count not
    ]
    forever = UNBOUNDED.replace("SET 'table.exec.state.ttl' = '10 min';\n", "").replace(
        "MAX(amount) AS largest", "COUNT(*) AS largest"
    )
    job = job_from_sql(spark, forever, {"transactions": archive(spark, rows)})
    assert job.window == SessionWindows(gap_ms=NEVER_EXPIRES, domain="processing")
    assert job.trigger == PerRecordTrigger(skip_unchanged=True)  # what Flink runs
    log = backfill(spark, job).emissions.orderBy("emit_time").collect()
    assert [(r["user_id"], r["spend"], r["largest"]) for r in log] == [
        ("u1", 1.0, 1),
        ("u1", 3.0, 2),
        ("u2", 4.0, 1),
        ("u1", 11.0, 3),
        ("u1", 11.0, 4),
    ]
    assert {r["window_start"].strftime("%H:%M") for r in log if r["user_id"] == "u1"} == {"10:00"}


def _nullable_archive(spark, rows: list[tuple[int, str, str, float | None]]) -> ArchivedTopic:
    """One partition's ``(offset, ts, user_id, amount)`` rows, amounts null or NaN too."""
    records = spark.createDataFrame(
        [(0, o, u, a, ts) for o, ts, u, a in rows],
        "partition int, offset long, user_id string, amount double, ts string",
    ).withColumn("ts", F.to_timestamp("ts"))
    return ArchivedTopic("transactions", dataframe=records, timestamp_col="ts")


#: The unbounded GROUP BY without a state TTL: Flink's GroupAggHelper skips an update equal to
#: the key's previous result.
FOREVER = UNBOUNDED.replace("SET 'table.exec.state.ttl' = '10 min';\n", "")


@pytest.mark.parametrize("ttl", [None, "0 ms"], ids=["not-set", "zero"])
def test_an_unbounded_aggregation_without_a_ttl_skips_an_unchanged_update(spark, ttl):
    """SUM and MAX, state kept forever (no TTL, or 0: Flink's default). An update whose SUM
    and MAX both equal the key's previous ones is not written: a $0 with MAX unchanged, a null
    amount (skipped by both); the key's first always is; u3's SUM and MAX over nulls only stay
    null, equal. Rows written at one instant are numbered among themselves."""
    rows = [
        (0, "2026-01-01 10:00:00", "u1", 1.0),
        (1, "2026-01-01 10:00:00", "u1", 0.0),  # (1, 1) again: skipped
        (2, "2026-01-01 10:00:00", "u1", 3.0),  # (4, 3): emit_sequence 1
        (3, "2026-01-01 10:01:00", "u2", 5.0),
        (4, "2026-01-01 10:02:00", "u1", 0.0),  # a SUM of 0.0, MAX unchanged: skipped
        (5, "2026-01-01 10:03:00", "u1", 2.0),  # MAX unchanged, SUM not: written
        (6, "2026-01-01 10:04:00", "u2", None),  # changes nothing: skipped
        (7, "2026-01-01 10:05:00", "u3", None),  # the first: (null, null) written
        (8, "2026-01-01 10:06:00", "u3", None),  # (null, null) again: skipped
        (9, "2026-01-01 10:07:00", "u3", 2.0),
    ]
    script = FOREVER if ttl is None else UNBOUNDED.replace("'10 min'", f"'{ttl}'")
    job = job_from_sql(spark, script, {"transactions": _nullable_archive(spark, rows)})
    assert job.window == SessionWindows(gap_ms=NEVER_EXPIRES, domain="processing")
    assert job.trigger == PerRecordTrigger(skip_unchanged=True)
    result = backfill(spark, job)
    log = result.emissions.orderBy("emit_time", "emit_sequence").collect()
    assert [
        (r["user_id"], r["emit_time"].strftime("%H:%M"), r["emit_sequence"], r["spend"])
        + (r["largest"],)
        for r in log
    ] == [
        ("u1", "10:00", 0, 1.0, 1.0),
        ("u1", "10:00", 1, 4.0, 3.0),
        ("u2", "10:01", 0, 5.0, 5.0),
        ("u1", "10:03", 0, 6.0, 3.0),
        ("u3", "10:05", 0, None, None),
        ("u3", "10:07", 0, 2.0, 2.0),
    ]
    assert (result.stats["records_per_record"], result.stats["updates_unchanged"]) == (10, 4)
    result.release()


def test_an_unbounded_aggregation_without_a_ttl_writes_every_nan_update(spark):
    """A NaN equals nothing, itself included (Java's ==, as Flink's equaliser compares
    doubles): once u1's SUM is NaN, each update is written, a $0 too; u2's $0 after $0 is
    skipped. (MIN and MAX of a column with NaN are refused: Flink SQL's keep or skip it by
    position.)"""
    rows = [
        (0, "2026-01-01 10:00:00", "u1", 1.0),
        (1, "2026-01-01 10:01:00", "u1", math.nan),
        (2, "2026-01-01 10:02:00", "u1", 0.0),
        (3, "2026-01-01 10:03:00", "u2", 0.0),
        (4, "2026-01-01 10:04:00", "u2", 0.0),
        (5, "2026-01-01 10:05:00", "u1", math.nan),
    ]
    script = FOREVER.replace(", MAX(amount) AS largest", "")
    job = job_from_sql(spark, script, {"transactions": _nullable_archive(spark, rows)})
    assert job.trigger == PerRecordTrigger(skip_unchanged=True)
    log = backfill(spark, job).emissions.orderBy("emit_time").collect()
    assert [(r["user_id"], r["emit_time"].strftime("%H:%M"), str(r["spend"])) for r in log] == [
        ("u1", "10:00", "1.0"),
        ("u1", "10:01", "nan"),
        ("u1", "10:02", "nan"),
        ("u2", "10:03", "0.0"),
        ("u1", "10:05", "nan"),
    ]


def test_a_where_filters_records_that_still_move_the_watermark(spark):
    """``WHERE amount > 1 AND user_id <> 'u3'`` leaves u1's $1 at 10:00:10 out of [10:00,
    10:05): it holds $2 alone. The windows fire when they did without the filter (u2's 10:05:10
    record moves the watermark); Flink compares doubles as Java does, so the predicate is
    guarded against NaN in Spark."""
    where = "WHERE amount > 1 AND user_id <> 'u3'\nGROUP BY"
    job = job_from_sql(
        spark, script().replace("GROUP BY", where), {"transactions": archive(spark, IN_ORDER)}
    )
    assert job.where == (
        "((CASE WHEN isnan(`amount`) OR isnan(1) THEN false ELSE (`amount` > 1) END) AND "
        "(`user_id` <> 'u3'))"
    )
    unfiltered = job_from_sql(spark, script(), {"transactions": archive(spark, IN_ORDER)})
    logs = [
        backfill(spark, j).emissions.orderBy("user_id", "window_start").collect()
        for j in (job, unfiltered)
    ]
    assert [(r["spend_5m"], r["transactions_5m"]) for r in logs[0]] == [
        (2.0, 1),
        (8.0, 1),
        (4.0, 1),
    ]
    assert [r["emit_time"] for r in logs[0]] == [r["emit_time"] for r in logs[1]]
    assert logs[1][0]["spend_5m"] == 3.0


def test_min_or_max_over_an_archive_with_nan_is_refused(spark):
    """Flink SQL's MAX keeps a NaN that comes first and skips a later one; the plugin's makes
    any NaN the result: refused, naming the first NaN."""
    rows = [*IN_ORDER[:2], (0, 2, "2026-01-01 10:03:00", "u1", float("nan"))]
    records = spark.createDataFrame(
        [(p, o, ts, u, a) for p, o, ts, u, a in rows],
        "partition int, offset long, ts string, user_id string, amount double",
    ).withColumn("ts", F.to_timestamp("ts"))
    topic = ArchivedTopic("transactions", dataframe=records, timestamp_col="ts")
    maximum = script().replace("SUM(amount) AS spend_5m", "MAX(amount) AS spend_5m")
    with pytest.raises(UnsupportedSqlError, match=r"partition 0 offset 2 has a NaN in amount"):
        job_from_sql(spark, maximum, {"transactions": topic})
    job_from_sql(spark, script(), {"transactions": topic})  # SUM of a NaN: NaN in both


def test_aggregates_of_expressions_are_derived_columns(spark):
    """``SUM(CASE WHEN amount > 4 THEN amount ELSE 0 END)`` and ``COUNT(CASE WHEN amount > 4
    THEN 1 END)`` per user: derived columns the aggregations read. IN_ORDER's amounts 1, 2,
    4, 8, 16, 32: over 4, u1's 8 (10:05-10:10) and u2's 16 (10:10-10:15, never fired)."""
    big = script().replace(
        "SUM(amount) AS spend_5m, COUNT(*) AS transactions_5m",
        "SUM(CASE WHEN amount > 4 THEN amount ELSE 0 END) AS spend_5m, "
        "COUNT(CASE WHEN amount > 4 THEN 1 END) AS transactions_5m",
    )
    job = job_from_sql(spark, big, {"transactions": archive(spark, IN_ORDER)})
    assert job.derived == {
        "spend_5m_argument": "(CASE WHEN (CASE WHEN isnan(`amount`) OR isnan(4) THEN false ELSE "
        "(`amount` > 4) END) THEN `amount` ELSE 0 END)",
        "transactions_5m_argument": "(CASE WHEN (CASE WHEN isnan(`amount`) OR isnan(4) THEN "
        "false ELSE (`amount` > 4) END) THEN 1 ELSE NULL END)",
    }
    log = backfill(spark, job).emissions.orderBy("user_id", "window_start").collect()
    assert [(r["user_id"], r["spend_5m"], r["transactions_5m"]) for r in log] == [
        ("u1", 0.0, 0),
        ("u1", 8.0, 1),
        ("u2", 0.0, 0),
    ]


#: A view renaming the key and the time column, computing a column and filtering; the
#: INSERT's window reads the view.
VIEWED = """CREATE TABLE transactions (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json',
        'scan.watermark.idle-timeout' = '1 min');
CREATE TEMPORARY VIEW large_ones AS
SELECT user_id AS customer, amount * 2 AS doubled, ts AS event_time
FROM transactions
WHERE amount > 1;
INSERT INTO user_spend_5m
SELECT customer, window_start, window_end, SUM(doubled) AS spend_5m, COUNT(*) AS transactions_5m
FROM TABLE(TUMBLE(TABLE large_ones, DESCRIPTOR(event_time), INTERVAL '5' MINUTE))
GROUP BY customer, window_start, window_end;
"""


def test_a_view_projects_and_filters_the_records_before_the_window(spark):
    """The view leaves u1's $1 at 10:00:10 out and doubles the others: [10:00, 10:05) holds
    u1's $2 as 4, [10:05, 10:10) u1's $8 as 16 and u2's $4 as 8 (u2's $16 and u1's $32 are
    in windows the archive's watermark never fires). The filtered record still moved the
    watermark: the windows fire when the script without a view fires them."""
    topic = archive(spark, IN_ORDER)
    job = job_from_sql(spark, VIEWED, {"transactions": topic})
    assert job.keys == ["customer"]
    assert job.topics[0].timestamp_col == "ts"  # the view's event_time is the table's ts
    log = backfill(spark, job).emissions.orderBy("customer", "window_start").collect()
    assert [(r["customer"], r["spend_5m"], r["transactions_5m"]) for r in log] == [
        ("u1", 4.0, 1),
        ("u1", 16.0, 1),
        ("u2", 8.0, 1),
    ]
    plain = backfill(spark, job_from_sql(spark, script(), {"transactions": topic}))
    assert [r["emit_time"] for r in log] == [
        r["emit_time"] for r in plain.emissions.orderBy("user_id", "window_start").collect()
    ]


def test_views_over_views_keep_what_every_where_keeps(spark):
    """A view of a view: the second's ``WHERE`` reads the first's column, ``*`` passes the
    first's columns on. Of IN_ORDER, amounts over 1 doubled, then under 20 (the doubled 32 and
    16 out): each user's running count and sum of what is left, per record, unbounded."""
    chained = UNBOUNDED.replace(
        "INSERT INTO",
        """CREATE VIEW doubled AS SELECT user_id, amount * 2 AS twice, ts FROM transactions
WHERE amount > 1;
CREATE VIEW small AS SELECT * FROM doubled WHERE twice < 20;
INSERT INTO""",
    ).replace(
        "SUM(amount) AS spend, MAX(amount) AS largest\nFROM transactions",
        "SUM(twice) AS spend, MAX(twice) AS largest\nFROM small",
    )
    job = job_from_sql(spark, chained, {"transactions": archive(spark, IN_ORDER)})
    log = backfill(spark, job).emissions.orderBy("emit_time").collect()
    assert [(r["user_id"], r["spend"], r["largest"]) for r in log] == [
        ("u1", 4.0, 4.0),
        ("u2", 8.0, 8.0),
        ("u1", 20.0, 16.0),
    ]


#: The unbounded aggregation as an OVER ordered by processing time: each transaction written
#: with its user's running spend, the state expiring 10 minutes after its last update.
PROC_OVER = UNBOUNDED.replace("ts TIMESTAMP(3)", "ts TIMESTAMP(3), pt AS PROCTIME()").replace(
    "SELECT user_id, SUM(amount) AS spend, MAX(amount) AS largest\nFROM transactions\n"
    "GROUP BY user_id;",
    "SELECT user_id, SUM(amount) OVER w AS spend, MAX(amount) OVER w AS largest\n"
    "FROM transactions\nWINDOW w AS (PARTITION BY user_id ORDER BY pt);",
)


def test_a_processing_time_over_from_unbounded_preceding_maps_as_the_unbounded_group_by():
    """Flink runs it with ProcTimeUnboundedPrecedingFunction: every record updates its key's
    accumulator under the state TTL and is written, as the GROUP BY with a TTL; without a TTL
    the state never expires, and no COUNT(*) is needed (no update is skipped)."""
    archives = {"transactions": ArchivedTopic("transactions")}
    assert "OVER w" in PROC_OVER
    over = job_from_sql(None, PROC_OVER, archives)
    group_by = job_from_sql(None, UNBOUNDED, archives)
    assert (over.window, over.trigger) == (group_by.window, group_by.trigger)
    assert over.window == SessionWindows(gap_ms=600_000, domain="processing")
    rows = PROC_OVER.replace("ORDER BY pt)", "ORDER BY pt ROWS UNBOUNDED PRECEDING)")
    assert job_from_sql(None, rows, archives) == over
    forever = job_from_sql(
        None, PROC_OVER.replace("SET 'table.exec.state.ttl' = '10 min';\n", ""), archives
    )
    assert forever.window == SessionWindows(gap_ms=NEVER_EXPIRES, domain="processing")
    # ProcTimeUnboundedPrecedingFunction writes every update; the GROUP BY skips unchanged ones
    assert forever.trigger == PerRecordTrigger()
    grouped = job_from_sql(
        None, UNBOUNDED.replace("SET 'table.exec.state.ttl' = '10 min';\n", ""), archives
    )
    assert (grouped.window, grouped.trigger) == (
        forever.window,
        PerRecordTrigger(skip_unchanged=True),
    )


@pytest.mark.parametrize(
    ("frame", "ttl", "window"),
    [
        # ProcTimeRangeBoundedPrecedingFunction takes no state TTL
        (
            "RANGE BETWEEN INTERVAL '1' MINUTE PRECEDING AND CURRENT ROW",
            "10 min",
            OverWindows(60_000, "processing"),
        ),
        ("RANGE INTERVAL '5' SECOND PRECEDING", None, OverWindows(5_000, "processing")),
        # ProcTimeRowsBoundedPrecedingFunction cleans a key's state only above 1 ms
        ("ROWS 2 PRECEDING", "10 min", OverWindows(None, "processing", "rows", 2, 600_000)),
        (
            "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW",
            None,
            OverWindows(None, "processing", "rows", 2),
        ),
        ("ROWS 2 PRECEDING", "1 ms", OverWindows(None, "processing", "rows", 2)),
        ("ROWS 2 PRECEDING", "2 ms", OverWindows(None, "processing", "rows", 2, 2)),
    ],
    ids=["range-ttl", "range", "rows-ttl", "rows", "rows-ttl-1ms", "rows-ttl-2ms"],
)
def test_a_bounded_processing_time_over_is_an_over_window_fired_by_the_clock(frame, ttl, window):
    """No watermark read (the table may declare none), the clock's trigger; the state TTL
    reaches the ROWS frame only."""
    script = PROC_OVER.replace("ORDER BY pt)", f"ORDER BY pt {frame})")
    script = (
        script.replace("'10 min'", f"'{ttl}'")
        if ttl
        else script.replace("SET 'table.exec.state.ttl' = '10 min';\n", "")
    )
    assert ("state.ttl" in script) == (ttl is not None)
    job = job_from_sql(None, script, {"transactions": ArchivedTopic("transactions")})
    assert (job.window, job.trigger) == (window, ProcessingTimeTrigger())
    assert "WATERMARK" not in script


#: The 5-minute TUMBLE over the table's PROCTIME() column, in the UTC session time zone.
PROC_WINDOW = "SET 'table.local-time-zone' = 'UTC';\n" + script(
    TUMBLE.replace("DESCRIPTOR(ts)", "DESCRIPTOR(pt)")
).replace("ts TIMESTAMP(3),", "ts TIMESTAMP(3), pt AS PROCTIME(),")


@pytest.mark.parametrize(
    ("window", "mapped"),
    [
        (TUMBLE, TumblingWindows(300_000, domain="processing")),
        (
            "HOP(TABLE transactions, DESCRIPTOR(ts), INTERVAL '1' MINUTE, INTERVAL '5' MINUTE)",
            SlidingWindows(300_000, 60_000, domain="processing"),
        ),
        (
            "CUMULATE(TABLE transactions, DESCRIPTOR(ts), INTERVAL '1' MINUTE, "
            "INTERVAL '5' MINUTE)",
            CumulativeWindows(300_000, 60_000, domain="processing"),
        ),
        (
            "SESSION(TABLE transactions PARTITION BY user_id, DESCRIPTOR(ts), INTERVAL '5' MINUTE)",
            SessionWindows(300_000, domain="processing"),
        ),
    ],
    ids=["tumble", "hop", "cumulate", "session"],
)
def test_a_window_over_the_proctime_column_is_the_same_window_fired_by_the_clock(window, mapped):
    """Flink's WindowAggOperator places the record by its clock and fires each window on a
    processing-time timer: the event-time mapping's window in the processing domain, with the
    clock's trigger; the table's WATERMARK is not read (it may have none)."""
    sql = PROC_WINDOW.replace(f"TABLE({TUMBLE.replace('(ts)', '(pt)')})", "TABLE(%s)")
    sql %= window.replace("DESCRIPTOR(ts)", "DESCRIPTOR(pt)")
    archives = {"transactions": ArchivedTopic("transactions")}
    for each in (sql, sql.replace(",\n  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND", "")):
        job = job_from_sql(None, each, archives)
        assert (job.window, job.trigger) == (mapped, ProcessingTimeTrigger())
        assert job.keys == ["user_id"]
        assert [a.name for a in job.aggregations] == ["spend_5m", "transactions_5m"]
    assert "WATERMARK" in sql


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            PROC_WINDOW.replace("SET 'table.local-time-zone' = 'UTC';\n", ""),
            "line 9, column 50: a TUMBLE over the PROCTIME() column pt without SET "
            "'table.local-time-zone' is not supported: Flink aligns processing-time windows in "
            "the session time zone, the JVM's unless set: SET 'table.local-time-zone' = 'UTC' "
            "is mapped",
        ),
        (
            PROC_WINDOW.replace("'UTC'", "'Asia/Kolkata'"),
            "line 1, column 1: a TUMBLE over the PROCTIME() column pt in the time zone "
            "'Asia/Kolkata' is not supported",
        ),
        (
            "SET 'table.exec.state.ttl' = '1 h';\n" + PROC_WINDOW,
            "line 1, column 1: SET 'table.exec.state.ttl' with a window aggregation is not "
            "supported",
        ),
        (
            PROC_WINDOW.replace(
                "INSERT INTO",
                "CREATE VIEW v AS SELECT user_id, amount, pt FROM transactions;\nINSERT INTO",
            ).replace("TABLE transactions,", "TABLE v,"),
            "line 8, column 42: the column pt is not supported: not a column of transactions",
        ),
    ],
    ids=["no-time-zone", "another-time-zone", "state-ttl", "through-a-view"],
)
def test_a_window_over_the_proctime_column_is_refused_where_not_exact(sql, message):
    with pytest.raises(UnsupportedSqlError) as refused:
        job_from_sql(None, sql, {"transactions": ArchivedTopic("transactions")})
    assert str(refused.value).startswith(message)


def test_an_over_aggregation_reads_a_view():
    over = (
        OVER.replace(
            "INSERT INTO",
            "CREATE VIEW v AS SELECT user_id AS u, amount, ts AS t FROM transactions;\nINSERT INTO",
        )
        .replace("SELECT user_id, ts,", "SELECT u, t,")
        .replace(
            "FROM transactions\nWINDOW w AS (PARTITION BY user_id ORDER BY ts",
            "FROM v\nWINDOW w AS (PARTITION BY u ORDER BY t",
        )
    )
    job = job_from_sql(None, over, {"transactions": ArchivedTopic("transactions")})
    assert (job.keys, job.window) == (["u"], OverWindows(preceding_ms=3_600_000))


def test_a_view_reading_a_column_the_archive_lacks_names_it(spark):
    records = spark.sql(
        "SELECT 0 AS partition, 0L AS offset, timestamp'2026-01-01 10:00:00' AS ts, 'u1' AS user_id"
    )
    topic = ArchivedTopic("transactions", dataframe=records, timestamp_col="ts")
    with pytest.raises(
        BadArchiveError, match="no column amount, which the Flink SQL view large_ones"
    ):
        backfill(spark, job_from_sql(None, VIEWED, {"transactions": topic}))


def _view(select: str) -> str:
    """VIEWED with the view's query ``select``."""
    start = VIEWED.index("SELECT user_id AS customer")
    return VIEWED[:start] + select + VIEWED[VIEWED.index(";\nINSERT") :]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            _view(
                "SELECT user_id AS customer, amount * 2 AS doubled, "
                "CASE WHEN amount > 0 THEN ts ELSE ts END AS event_time FROM transactions"
            ),
            "DESCRIPTOR(event_time) is not supported: the view large_ones computes event_time",
        ),
        (
            _view(
                "SELECT user_id AS customer, SUM(amount) AS doubled, ts AS event_time "
                "FROM transactions GROUP BY user_id, ts"
            ),
            "line 7, column 88: an aggregation in view large_ones is not supported",
        ),
        (
            _view(
                "SELECT user_id AS customer, amount AS doubled, ts AS event_time "
                "FROM transactions AS a JOIN transactions AS b ON a.user_id = b.user_id"
            ),
            "a regular join in view large_ones is not supported",
        ),
        (
            _view(
                "SELECT user_id AS customer, amount AS doubled, amount AS doubled, "
                "ts AS event_time FROM transactions"
            ),
            "the view large_ones's second column named doubled is not supported",
        ),
        (
            _view(
                "SELECT user_id AS customer, amount AS doubled, ts AS event_time, "
                "amount AS ts FROM transactions"
            ),
            "line 7, column 66: the view large_ones's column ts is not supported: the archive of "
            "topic 'transactions' reads ts as its partition, offset or time column",
        ),
        (
            _view(
                "SELECT user_id AS customer, amount * 2 AS doubled, ts AS event_time FROM payments"
            ),
            "the table payments is not supported: not declared before the view",
        ),
        (
            _view(
                "SELECT user_id AS customer, amount / 2 AS doubled, ts AS event_time "
                "FROM transactions"
            ),
            "line 7, column 29: the expression `amount` / 2 is not supported",
        ),
        (
            VIEWED.replace("GROUP BY customer,", "GROUP BY user_id,").replace(
                "SELECT customer,", "SELECT user_id,"
            ),
            "the column user_id is not supported: not a column of large_ones",
        ),
        (
            VIEWED.replace("VIEW large_ones AS", "VIEW large_ones (a, b, c) AS"),
            "the column list of view large_ones is not supported",
        ),
        (
            VIEWED.replace("VIEW large_ones AS", "VIEW transactions AS"),
            "a second table or view named transactions is not supported",
        ),
    ],
    ids=[
        "computed-time",
        "aggregating-view",
        "join",
        "duplicate-column",
        "archive-column",
        "undeclared",
        "divide",
        "renamed-key",
        "column-list",
        "same-name",
    ],
)
def test_view_refusals_name_the_construct_line_and_column(sql, message):
    with pytest.raises(UnsupportedSqlError) as refused:
        job_from_sql(None, sql, {"transactions": ArchivedTopic("transactions")})
    assert message in str(refused.value)


#: Two Kafka tables of one view: its UNION ALL renames the second table's columns, doubles its
#: amounts and keeps those over 1; each table keeps its own watermark bound.
UNION = """CREATE TABLE web (
  user_id STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'web');
CREATE TABLE app (
  uid STRING, amt DOUBLE, created TIMESTAMP(3),
  WATERMARK FOR created AS created - INTERVAL '2' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'app');
CREATE TEMPORARY VIEW purchases AS
SELECT user_id, amount, ts FROM web
UNION ALL
SELECT uid AS user_id, amt * 2 AS amount, created AS ts FROM app WHERE amt > 1;
INSERT INTO spend_5m
SELECT user_id, window_start, window_end, SUM(amount) AS spend_5m, COUNT(*) AS purchases_5m
FROM TABLE(TUMBLE(TABLE purchases, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
GROUP BY user_id, window_start, window_end;
"""


def test_a_union_of_two_tables_is_a_job_of_two_topics(spark):
    """web's u1 $1 and $2 and app's u1 3 (as 6) fall in [10:00, 10:05); app's 1 is filtered
    out. The window fires when the lower of the two tables' watermarks reaches 10:04:59.999:
    web's 10:05:10 record gives web 10:05:05 but app is at 10:02:58 (its 10:03:00 record, 2 s
    bound); app's 10:06:00 record lifts it to 10:05:58, and the window fires at 10:06:00."""
    web = archive(
        spark,
        [
            (0, 0, "2026-01-01 10:00:10", "u1", 1.0),
            (0, 1, "2026-01-01 10:02:50", "u1", 2.0),
            (0, 2, "2026-01-01 10:05:10", "u2", 4.0),
        ],
    )
    app_records = spark.sql(
        "SELECT partition, offset, to_timestamp(created) AS created, uid, amt FROM VALUES "
        "(0, 0L, '2026-01-01 10:01:00', 'u1', 3D), (0, 1L, '2026-01-01 10:03:00', 'u1', 1D), "
        "(0, 2L, '2026-01-01 10:06:00', 'u2', 5D) AS t(partition, offset, created, uid, amt)"
    )
    topics = {
        "web": ArchivedTopic("web", dataframe=web.dataframe, timestamp_col="ts"),
        "app": ArchivedTopic("app", dataframe=app_records, timestamp_col="created"),
    }
    job = job_from_sql(spark, UNION, topics)
    assert [(t.name, t.timestamp_col, t.out_of_orderness_ms) for t in job.topics] == [
        ("web", "ts", None),
        ("app", "created", 1_999),
    ]
    assert job.watermark.out_of_orderness_ms == 4_999
    result = backfill(spark, job)
    log = result.emissions.collect()
    assert [
        (
            r["user_id"],
            r["emit_time"].strftime("%H:%M:%S.%f")[:12],
            r["spend_5m"],
            r["purchases_5m"],
        )
        for r in log
    ] == [("u1", "10:06:00.000", 9.0, 3)]
    assert result.stats["records_filtered"] == 1


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        (
            UNION.replace("UNION ALL", "UNION"),
            "line 10, column 1: the view purchases AS SELECT `user_id`, `amount`, ... is not "
            "supported: a SELECT, or SELECTs joined by UNION ALL, is mapped",
        ),
        (
            UNION.replace("uid STRING, amt DOUBLE", "uid STRING, amt BIGINT"),
            "line 12, column 24: the view purchases's column amount of type BIGINT here, DOUBLE "
            "in its first UNION ALL input is not supported",
        ),
        (
            UNION.replace("FROM app WHERE", "FROM web WHERE")
            .replace("uid AS", "user_id AS")
            .replace("amt", "amount")
            .replace("created AS ts", "ts"),
            "line 9, column 1: the view purchases reading table web twice is not supported",
        ),
        (
            UNION.replace(
                "'topic' = 'app'", "'topic' = 'app', 'scan.watermark.emit.strategy' = 'on-event'"
            ),
            "the tables web and app with different 'scan.watermark.emit.strategy' is not supported",
        ),
        (
            UNION.replace(
                "'topic' = 'app'", "'topic' = 'app', 'scan.watermark.idle-timeout' = '1 min'"
            ),
            "the tables web and app with different 'scan.watermark.idle-timeout' is not supported",
        ),
        (
            "SET 'table.exec.source.idle-timeout' = '1 min';\n" + UNION,
            "line 1, column 1: an idle timeout with the 2 tables of a UNION ALL is not supported",
        ),
    ],
    ids=["union-distinct", "types", "table-twice", "emission", "idleness", "idle-union"],
)
def test_union_refusals_name_the_construct_line_and_column(sql, message):
    archives = {"web": ArchivedTopic("web"), "app": ArchivedTopic("app")}
    with pytest.raises(UnsupportedSqlError) as refused:
        job_from_sql(None, sql, archives)
    assert message in str(refused.value)


def test_a_feast_view_of_a_union_takes_its_other_tables_archives_from_topics_tags(tmp_path):
    """The view's KafkaSource is the script's first table, topics_tags gives the other's
    archive; each source's timestamp_field and bound must be its table's."""
    (tmp_path / "purchases.sql").write_text(UNION)

    def kafka(topic: str, time: str, bound_s: int) -> KafkaSource:
        return KafkaSource(
            name=f"{topic}_source",
            topic=topic,
            kafka_bootstrap_servers="localhost:9092",
            message_format=JsonFormat(schema_json="x string"),
            timestamp_field=time,
            batch_source=FileSource(
                name=f"{topic}_archive",
                path=f"data/{topic}",
                file_format=DeltaFormat(),
                timestamp_field=time,
            ),
            watermark_delay_threshold=timedelta(seconds=bound_s),
        )

    def view(*others: KafkaSource) -> StreamFeatureView:
        return StreamFeatureView(
            name="spend_5m",
            source=kafka("web", "ts", 5),
            entities=[Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)],
            schema=[
                Field(name="user_id", dtype=String),
                Field(name="spend_5m", dtype=Float64),
                Field(name="purchases_5m", dtype=Int64),
            ],
            timestamp_field="ts",
            tags={**sql_tags("purchases.sql"), **topics_tags(*others)},
        )

    job = sql_job(view(kafka("app", "created", 2)), tmp_path, None)
    assert [(t.name, t.timestamp_col, job.out_of_orderness(t.name)) for t in job.topics] == [
        ("web", "ts", 4_999),
        ("app", "created", 1_999),
    ]
    with pytest.raises(ValueError, match="no archive given for the Kafka table 'app'"):
        sql_job(view(), tmp_path, None)
    with pytest.raises(ValueError, match="'app_source''s watermark_delay_threshold \\(3000 ms\\)"):
        sql_job(view(kafka("app", "created", 3)), tmp_path, None)
    with pytest.raises(ValueError, match="reads topic 'clicks', which its script's INSERT does"):
        sql_job(view(kafka("app", "created", 2), kafka("clicks", "ts", 2)), tmp_path, None)


def test_a_view_reformatted_maps_to_the_same_job():
    """The view's projection is part of the job (and of its emission log's fingerprint) by
    what it computes, not by where the script writes it."""
    archives = {"transactions": ArchivedTopic("transactions")}
    reformatted = VIEWED.replace("\nFROM transactions\nWHERE", "   FROM transactions WHERE")
    assert reformatted != VIEWED
    assert job_from_sql(None, reformatted, archives) == job_from_sql(None, VIEWED, archives)
    doubled_thrice = VIEWED.replace("amount * 2 AS doubled", "amount * 3 AS doubled")
    assert job_from_sql(None, doubled_thrice, archives) != job_from_sql(None, VIEWED, archives)
