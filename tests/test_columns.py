"""The internal-column registry and the one-copy rules: checked by reading the source."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from feast_stream_backfill.columns import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "feast_stream_backfill"
LITERAL = re.compile(r"""["'](_[a-z][a-z_]*)["']""")


def _literals() -> dict[str, set[str]]:
    """Every ``"_name"`` string literal in the core, and the modules it stands in."""
    where: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        module = str(path.relative_to(PACKAGE))
        for name in LITERAL.findall(path.read_text()):
            where[name].add(module)
    return where


def test_no_internal_column_name_is_written_in_two_modules():
    shared = {
        name: sorted(modules)
        for name, modules in _literals().items()
        if len(modules - {"columns.py"}) > 1 and not name.startswith("__")
    }
    assert shared == {}


def test_registered_names_are_spelled_only_in_the_registry():
    spelled = {n: sorted(m - {"columns.py"}) for n, m in _literals().items() if n in REGISTRY}
    assert {n: m for n, m in spelled.items() if m} == {}
