-- The Flink SQL job the team deploys: each user's running spend, upserted with every
-- transaction; a user's state expires 5 minutes (of processing time) after its last update.
SET 'table.exec.state.ttl' = '5 min';

CREATE TABLE transactions (
  user_id STRING,
  amount DOUBLE,
  event_time TIMESTAMP(3)
) WITH (
  'connector' = 'kafka',
  'topic' = 'transactions',
  'properties.bootstrap.servers' = 'localhost:9092',
  'format' = 'json'
);

INSERT INTO user_totals
SELECT user_id, SUM(amount) AS total_spend, COUNT(*) AS total_transactions
FROM transactions
GROUP BY user_id;
