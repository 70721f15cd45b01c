"""Which strategy computes a job's windows, and why: the one place that chooses.

Strategies are listed fastest first; a job runs on the first whose conditions it meets. A
strategy may still find, while running, that it cannot finish an archive (it raises
:class:`~feast_stream_backfill.strategies.StrategyDeclined`): the next one that accepts the
job runs instead, and the backfill's log line, stats and :class:`Plan` say so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import SparkSession

from feast_stream_backfill.job import StreamJob
from feast_stream_backfill.strategies import Condition, Strategy, StrategyDeclined, Windowed
from feast_stream_backfill.strategies.aligned_in_order import AlignedInProcessingOrder
from feast_stream_backfill.strategies.aligned_unsorted import AlignedWithoutSort
from feast_stream_backfill.strategies.merging import MergingWindows
from feast_stream_backfill.strategies.over import OverRows
from feast_stream_backfill.strategies.processing_time_unsorted import ProcessingTimeWithoutSort

log = logging.getLogger(__name__)

#: Every strategy, fastest first.
STRATEGIES: tuple[Strategy, ...] = (
    AlignedWithoutSort(),
    ProcessingTimeWithoutSort(),
    AlignedInProcessingOrder(),
    MergingWindows(),
    OverRows(),
)


@dataclass(frozen=True)
class Considered:
    """A strategy and what it needs, checked against the job."""

    strategy: Strategy
    conditions: tuple[Condition, ...]

    @property
    def accepts(self) -> bool:
        return all(c.holds for c in self.conditions)


@dataclass(frozen=True)
class Plan:
    """The strategies that accept the job, in the order they are tried (the first runs), and
    every strategy's conditions as checked."""

    accepting: tuple[Strategy, ...]
    considered: tuple[Considered, ...]

    @property
    def strategy(self) -> Strategy:
        return self.accepting[0]

    def explain(self) -> str:
        """Which strategy runs and why, one line per strategy considered."""
        lines = [f"strategy: {self.strategy.name}"]
        for c in self.considered:
            unmet = [cond.needs for cond in c.conditions if not cond.holds]
            verdict = "accepts" if c.accepts else "needs " + "; ".join(unmet)
            lines.append(f"  {c.strategy.name}: {verdict}")
        return "\n".join(lines)


def eligible(job: StreamJob) -> list[Strategy]:
    """Every strategy that accepts the job, fastest first (the tests run each)."""
    return list(plan(job).accepting)


def plan(job: StreamJob, strategy: str | None = None) -> Plan:
    """The strategies for ``job``; ``strategy`` names the one to use (it must accept the job)."""
    considered = tuple(Considered(s, tuple(s.conditions(job))) for s in STRATEGIES)
    accepting = tuple(c.strategy for c in considered if c.accepts)
    if strategy is not None:
        names = [s.name for s in STRATEGIES]
        if strategy not in names:
            raise ValueError(f"unknown strategy {strategy!r}: one of {names}")
        if strategy not in [s.name for s in accepting]:
            chosen = next(c for c in considered if c.strategy.name == strategy)
            unmet = [c.needs for c in chosen.conditions if not c.holds]
            raise ValueError(f"strategy {strategy!r} does not accept this job: it needs {unmet}")
        accepting = tuple(s for s in accepting if s.name == strategy)
    return Plan(accepting, considered)


@dataclass(frozen=True)
class Ran:
    """A strategy's result, the strategy that produced it, and why others before it declined."""

    windowed: Windowed
    strategy: Strategy
    declined: tuple[str, ...]


def run(spark: SparkSession, job: StreamJob, chosen: Plan) -> Ran:
    """Run the plan's first strategy; where one declines, the next (logged)."""
    declined: list[str] = []
    for strategy in chosen.accepting:
        try:
            return Ran(strategy.run(spark, job), strategy, tuple(declined))
        except StrategyDeclined as reason:
            log.warning("strategy %s declined (%s): trying the next", strategy.name, reason)
            declined.append(f"{strategy.name}: {reason}")
    raise RuntimeError(f"every strategy that accepts the job declined: {declined}")
