-- The Flink SQL job the team deploys: 5-minute spend per user.
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
  'format' = 'json'
);

CREATE TABLE user_spend_5m (
  user_id STRING,
  window_start TIMESTAMP(3),
  window_end TIMESTAMP(3),
  spend_5m DOUBLE,
  transactions_5m BIGINT,
  max_amount_5m DOUBLE
) WITH ('connector' = 'print');

INSERT INTO user_spend_5m
SELECT user_id, window_start, window_end,
       SUM(amount) AS spend_5m, COUNT(*) AS transactions_5m, MAX(amount) AS max_amount_5m
FROM TABLE(TUMBLE(TABLE transactions, DESCRIPTOR(event_time), INTERVAL '5' MINUTE))
GROUP BY user_id, window_start, window_end;
