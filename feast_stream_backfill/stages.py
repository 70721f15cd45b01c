"""Where a backfill's time goes: its stages, timed when a caller asks (the bench does).

Spark computes lazily, so a stage's cost shows where something forces it: the backfill's own
actions (validation, the record counts, the watermark, the status counts) and the caller's
writes. Each such place is a named :func:`stage`; outside :func:`timings` it costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_timings: ContextVar[dict[str, float] | None] = ContextVar("stage_timings", default=None)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as ``name`` (added up when several blocks share a name)."""
    timings = _timings.get()
    if timings is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - started


@contextmanager
def timings() -> Iterator[dict[str, float]]:
    """Seconds per stage of everything run inside the block, in the order first run."""
    collected: dict[str, float] = {}
    token = _timings.set(collected)
    try:
        yield collected
    finally:
        _timings.reset(token)
