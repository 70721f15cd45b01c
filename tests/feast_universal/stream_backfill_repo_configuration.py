"""``FULL_REPO_CONFIGS_MODULE`` for Feast's universal tests: every environment uses the plugin.

Feast's ``repo_configuration`` imports this module while it is itself being imported and reads
``AVAILABLE_OFFLINE_STORES`` / ``AVAILABLE_ONLINE_STORES`` from it. Two things its harness does not
let such a module say are set here, explicitly:

* the compute engine: Feast builds every ``IntegrationTestRepoConfig`` with its default
  ``batch_engine="local"``, so that default is replaced by the plugin's engine;
* ``universal_offline_stores(only=["file"])``: tests pinned to Feast's file store (persist without
  overwrite, entityless retrieval) run against this plugin's parquet creator instead, since this
  plugin is a store over Delta and parquet ``FileSource``s.

The online store is a local redis-server whose address the runner passes in ``FSB_REDIS``.
"""

from __future__ import annotations

import dataclasses
import os
import sys

from stream_backfill_data_sources import (
    StreamBackfillDataSourceCreator,
    StreamBackfillDeltaDataSourceCreator,
)
from tests.universal.feature_repos.integration_test_repo_config import IntegrationTestRepoConfig

from feast_stream_backfill.feast_plugin.compute_engine import StreamBackfillComputeEngineConfig

BATCH_ENGINE = {"type": StreamBackfillComputeEngineConfig().type}

AVAILABLE_OFFLINE_STORES = [
    ("local", StreamBackfillDataSourceCreator),
    ("local", StreamBackfillDeltaDataSourceCreator),
]

AVAILABLE_ONLINE_STORES = {
    "redis": (
        {"type": "redis", "connection_string": f"{os.environ['FSB_REDIS']},db=0"},
        None,
    )
}


def _default_batch_engine(engine: dict[str, str]) -> None:
    """Make ``engine`` the default ``batch_engine`` of Feast's ``IntegrationTestRepoConfig``
    (a dataclass: its generated ``__init__`` holds the defaults, in field order)."""
    names = [f.name for f in dataclasses.fields(IntegrationTestRepoConfig) if f.init]
    init = IntegrationTestRepoConfig.__init__
    defaults = list(init.__defaults__)
    defaults[names.index("batch_engine") - (len(names) - len(defaults))] = engine
    init.__defaults__ = tuple(defaults)


def _file_store_is_this_plugin() -> None:
    """Point Feast's ``"file"`` offline store name at this plugin's parquet creator (the
    partially imported ``repo_configuration`` has defined that mapping by now)."""
    repo_configuration = sys.modules["tests.universal.feature_repos.repo_configuration"]
    repo_configuration.OFFLINE_STORE_TO_PROVIDER_CONFIG["file"] = (
        "local",
        StreamBackfillDataSourceCreator,
    )


_default_batch_engine(BATCH_ENGINE)
_file_store_is_this_plugin()
