"""Processing-time windows against a real MiniCluster driven by the wall clock.

``FlinkWallClock.java`` releases each record at wall time ``base + pt * scale`` (buffer timeout
0) into ``*ProcessingTimeWindows`` operators, one per window spec, all in one job. A record due
within ``band_ms`` of wall time before a window boundary is *ambiguous*: the replay's clock
resolution, not the model, decides its window. For the others, Flink's window must be the one
the plugin's rule gives (``tests.reference_simulator.windows_of`` on ``pt``).
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tests.conformance.harness import Scenario
from tests.reference_simulator import windows_of


@dataclass
class WallClockReport:
    records: int = 0
    ambiguous: int = 0
    matched: int = 0  # non-ambiguous records in exactly the plugin's windows
    windows: int = 0  # Flink firings of windows holding no ambiguous record (either side)
    windows_matched: int = 0  # ... with the plugin's (count, sum, min, max) at that firing
    lags_ms: list[float] = field(default_factory=list)  # timer firings: wall ms after the end
    mismatches: list[str] = field(default_factory=list)

    @property
    def match_rate(self) -> float:
        return self.matched / max(self.records - self.ambiguous, 1)


def _spec(job) -> tuple:
    return (job.size, job.slide, job.window_offset, job.trigger)


def _shift(job, records: list[tuple]) -> int:
    """A multiple of the window slide that brings the scenario's first ``pt`` into
    ``[0, slide)``: the same windows, released within ms of the start even at epoch times."""
    slide = job.slide or job.size
    return records[0][0] - records[0][0] % slide if records else 0


def replay(
    classpath: str, scenarios: list[Scenario], timed: list[list[tuple]], scale: int
) -> tuple[int, list[tuple]]:
    """Run every (processing-time) scenario in one wall-clock job; returns ``base`` and the
    firings ``(scenario, key, start, end, fired_at, count, sum, min, max, indices)``, times
    in the scenario's processing-time ms (wall-clock ones mapped back, maybe fractional; each
    scenario fed shifted by :func:`_shift`, so that epoch-time ones need not wait decades)."""
    specs = sorted({_spec(s.job) for s in scenarios})
    shifts = [_shift(s.job, records) for s, records in zip(scenarios, timed, strict=True)]
    lines = [f"scale {scale}"]
    lines += [
        f"spec {i} {size} {slide} {offset} {trigger}"
        for i, (size, slide, offset, trigger) in enumerate(specs)
    ]
    feed = sorted(
        (pt - shifts[n], specs.index(_spec(s.job)), n, index, r.key, r.value)
        for n, (s, records) in enumerate(zip(scenarios, timed, strict=True))
        for index, (pt, r) in enumerate(records)
    )
    lines += [
        f"r {spec} {n} {index} {pt} {key} {value!r}" for pt, spec, n, index, key, value in feed
    ]
    with tempfile.TemporaryDirectory(prefix="flink-wall-clock-") as tmp:
        (Path(tmp) / "in").write_text("\n".join(lines) + "\n")
        done = subprocess.run(
            ["java", "-cp", classpath, "FlinkWallClock", f"{tmp}/in", f"{tmp}/out"],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the wall-clock replay failed:\n{done.stderr[-4000:]}")
        output = (Path(tmp) / "out").read_text().splitlines()
    base = next(
        int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("base ")
    )

    def to_pt(wall: str, n: int) -> float:
        return (int(wall) - base) / scale + shifts[n]

    firings = []
    for line in output:
        if not line.startswith("fire "):
            continue
        _, _spec_id, scoped_key, start, end, fired, count, total, low, high, indices = line.split(
            " "
        )
        scenario, key = scoped_key.split("/", 1)
        n = int(scenario)
        firings.append(
            (
                n,
                key,
                int(to_pt(start, n)),
                int(to_pt(end, n)),
                to_pt(fired, n),
                int(count),
                float(total),
                float(low),
                float(high),
                [int(i) for i in indices.split(",")],
            )
        )
    return base, firings


def compare(
    scenarios: list[Scenario],
    timed: list[list[tuple]],
    firings: list[tuple],
    scale: int,
    band_ms: int,
) -> WallClockReport:
    report = WallClockReport()
    flink_windows: dict[tuple, set[int]] = {}
    for n, _key, start, _end, *_rest, indices in firings:
        for i in indices:
            flink_windows.setdefault((n, i), set()).add(start)
    ambiguous: set[tuple] = set()
    for n, (scenario, records) in enumerate(zip(scenarios, timed, strict=True)):
        job = scenario.job
        slide = job.slide or job.size
        for i, (pt, _) in enumerate(records):
            report.records += 1
            next_boundary = pt - (pt - job.window_offset) % slide + slide
            ends = {end for _, end in windows_of(pt, job)}
            if any(0 < (b - pt) * scale <= band_ms for b in ends | {next_boundary}):
                report.ambiguous += 1
                ambiguous.add((n, i))
                continue
            want = {start for start, _ in windows_of(pt, job)}
            if flink_windows.get((n, i), set()) == want:
                report.matched += 1
            else:
                got = sorted(flink_windows.get((n, i), set()))
                report.mismatches.append(
                    f"{scenario.name} record {i} (pt {pt}): Flink {got}, plugin {sorted(want)}"
                )
    for n, key, start, end, fired, count, total, low, high, indices in firings:
        job = scenarios[n].job
        last = max(indices) if job.trigger == "per_record" else len(timed[n])
        expected = [  # the records the plugin's window holds when Flink fired it
            i
            for i, (pt, r) in enumerate(timed[n])
            if i <= last and r.key == key and (start, end) in windows_of(pt, job)
        ]
        if any((n, i) in ambiguous for i in [*indices, *expected]):
            continue
        report.windows += 1
        values = [timed[n][i][1].value for i in expected]
        if values and (count, total, low, high) == (
            len(values),
            sum(values),
            min(values),
            max(values),
        ):
            report.windows_matched += 1
        else:
            report.mismatches.append(
                f"{scenarios[n].name} window {key} {start}: Flink {count} {total}"
            )
        if job.trigger != "per_record":
            report.lags_ms.append((fired - end) * scale)
    return report
