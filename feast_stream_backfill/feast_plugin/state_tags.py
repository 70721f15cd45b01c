"""Where a lookup table's history is, as tags: its kind (``scd``, ``cdc``, ``delta``) and the
fields of its :class:`~feast_stream_backfill.enrichment.StateSource`, under one base key. A
Feast-declared lookup (``stream_backfill.lookup.<name>.``) and a SQL view's lookup table
(``stream_backfill.sql_state.<name>.``) both travel this way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields, replace
from pathlib import Path

from feast_stream_backfill.enrichment import CdcLog, DeltaHistory, ScdTable, StateSource
from feast_stream_backfill.feast_plugin.conventions import resolve_path

_SOURCE_KINDS = {"scd": ScdTable, "cdc": CdcLog, "delta": DeltaHistory}
_LISTS, _INTS, _BOOLS = {"keys", "delete_ops"}, {"snapshot_time_ms"}, {"change_data_feed"}


def _encode(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(value)
    return str(value)


def split(text: str) -> tuple[str, ...]:
    """A tag's comma-separated list."""
    return tuple(text.split(",")) if text else ()


def _decode(name: str, text: str) -> object:
    if name in _LISTS:
        return split(text)
    if text == "":
        return None
    if name in _INTS:
        return int(text)
    if name in _BOOLS:
        return text == "true"
    return text


def source_tags(base: str, source: StateSource) -> dict[str, str]:
    """``base + "table"`` (its kind) and ``base + "table." + field`` per field of ``source``,
    which must be a named set of Delta paths (a DataFrame does not survive the registry)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", source.name):
        raise ValueError(f"{source.where}: a declared state table's name is [A-Za-z0-9_-]+")
    if source.delta_paths() is None:
        raise ValueError(f"{source.where}: a Feast declaration needs Delta paths, not DataFrames")
    kind = next(k for k, cls in _SOURCE_KINDS.items() if isinstance(source, cls))
    tags = {base + "table": kind}
    for f in fields(source):
        if f.compare and f.name != "name":  # DataFrame fields do not compare
            tags[base + "table." + f.name] = _encode(getattr(source, f.name))
    return tags


def source_from(
    name: str, options: Mapping[str, str], repo_path: Path | str | None, where: str
) -> StateSource:
    """The source ``options`` (the tags after the base key) declare; relative paths are
    relative to the feature repo."""
    kind = options.get("table")
    if kind not in _SOURCE_KINDS:
        raise ValueError(f"{where}: table must be one of {list(_SOURCE_KINDS)}, got {kind!r}")
    table = {
        f[len("table.") :]: _decode(f[len("table.") :], v)
        for f, v in options.items()
        if f.startswith("table.")
    }
    source = _SOURCE_KINDS[kind](name=name, **table)
    return replace(
        source,
        **{
            f: resolve_path(getattr(source, f), repo_path)
            for f in ("path", "snapshot_path")
            if getattr(source, f, None)
        },
    )


def grouped(tags: Mapping[str, str], base: str) -> dict[str, dict[str, str]]:
    """The tags under ``base``, by the name after it: ``{name: {field: value}}``."""
    found: dict[str, dict[str, str]] = {}
    for key, value in tags.items():
        if key.startswith(base):
            name, _, field = key[len(base) :].partition(".")
            found.setdefault(name, {})[field] = value
    return found
