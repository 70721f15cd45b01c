-- The team's Flink SQL job for user_spend_1h (sql_features.py): each user's spend over the
-- last hour, every 5 minutes. The watermark is emitted on every record: with periodic
-- emission Flink SQL's watermark is the last record's, which this out-of-order topic does
-- not allow the plugin to reproduce (docs/guides/flink-sql.md).
SET 'pipeline.auto-watermark-interval' = '200ms';

CREATE TABLE transactions (
  user_id STRING,
  amount DOUBLE,
  event_time TIMESTAMP(3),
  WATERMARK FOR event_time AS event_time - INTERVAL '5' SECOND
) WITH (
  'connector' = 'kafka',
  'topic' = 'transactions',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json',
  'scan.watermark.emit.strategy' = 'on-event'
);

CREATE TABLE user_spend_1h (
  user_id STRING,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  spend_1h DOUBLE,
  transactions_1h BIGINT
) WITH ('connector' = 'redis');

INSERT INTO user_spend_1h
SELECT user_id, window_start, window_end,
       SUM(amount) AS spend_1h, COUNT(*) AS transactions_1h
FROM TABLE(HOP(TABLE transactions, DESCRIPTOR(event_time), INTERVAL '5' MINUTE, INTERVAL '1' HOUR))
GROUP BY user_id, window_start, window_end;
