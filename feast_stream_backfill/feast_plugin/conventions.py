"""What every declaration module shares: the tag namespace, durations as whole milliseconds,
and Feast's rule for relative paths."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

PREFIX = "stream_backfill."
MILLISECONDS = "_ms"  # the suffix of a duration tag


def milliseconds(duration: timedelta | None) -> int:
    return round(duration.total_seconds() * 1000) if duration else 0


def resolve_path(path: str, repo_path: Path | str | None) -> str:
    """Feast's convention: a relative source path is relative to the feature repo."""
    if "://" in path or Path(path).is_absolute() or repo_path is None:
        return path
    return str(Path(repo_path) / path)
