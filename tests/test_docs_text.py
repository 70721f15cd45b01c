"""The documentation describes the software, not its making: no development sessions, issue
numbers or commit hashes in README, docs or the changelog, and a README a newcomer reads."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
DIARY = re.compile(r"\bsessions? \d+\b(?!\.\d)|\bissues? #?\d+\b|\bbefore issue\b", re.IGNORECASE)
# A short hexadecimal word with a digit and a letter: how git abbreviates a commit.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,12}\b")
#: Commits of other projects that a user needs: the Feast test suite run against the plugin.
OTHER_PROJECTS = {"f0bc0700b"}


def diary_lines(text: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if DIARY.search(line) or set(COMMIT.findall(line)) - OTHER_PROJECTS
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_name_no_session_issue_or_commit(page: Path) -> None:
    assert diary_lines(page.read_text()) == []


def test_the_check_finds_what_it_looks_for() -> None:
    text = "measured in session 31\nsee issue 12\nfixed in `3c85f78`\nsessions 4.38x, B = 5 s"
    assert diary_lines(text) == text.splitlines()[:3]


def test_the_readme_stays_short() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
