"""The universal run's exclusion plugin: every exclusion has a reason, and counts are exact."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.feast_universal.stream_backfill_exclusions import read_exclusions

HERE = Path(__file__).parent / "feast_universal"


def test_the_committed_exclusions_all_have_reasons():
    exclusions = read_exclusions(HERE / "exclusions.txt")
    assert [e.pattern for e in exclusions] == [
        "tests/integration/offline_store/test_dqm_validation.py",
        "tests/integration/offline_store/test_non_entity_mode.py"
        "::test_non_entity_mode_preserves_multiple_timestamps[*]",
    ]
    assert all(e.reason for e in exclusions)


def test_an_exclusion_without_a_reason_is_refused(tmp_path):
    path = tmp_path / "exclusions.txt"
    path.write_text("# comment\n\ntests/a.py::test_x[*]\n")
    with pytest.raises(pytest.UsageError, match=r"exclusions.txt:3: .*test_x.* has no # reason"):
        read_exclusions(path)


def test_a_run_deselects_ignores_and_counts(tmp_path):
    (tmp_path / "test_kept.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('n', [1, 2, 3])\n"
        "def test_p(n): assert n != 3\n"
        "def test_skip(): pytest.skip('no')\n"
    )
    (tmp_path / "test_broken.py").write_text("import not_installed_anywhere\n")
    (tmp_path / "exclusions.txt").write_text(
        "test_kept.py::test_p[2]  # two is out\n"
        "test_broken.py  # imports a missing package\n"
        "test_kept.py::test_sk*  # wildcard\n"
        "test_kept.py::test_gone  # matches nothing\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "stream_backfill_exclusions", "-p",
         "no:cacheprovider", "--exclusions", "exclusions.txt", "-q", "--rootdir", "."],
        cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    out = result.stdout
    assert "test_kept.py::test_p[2]  [1 tests]  two is out" in out
    assert "test_broken.py  [file]  imports a missing package" in out
    assert "test_kept.py::test_sk*  [1 tests]  wildcard" in out
    assert "test_kept.py::test_gone  [MATCHED NOTHING]  matches nothing" in out
    assert (
        "universal offline-store tests: passed 1, failed 1, errors 0, skipped 0, "
        "excluded 2 (+ 1 files not collected)" in out
    )
