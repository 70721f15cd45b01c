"""Flink SQL lookup joins (``JOIN table FOR SYSTEM_TIME AS OF t.proc_time``) mapped onto the
plugin's processing-time :class:`Lookup`: the job they map to, a hand-computed backfill, the
Feast declaration of the table's history, and the refusals. Against real Flink SQL:
tests/test_flink_sql_conformance.py."""

from __future__ import annotations

from datetime import timedelta

import pytest
from click.testing import CliRunner
from feast import Entity, Field, FileSource, KafkaSource, StreamFeatureView, ValueType
from feast.data_format import DeltaFormat, JsonFormat
from feast.types import Float64, Int64, String

from feast_stream_backfill import backfill
from feast_stream_backfill.aggregations import Aggregation
from feast_stream_backfill.cli import cli
from feast_stream_backfill.enrichment import CdcLog, Lookup, ScdTable
from feast_stream_backfill.errors import UnsupportedSqlError
from feast_stream_backfill.feast_plugin import sql_tags
from feast_stream_backfill.feast_plugin.sql_views import sql_job
from feast_stream_backfill.flink_sql import job_from_sql
from feast_stream_backfill.records import ArchivedTopic

#: Each transaction in the user's currency at the rate of the moment the job reads it (inner:
#: one without a rate is left out), summed in 5-minute windows.
LOOKUP = """CREATE TABLE transactions (
  user_id STRING, currency STRING, amount DOUBLE, ts TIMESTAMP(3),
  proc_time AS PROCTIME(),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND
) WITH ('connector' = 'kafka', 'topic' = 'transactions', 'format' = 'json');
CREATE TABLE rates (
  currency STRING, rate DOUBLE, PRIMARY KEY (currency) NOT ENFORCED
) WITH ('connector' = 'jdbc', 'url' = 'jdbc:postgresql://db/fx', 'table-name' = 'rates');
CREATE TEMPORARY VIEW in_usd AS
SELECT t.user_id, t.ts, t.amount * r.rate AS usd
FROM transactions AS t JOIN rates FOR SYSTEM_TIME AS OF t.proc_time AS r
  ON t.currency = r.currency
WHERE t.amount > 0;
INSERT INTO spend_usd_5m
SELECT user_id, window_start, window_end, SUM(usd) AS spend_usd_5m, COUNT(*) AS n_5m
FROM TABLE(TUMBLE(TABLE in_usd, DESCRIPTOR(ts), INTERVAL '5' MINUTE))
GROUP BY user_id, window_start, window_end;
"""
ARCHIVE = {"transactions": ArchivedTopic("transactions")}
RATES = ScdTable("rates", ["currency"], path="(not read)")


def _refusal(old: str, new: str, message: str) -> tuple[str, str]:
    assert old in LOOKUP, old
    return LOOKUP.replace(old, new), message


def test_a_lookup_join_maps_onto_a_lookup_at_processing_time():
    job = job_from_sql(None, LOOKUP, ARCHIVE, states={"rates": RATES})
    assert job.lookups == (
        Lookup(RATES, ["rate"], on={"currency": "currency"}, how="inner", prefix="rates__"),
    )
    assert list(job.aggregations) == [
        Aggregation("spend_usd_5m_argument", "sum", "spend_usd_5m"),
        Aggregation("user_id", "count", "n_5m"),
    ]
    assert job.derived == {"spend_usd_5m_argument": "((`amount` * `rates__rate`))"}
    left = job_from_sql(
        None, LOOKUP.replace(" JOIN", " LEFT JOIN"), ARCHIVE, states={"rates": RATES}
    )
    assert [lookup.how for lookup in left.lookups] == ["left"]


