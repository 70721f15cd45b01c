"""On-demand conformance run: ``python -m tests.conformance [--random N] [--seed S] [--plugin]
[--idleness] [--unsorted] [--wall-clock SCALE]``.

Replays the hand-written scenarios and N random ones on Flink (one JVM) and compares each with
the reference simulator and, with ``--plugin``, with the plugin's Spark backfill (a few seconds
per scenario). ``--idleness`` gives every one-topic MIN scenario an idleness timeout;
``--unsorted`` makes every aligned-window scenario one the plugin runs without sorting
(the strategy without a sort).
``--wall-clock SCALE`` also replays the processing-time scenarios on a MiniCluster at SCALE wall
ms per processing-time ms (:mod:`wall_clock`). Prints scenario counts (per window kind x
emission, and at realistic epoch times), match rates and wall times; exits 1 on any
disagreement. Spark is started only for ``--plugin``: records are ordered by the simulator.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from dataclasses import replace

from tests.conformance import wall_clock
from tests.conformance.harness import build, compare, flink_log, processing_order, run_flink
from tests.conformance.scenarios import (
    at_realistic_times,
    generated,
    hand_written,
    kind,
    unsorted,
)
from tests.reference_simulator import simulate


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance")
    parser.add_argument("--random", type=int, default=200, help="random scenarios (default 200)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--plugin", action="store_true", help="also compare with Spark backfill")
    parser.add_argument("--idleness", action="store_true", help="add withIdleness(T) to jobs")
    parser.add_argument("--unsorted", action="store_true", help="aligned jobs unsorted")
    parser.add_argument("--wall-clock", type=int, metavar="SCALE", help="wall ms per pt ms")
    parser.add_argument("--band", type=int, default=50, help="ambiguity band, wall ms")
    args = parser.parse_args()

    started = time.monotonic()
    scenarios = hand_written() + generated(args.random, args.seed)
    if args.idleness:
        rng = random.Random(args.seed)
        scenarios = [  # where the plugin models it: one topic combined by MIN
            replace(s, job=replace(s.job, idleness=rng.choice([5, 20, 60, 300])))
            if s.job.combine == "min" and len({r.topic for r in s.records}) == 1
            else s
            for s in scenarios
        ]
    if args.unsorted:
        scenarios = [s if s.job.gap else replace(s, job=unsorted(s.job)) for s in scenarios]
    classpath = build()
    timed = processing_order(scenarios)
    flink_started = time.monotonic()
    runs = run_flink(classpath, scenarios, timed)
    flink_seconds = time.monotonic() - flink_started

    references = {"simulator": lambda s: simulate(s.records, s.job)}
    if args.plugin:
        from feast_stream_backfill.spark import get_spark
        from tests.test_differential import spark_backfill

        conf = {"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "4"}
        from feast_stream_backfill.planner import STRATEGIES, eligible
        from tests.test_differential import stream_job

        spark = get_spark(conf)

        def by(strategy: str):
            def run(s):
                accepting = [x.name for x in eligible(stream_job(spark, s.records, s.job))]
                if strategy not in accepting:
                    return None  # not this strategy's job
                return spark_backfill(spark, s.records, s.job, strategy=strategy)

            return run

        for strategy in STRATEGIES:
            references[f"plugin ({strategy.name})"] = by(strategy.name)
    kinds = Counter(kind(s) for s in scenarios)
    epoch = sum(map(at_realistic_times, scenarios))
    between = sum(  # Flink fired on a periodic tick at an instant no record was read at
        any(f[0] == "t" and f[1] not in {pt for pt, _ in records} for f in run.firings)
        for run, records in zip(runs, timed, strict=True)
    )
    print(
        f"{len(scenarios)} scenarios, {epoch} at realistic epoch times (~1.77e12 ms), "
        f"{between} with firings on ticks between records:"
    )
    print("  " + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items())))
    failed = False
    for name, reference in references.items():
        agree = emissions = matched = dropped = compared = 0
        by_domain = {"event": [0, 0], "processing": [0, 0]}
        by_kind: Counter[str] = Counter()
        seen: Counter[str] = Counter()
        for scenario, run in zip(scenarios, runs, strict=True):
            flink = flink_log(run, scenario.job)
            try:
                answer = reference(scenario)
                if answer is None:
                    continue
                problems = compare(flink, answer, scenario.job)
            except Exception as error:  # report it with the scenario, go on with the others
                problems = [f"raised {type(error).__name__}: {str(error).strip()[-600:]}"]
            compared += 1
            seen[kind(scenario)] += 1
            seen["epoch times"] += at_realistic_times(scenario)
            emissions += len(flink[0])
            matched += len(flink[0]) - sum(p.startswith("Flink only") for p in problems)
            dropped += sum(flink[1].values())
            agree += not problems
            by_domain[scenario.job.domain][0] += not problems
            by_domain[scenario.job.domain][1] += 1
            by_kind[kind(scenario)] += not problems
            by_kind["epoch times"] += not problems and at_realistic_times(scenario)
            if problems:
                failed = True
                print(f"{name} disagrees on {scenario.name}: {scenario.job}")
                print("  " + "\n  ".join(problems[:10]))
        print(
            f"Flink vs {name}: {agree}/{compared} scenarios identical "
            f"(event time {by_domain['event'][0]}/{by_domain['event'][1]}, processing time "
            f"{by_domain['processing'][0]}/{by_domain['processing'][1]}); "
            f"{matched}/{emissions} Flink emissions matched "
            f"({100 * matched / max(emissions, 1):.2f}%); "
            f"{dropped} dropped (record, window) pairs"
        )
        print(
            "  identical: "
            + ", ".join(
                f"{k} {by_kind[k]}/{n}" for k, n in sorted(seen.items()) if k != "epoch times"
            )
            + f", at epoch times {by_kind['epoch times']}/{seen['epoch times']}"
        )
    print(f"Flink replay of {len(scenarios)} scenarios: {flink_seconds:.1f} s (one JVM)")
    if args.wall_clock:
        failed |= not _wall_clock(classpath, scenarios, timed, args.wall_clock, args.band)
    print(f"whole run {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


def _wall_clock(classpath: str, scenarios, timed, scale: int, band: int) -> bool:
    chosen = [i for i, s in enumerate(scenarios) if s.job.domain == "processing"]
    started = time.monotonic()
    _, firings = wall_clock.replay(
        classpath, [scenarios[i] for i in chosen], [timed[i] for i in chosen], scale
    )
    report = wall_clock.compare(
        [scenarios[i] for i in chosen], [timed[i] for i in chosen], firings, scale, band
    )
    lags = sorted(report.lags_ms)
    print(
        f"wall clock (x{scale}, band {band} ms): {len(chosen)} processing-time scenarios, "
        f"{report.records} records, {report.ambiguous} ambiguous, {report.matched} of the others "
        f"in the plugin's windows ({100 * report.match_rate:.2f}%); {report.windows_matched}/"
        f"{report.windows} unambiguous firings with the plugin's values; timer firings "
        f"{lags[0]:.0f}..{lags[len(lags) // 2]:.0f}..{lags[-1]:.0f} wall ms after the window end "
        f"(min..median..max); {time.monotonic() - started:.1f} s"
    )
    for line in report.mismatches[:10]:
        print("  " + line)
    return report.match_rate >= 0.999


if __name__ == "__main__":
    sys.exit(main())
