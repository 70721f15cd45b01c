"""Emission logs go with their views: a deleted stream view's at ``feast apply``, the whole
project's at ``feast teardown``.

The offline store keeps a view's log at ``<emission_log_path>/<project>/<view>``, its dropped
records and its calibration beside it (:mod:`~feast_stream_backfill.emission_store`). Local
paths are removed directly; a URI (``s3a://``, ``file://``) through Spark's Hadoop file
system, which wrote it.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from feast.repo_config import RepoConfig

from feast_stream_backfill.emission_store import calibration_path, dropped_path
from feast_stream_backfill.feast_plugin.view_rows import project_logs, spark_for


def remove_view_logs(config: RepoConfig, project: str, views: Iterable[str]) -> None:
    """Remove the emission logs (and dropped records) of the named views, where they exist."""
    root = project_logs(config, project)
    if root is None:
        return
    for view in views:
        for path in (
            f"{root}/{view}",
            dropped_path(f"{root}/{view}"),
            calibration_path(f"{root}/{view}"),
        ):
            _remove(config, path)


def remove_project_logs(config: RepoConfig, project: str) -> None:
    root = project_logs(config, project)
    if root is not None:
        _remove(config, root)


def _remove(config: RepoConfig, path: str) -> None:
    if "://" not in path:
        if Path(path).exists():
            shutil.rmtree(path)
        return
    spark = spark_for(config)
    hadoop_path = spark._jvm.org.apache.hadoop.fs.Path(path)
    file_system = hadoop_path.getFileSystem(spark._jsc.hadoopConfiguration())
    file_system.delete(hadoop_path, True)