def _transactions(spark):
    return spark.sql(
        "SELECT partition, offset, to_timestamp(ts) AS ts, user_id, currency, amount FROM VALUES "
        "(0, 0L, '2026-01-01 10:00:10', 'u1', 'EUR', 1D),"
        "(0, 1L, '2026-01-01 10:02:50', 'u1', 'EUR', 2D),"
        "(0, 2L, '2026-01-01 10:03:00', 'u1', 'EUR', -3D),"
        "(0, 3L, '2026-01-01 10:05:10', 'u2', 'GBP', 4D),"
        "(0, 4L, '2026-01-01 10:06:20', 'u1', 'EUR', 8D),"
        "(0, 5L, '2026-01-01 10:10:40', 'u2', 'GBP', 16D),"
        "(0, 6L, '2026-01-01 10:12:20', 'u1', 'EUR', 32D)"
        " AS t(partition, offset, ts, user_id, currency, amount)"
    )


def _rates(spark):
    return spark.sql(
        "SELECT currency, rate, to_timestamp(at) AS change_time, 'upsert' AS op FROM VALUES "
        "('EUR', 1.5D, '2026-01-01 10:01:00'), ('EUR', 2.0D, '2026-01-01 10:06:20'),"
        "('GBP', 1.25D, '2026-01-01 10:10:40') AS t(currency, rate, at)"
    )


def _rows(emissions) -> list[tuple]:
    return [
        (
            r["user_id"],
            r["window_start"].strftime("%H:%M"),
            r["emit_time"].strftime("%H:%M:%S"),
            r["spend_usd_5m"],
            r["n_5m"],
        )
        for r in emissions.orderBy("emit_time", "user_id").collect()
    ]


#: One partition in event-time order: each record is processed at its event time. EUR is 1.5
#: from 10:01 and 2.0 from 10:06:20, the instant u1's 8 EUR is read (a version written then is
#: read). u2's GBP has no rate until 10:10:40: its 10:05:10 record is left out, yet its
#: watermark fires [10:00, 10:05) for u1 (2 EUR at 1.5; the 1 EUR at 10:00:10 found no rate).
#: The -3 is filtered by the view's WHERE.
EXPECTED = [("u1", "10:00", "10:05:10", 3.0, 1), ("u1", "10:05", "10:10:40", 16.0, 1)]


def test_a_lookup_join_reads_the_rate_of_the_moment_each_record_is_processed(spark):
    topic = ArchivedTopic("transactions", dataframe=_transactions(spark), timestamp_col="ts")
    rates = CdcLog("rates", ["currency"], dataframe=_rates(spark))
    result = backfill(
        spark, job_from_sql(spark, LOOKUP, {"transactions": topic}, states={"rates": rates})
    )
    assert _rows(result.emissions) == EXPECTED
    assert result.stats["records_filtered"] == 1
    assert result.stats["records_without_state"] == 2
    result.release()


