"""Run by tests/test_install.py in a copy of the feature repo beside it (not in it: `feast
apply` imports every module of a repo): training rows and online values as JSON, and where
the plugin was imported from."""

import json
from datetime import datetime

import pandas as pd
from feast import FeatureStore

import feast_stream_backfill

FEATURES = ["user_spend_5m:spend_5m", "user_spend_5m:transactions_5m"]


def at(hms: str) -> datetime:
    return datetime.fromisoformat(f"2026-01-01T{hms}+00:00")


store = FeatureStore(repo_path=".")
entity_df = pd.DataFrame(
    {
        "user_id": ["u1", "u1", "u2", "u1"],
        "event_timestamp": [at("10:05:00"), at("10:06:00"), at("10:06:00"), at("10:10:30")],
    }
)
training = store.get_historical_features(entity_df=entity_df, features=FEATURES).to_df()
online = store.get_online_features(FEATURES, [{"user_id": "u1"}, {"user_id": "u2"}]).to_dict()
print(
    json.dumps(
        {
            "plugin": feast_stream_backfill.__file__,
            "training_spend": [None if pd.isna(v) else v for v in training["spend_5m"]],
            "online_spend": online["spend_5m"],
            "online_transactions": online["transactions_5m"],
        }
    )
)
