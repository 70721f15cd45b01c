"""Do serving and training agree? Online values after ``feast materialize ... T`` against
``get_historical_features`` at T, for the same keys, feature by feature.

Both sides are the same function of the emission log (docs/concepts/model.md#the-online-store
and #training-sets), so any mismatch is a bug. The view's ttl applies to both: Feast's Redis
reads do not expire values by themselves, so an online value older than the ttl at T counts
as absent.

    python -m feast_stream_backfill.feast_plugin.consistency feature_repo user_spend_5m \\
        2026-01-01T02:00:00 --keys 1000
"""

from __future__ import annotations

import argparse
import math
import sys
from datetime import datetime, timezone
from typing import Any

import pandas as pd
from feast import FeatureStore
from pyspark.sql import functions as F

from feast_stream_backfill.feast_plugin.definitions import feature_names
from feast_stream_backfill.feast_plugin.view_rows import emissions_for


def _same(a: Any, b: Any) -> bool:
    missing_a = a is None or (isinstance(a, float) and math.isnan(a))
    missing_b = b is None or (isinstance(b, float) and math.isnan(b))
    if missing_a or missing_b:
        return missing_a and missing_b
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)


class Mismatches(dict[str, int]):
    """Mismatches per feature; ``keys_compared``: how many keys were read on both sides (0
    would make every count 0 without checking anything); ``materialized_to``: the instant the
    online store was last materialized up to, per Feast's registry (None: never)."""

    keys_compared: int = 0
    materialized_to: datetime | None = None


def materialized_to(view: Any) -> datetime | None:
    """The latest end of the view's materialization intervals in Feast's registry: what the
    online store holds is the job's state at that instant, not at any other."""
    ends = [end for _, end in view.materialization_intervals]
    return max(ends) if ends else None


def materialization_note(at: datetime, to: datetime | None) -> str | None:
    """Why online and training values can differ at ``at`` without a bug, if they can: the
    online store was materialized to another instant, or never."""
    if to is None:
        return (
            "the view was never materialized (Feast's registry has no materialization "
            "interval): the online store holds nothing to compare"
        )
    if to != at:
        return (
            f"the online store was materialized up to {to.isoformat()}, not --at "
            f"{at.isoformat()}: values that changed in between count as mismatches; compare "
            f"at {to.isoformat()} (or materialize up to --at)"
        )
    return None


def compare(store: FeatureStore, view_name: str, at: datetime, n_keys: int = 1000) -> Mismatches:
    """Mismatches per feature over up to ``n_keys`` keys that emitted at or before ``at``
    (the most active first)."""
    view = store.get_stream_feature_view(view_name)
    keys = [e.name for e in view.entity_columns]
    emissions = emissions_for(store.config, view)
    active = (
        emissions.where(F.col("emit_time") <= F.lit(at))
        .groupBy(*keys)
        .count()
        .orderBy(F.desc("count"), *keys)
        .limit(n_keys)
        .drop("count")
    )
    rows = [r.asDict() for r in active.collect()]  # n_keys rows, not the dataset
    features = feature_names(view)
    refs = [f"{view_name}:{f}" for f in features]
    online = store.get_online_features(refs, rows).to_dict(include_event_timestamps=True)
    entity_df = pd.DataFrame(rows).assign(event_timestamp=pd.Timestamp(at))
    offline = store.get_historical_features(entity_df=entity_df, features=refs).to_df()
    offline = pd.DataFrame(rows).merge(offline, on=keys, how="left")
    ttl = view.ttl.total_seconds() if view.ttl else None
    mismatches = Mismatches()
    mismatches.keys_compared = len(rows)
    mismatches.materialized_to = materialized_to(view)
    for feature in features:
        stamps = online.get(f"{feature}__ts") or [None] * len(rows)
        count = 0
        for i, value in enumerate(online[feature]):
            if ttl and stamps[i] is not None and (at.timestamp() - stamps[i]) > ttl:
                value = None  # expired at T, as the training join treats it
            count += not _same(value, offline[feature].iloc[i])
        mismatches[feature] = count
    return mismatches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", help="feature repo path")
    parser.add_argument("view", help="stream feature view name")
    parser.add_argument("at", help="instant T (ISO 8601, UTC if naive) materialized up to")
    parser.add_argument("--keys", type=int, default=1000, help="how many keys to compare")
    args = parser.parse_args(argv)
    at = datetime.fromisoformat(args.at)
    at = at if at.tzinfo else at.replace(tzinfo=timezone.utc)
    result = compare(FeatureStore(repo_path=args.repo), args.view, at, args.keys)
    note = materialization_note(at, result.materialized_to)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    print(f"{result.keys_compared} keys compared")
    for feature, count in result.items():
        print(f"{feature}: {count} mismatches")
    sys.exit(1 if any(result.values()) or not result.keys_compared else 0)


if __name__ == "__main__":
    main()