def test_the_cli_backfills_a_lookup_join_with_its_tables_history(spark, tmp_path):
    """``backfill --sql --state rates=cdc:PATH``: the history keyed by the join's columns."""
    _transactions(spark).write.format("delta").save(str(tmp_path / "transactions"))
    _rates(spark).write.format("delta").save(str(tmp_path / "rates"))
    (tmp_path / "spend.sql").write_text(LOOKUP)
    runner = CliRunner()
    base = ["backfill", "--sql", str(tmp_path / "spend.sql")]
    base += ["--archive", f"transactions={tmp_path / 'transactions'}", "-o", str(tmp_path / "log")]
    result = runner.invoke(cli, [*base, "--state", f"rates=cdc:{tmp_path / 'rates'}"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"2 emissions written to {tmp_path / 'log'}\n"
    assert _rows(spark.read.format("delta").load(str(tmp_path / "log"))) == EXPECTED
    result = runner.invoke(cli, [*base, "--state", f"fx=cdc:{tmp_path / 'rates'}"])
    assert result.exit_code == 2
    assert "the script looks up no table 'fx' (rates)" in result.output
    result = runner.invoke(cli, base)
    assert "no state given for the lookup table 'rates' of view in_usd" in result.output


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        _refusal(
            "AS OF t.proc_time",
            "AS OF t.ts",
            "line 11, column 57: FOR SYSTEM_TIME AS OF t.ts is not supported: an event-time "
            "temporal join waits for both sides' watermarks",
        ),
        _refusal(
            "'table-name' = 'rates'",
            "'table-name' = 'rates', 'lookup.cache' = 'PARTIAL'",
            "the lookup table's option 'lookup.cache' is not supported",
        ),
        _refusal(
            "WHERE t.amount > 0",
            "WHERE r.rate > 0",
            "line 13, column 7: the column r.rate is not supported: a WHERE on the lookup "
            "table's columns is not mapped",
        ),
        _refusal(
            "FROM TABLE(TUMBLE(TABLE in_usd, DESCRIPTOR(ts), INTERVAL '5' MINUTE))",
            "FROM TABLE(TUMBLE(TABLE in_usd, DESCRIPTOR(ts), INTERVAL '5' MINUTE)) WHERE usd > 1",
            "the column usd is not supported: a WHERE on a column computed from the lookup "
            "table is not mapped",
        ),
        _refusal(
            "t.amount * r.rate AS usd",
            "t.amount * r.rate AS usd, r.currency AS code",
            "line 10, column 51: the column r.currency is not supported: the lookup table's join "
            "column: read the source's",
        ),
        _refusal(
            "ON t.currency = r.currency",
            "ON t.currency <> r.currency",
            "the join condition `t`.`currency` <> `r`.`currency` is not supported",
        ),
        _refusal(
            " JOIN rates", " RIGHT JOIN rates", "the right join in view in_usd is not supported"
        ),
        _refusal(
            "JOIN rates FOR SYSTEM_TIME AS OF t.proc_time AS r",
            "JOIN rates AS r",
            "a regular join in view in_usd is not supported",
        ),
        _refusal(
            "SELECT t.user_id, t.ts, t.amount * r.rate AS usd",
            "SELECT user_id, ts, amount * rate AS usd, currency",
            "the column currency is not supported: a column of both tables",
        ),
        _refusal(
            "t.amount * r.rate AS usd",
            "t.amount * r.rate AS usd, t.amount * 2 AS currency",
            "the view in_usd's column currency is not supported: the lookup join reads the column "
            "of transactions of that name",
        ),
        _refusal(
            "proc_time AS PROCTIME(),",
            "",
            "line 11, column 57: FOR SYSTEM_TIME AS OF t.proc_time is not supported: a lookup "
            "join at the PROCTIME() column of transactions is mapped",
        ),
        _refusal(
            "'connector' = 'jdbc'",
            "'connector' = 'kafka'",
            "the lookup join of the Kafka table rates is not supported",
        ),
        _refusal(
            "SELECT user_id, window_start",
            "SELECT usd, window_start",
            "the key usd, computed from the lookup table",
        ),
    ],
    ids=[
        "event-time",
        "cache",
        "view-where",
        "insert-where",
        "join-column",
        "not-equal",
        "right",
        "regular",
        "ambiguous",
        "shadowing",
        "no-proctime",
        "kafka",
        "enriched-key",
    ],
)
def test_lookup_refusals_name_the_construct_line_and_column(sql, message):
    if "SELECT usd, window_start" in sql:
        sql = sql.replace("GROUP BY user_id,", "GROUP BY usd,")
    with pytest.raises(UnsupportedSqlError) as refused:
        job_from_sql(None, sql, ARCHIVE, states={"rates": RATES})
    assert message in str(refused.value)


def test_a_lookup_needs_the_tables_history_keyed_as_the_join():
    with pytest.raises(
        ValueError, match="no state given for the lookup table 'rates' of view in_usd"
    ):
        job_from_sql(None, LOOKUP, ARCHIVE)
    by_user = ScdTable("rates", ["user_id"], path="(not read)")
    with pytest.raises(UnsupportedSqlError, match="keyed by user_id: the join's ON must compare"):
        job_from_sql(None, LOOKUP, ARCHIVE, states={"rates": by_user})


