"""The reference pages name every option: each field of the job's classes, found by walking
``StreamJob``'s type hints, and each tag the plugin accepts, from the plugin's own list."""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

from feast_stream_backfill import CdcLog, DeltaHistory, Lookup, ScdTable, StreamJob
from feast_stream_backfill.feast_plugin import lookup_tags
from feast_stream_backfill.feast_plugin.apply_checks import KNOWN_TAGS, TAG_FAMILIES
from feast_stream_backfill.feast_plugin.compute_engine import StreamBackfillComputeEngineConfig
from feast_stream_backfill.feast_plugin.definitions import LOOKUP
from feast_stream_backfill.feast_plugin.offline_store import StreamBackfillOfflineStoreConfig

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reference"
OPTIONS = DOCS / "options.md"


def sections(markdown: str) -> dict[str, str]:
    """Each heading's text up to the next heading, by the ``name`` in backticks it holds."""
    found = {}
    for part in re.split(r"^(?=#{1,6} )", markdown, flags=re.MULTILINE):
        heading = re.match(r"#{1,6} .*?`([^`]+)`", part)
        if heading:
            found[heading.group(1)] = part
    return found


def documented_fields(section: str) -> set[str]:
    """The fields a section's table lists: the first cell of each row, in backticks."""
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def _implementations(protocol: type) -> list[type]:
    """The dataclasses of a protocol's module that have every member the protocol declares."""
    members = {name for name in vars(protocol) if not name.startswith("_")}
    module = sys.modules[protocol.__module__]
    return [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and members <= set(dir(cls))
    ]


def _classes_in(hint: object) -> Iterator[type]:
    """The dataclasses a type hint names, through unions, containers and protocols."""
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        yield hint
    elif isinstance(hint, type) and getattr(hint, "_is_protocol", False):
        yield from _implementations(hint)
    for argument in typing.get_args(hint):
        yield from _classes_in(argument)


def job_classes() -> list[type]:
    """``StreamJob`` and every dataclass reachable from its fields' types."""
    seen: list[type] = []
    todo = [StreamJob]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.append(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            todo.extend(_classes_in(hints[f.name]))
    return seen


def test_the_walk_reaches_the_job_s_parts():
    """The introspection itself: it must find what the job is made of, or the test below
    would pass on an empty list."""
    names = {cls.__name__ for cls in job_classes()}
    expected = {
        "StreamJob",
        "ArchivedTopic",
        "RecordTransform",
        "DeltaArchive",
        "DataFrameArchive",
        "SinkConnectorArchive",
        "TableArchive",
        "WatermarkStrategy",
        "ProcessingTimeModel",
        "TumblingWindows",
        "SlidingWindows",
        "SessionWindows",
        "EventTimeTrigger",
        "ProcessingTimeTrigger",
        "PerRecordTrigger",
        "Aggregation",
        "Lookup",
        "ScdTable",
        "CdcLog",
        "DeltaHistory",
    }
    assert expected <= names


@pytest.mark.parametrize("cls", job_classes(), ids=lambda cls: cls.__name__)
def test_every_field_of_the_job_is_in_the_options_page(cls):
    documented = sections(OPTIONS.read_text())
    assert cls.__name__ in documented, f"{OPTIONS.name} has no section for `{cls.__name__}`"
    missing = {f.name for f in dataclasses.fields(cls)} - documented_fields(
        documented[cls.__name__]
    )
    assert not missing, f"{OPTIONS.name}, section `{cls.__name__}`: no row for {sorted(missing)}"


def declared_tags() -> set[str]:
    """Every tag name the plugin reads: its list of known tags, its families of named tags,
    and each field a lookup of each kind of state source writes (its table named ``<table>``)."""
    tags = set(KNOWN_TAGS) | {family + "<name>" for family in TAG_FAMILIES if family != LOOKUP}
    sources = [
        ScdTable("t", ["k"], path="p", valid_to="until"),
        CdcLog("t", ["k"], path="p", sequence="lsn", snapshot_path="s", snapshot_time_ms=1),
        DeltaHistory("t", ["k"], path="p", change_data_feed=True),
    ]
    for source in sources:
        for tag in lookup_tags(Lookup(source, ["a"])):
            tags.add(tag.replace(f"{LOOKUP}t.", f"{LOOKUP}<table>."))
    return tags


def test_every_tag_the_plugin_reads_is_in_the_options_page():
    text = OPTIONS.read_text()
    tags = declared_tags()
    assert len(tags) > 30  # the job options, archive, sink, named and lookup tags
    missing = sorted(tag for tag in tags if f"`{tag}`" not in text)
    assert not missing, f"{OPTIONS.name} does not name the tag(s) {missing}"


@pytest.mark.parametrize(
    "config", [StreamBackfillOfflineStoreConfig, StreamBackfillComputeEngineConfig]
)
def test_every_field_of_the_feature_store_yaml_classes_is_documented(config):
    page = DOCS / "feature-store-yaml.md"
    documented = sections(page.read_text())
    assert config.__name__ in documented, f"{page.name} has no section for `{config.__name__}`"
    missing = set(config.model_fields) - documented_fields(documented[config.__name__])
    assert not missing, f"{page.name}, section `{config.__name__}`: no row for {sorted(missing)}"
