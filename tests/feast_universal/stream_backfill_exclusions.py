"""Pytest plugin for the universal run: applies ``exclusions.txt`` and prints the counts.

Each line of the exclusion file is ``<pattern>  # <reason>``: a pattern with ``::`` matches test
ids (the tests are deselected; ``*`` is the only wildcard, since ids are full of ``[]``), one
without is a test file (not even imported, e.g. one that needs a package ``feast[test]`` lacks).
A line without a reason is an error; a pattern that matches nothing is reported, so stale
exclusions show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest


@dataclass
class Exclusion:
    pattern: str
    reason: str
    matched: list[str] = field(default_factory=list)

    @property
    def is_file(self) -> bool:
        return "::" not in self.pattern

    def matches(self, nodeid: str) -> bool:
        return re.fullmatch(re.escape(self.pattern).replace(r"\*", ".*"), nodeid) is not None


def read_exclusions(path: Path) -> list[Exclusion]:
    exclusions = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        pattern, _, reason = line.partition("#")
        if not reason.strip():
            raise pytest.UsageError(f"{path}:{number}: exclusion {line.strip()!r} has no # reason")
        exclusions.append(Exclusion(pattern.strip(), reason.strip()))
    return exclusions


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--exclusions", required=True, help="the exclusion file (pattern # reason)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_KEY] = read_exclusions(Path(config.getoption("--exclusions")))


_KEY = pytest.StashKey[list[Exclusion]]()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    for exclusion in config.stash[_KEY]:
        if exclusion.is_file and collection_path.as_posix().endswith(exclusion.pattern):
            exclusion.matched.append(exclusion.pattern)
            return True
    return None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept, excluded = [], []
    for item in items:
        rule = next(
            (e for e in config.stash[_KEY] if not e.is_file and e.matches(item.nodeid)),
            None,
        )
        (kept if rule is None else excluded).append(item)
        if rule is not None:
            rule.matched.append(item.nodeid)
    items[:] = kept
    if excluded:
        config.hook.pytest_deselected(items=excluded)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    stats = terminalreporter.stats
    write = terminalreporter.write_line
    terminalreporter.section("exclusions")
    for exclusion in config.stash[_KEY]:
        what = "file" if exclusion.is_file else f"{len(exclusion.matched)} tests"
        state = what if exclusion.matched else "MATCHED NOTHING"
        write(f"{exclusion.pattern}  [{state}]  {exclusion.reason}")
    excluded_tests = sum(len(e.matched) for e in config.stash[_KEY] if not e.is_file)
    excluded_files = sum(1 for e in config.stash[_KEY] if e.is_file and e.matched)
    count = {k: len(stats.get(k, [])) for k in ("passed", "failed", "skipped", "error")}
    write(
        f"universal offline-store tests: passed {count['passed']}, failed {count['failed']}, "
        f"errors {count['error']}, skipped {count['skipped']}, "
        f"excluded {excluded_tests} (+ {excluded_files} files not collected)",
        bold=True,
    )