def test_a_view_of_a_lookup_join_or_a_union_with_one_is_refused():
    view_of_view = LOOKUP.replace(
        "INSERT INTO spend_usd_5m",
        "CREATE TEMPORARY VIEW again AS SELECT user_id, ts, usd FROM in_usd;\n"
        "INSERT INTO spend_usd_5m",
    ).replace("TABLE in_usd,", "TABLE again,")
    with pytest.raises(
        UnsupportedSqlError, match="the view again of view in_usd, which joins a lookup table"
    ):
        job_from_sql(None, view_of_view, ARCHIVE, states={"rates": RATES})
    union = LOOKUP.replace(
        "WHERE t.amount > 0;",
        "WHERE t.amount > 0\nUNION ALL\nSELECT user_id, ts, amount AS usd FROM transactions;",
    )
    with pytest.raises(
        UnsupportedSqlError, match="a lookup join in a UNION ALL input of view in_usd"
    ):
        job_from_sql(None, union, ARCHIVE, states={"rates": RATES})


def test_min_of_a_lookup_value_over_a_nan_rate_is_refused(spark):
    """Flink SQL's MIN keeps a NaN that comes first and skips a later one; the plugin's does
    not: a value computed from the table is checked on both sides it reads."""
    script = LOOKUP.replace("SUM(usd)", "MIN(usd)")
    records = spark.sql(
        "SELECT 0 AS partition, 0L AS offset, to_timestamp('2026-01-01 10:00:10') AS ts, "
        "'u1' AS user_id, 'EUR' AS currency, 1D AS amount"
    )
    topic = ArchivedTopic("transactions", dataframe=records, timestamp_col="ts")
    log = spark.sql(
        "SELECT 'EUR' AS currency, double('NaN') AS rate, 0L AS change_time, 'upsert' AS op"
    )
    states = {"rates": CdcLog("rates", ["currency"], dataframe=log)}
    with pytest.raises(
        UnsupportedSqlError, match="the state table 'rates' \\(DataFrame\\) has one"
    ):
        job_from_sql(spark, script, {"transactions": topic}, states=states)


def test_a_feast_view_of_a_lookup_join_names_the_tables_history_in_its_tags(spark, tmp_path):
    """``sql_tags(states=...)``: the history survives the registry as tags, its Delta path
    relative to the feature repo."""
    (tmp_path / "spend.sql").write_text(LOOKUP)
    source = KafkaSource(
        name="transactions_source",
        topic="transactions",
        kafka_bootstrap_servers="localhost:9092",
        message_format=JsonFormat(schema_json="x string"),
        timestamp_field="ts",
        batch_source=FileSource(
            name="transactions_archive",
            path="data/transactions",
            file_format=DeltaFormat(),
            timestamp_field="ts",
        ),
        watermark_delay_threshold=timedelta(seconds=5),
    )
    rates = CdcLog("rates", ["currency"], path="data/rates_log")
    view = StreamFeatureView(
        name="spend_usd_5m",
        source=source,
        entities=[Entity(name="user", join_keys=["user_id"], value_type=ValueType.STRING)],
        schema=[
            Field(name="user_id", dtype=String),
            Field(name="spend_usd_5m", dtype=Float64),
            Field(name="n_5m", dtype=Int64),
        ],
        timestamp_field="ts",
        tags=sql_tags("spend.sql", states=[rates]),
    )
    job = sql_job(view, tmp_path, None)
    (lookup,) = job.lookups
    assert lookup.source == CdcLog("rates", ["currency"], path=str(tmp_path / "data" / "rates_log"))
    with pytest.raises(ValueError, match="Delta paths, not DataFrames"):
        sql_tags("spend.sql", states=[CdcLog("rates", ["currency"], dataframe=spark.range(1))])
