"""Replay a job on real Apache Flink and compare its output with the plugin's emission log.

``FlinkReplay.java`` (next to this file) runs Flink's own classes deterministically: the
sources' per-split watermark generators and multiplexer (``ProgressiveTimestampsAndWatermarks``,
built from a real ``WatermarkStrategy``), the union's ``StatusWatermarkValve``, and the
``WindowOperator`` that a DataStream program ``keyBy().window().allowedLateness().aggregate()``
builds, inside Flink's ``KeyedOneInputStreamOperatorTestHarness``. Records are fed in the
global processing order of the reference simulator (``processing_times``: dedupe, ``pt``, sort by
``(pt, topic, partition, offset)``), not the plugin's: the plugin's own ordering is under test;
periodic watermarks tick on a test processing-time service at multiples of ``I``.

Flink is fetched by ``mvn`` with ``pom.xml`` into ``lib/`` and the replay compiled by ``javac``
into ``classes/`` (both git-ignored), lazily and idempotently by :func:`build`.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tests.reference_simulator import Job, Record, processing_times

HERE = Path(__file__).resolve().parent
LIB, CLASSES = HERE / "lib", HERE / "classes"
SOURCES = sorted((HERE / "src").glob("*.java"))


@dataclass(frozen=True)
class Scenario:
    """An archive (the reference simulator's records) and a job (its :class:`Job`)."""

    name: str
    records: list[Record]
    job: Job


@dataclass
class FlinkRun:
    """What Flink did: firings in output order and dropped (record, window) pairs.

    A firing is ``(cause, time, key, start, end, watermark, count, sum, min, max)``; ``cause``
    is ``e<i>`` (fired by processing record i: a late or per-record firing), ``r<i>`` (by the
    watermark record i emitted), ``t`` (a periodic watermark tick at ``time``) or ``c`` (a
    processing-time timer).
    """

    firings: list[tuple] = field(default_factory=list)
    dropped: list[tuple] = field(default_factory=list)  # (record index, key, window start)
    side_output: list[int] = field(default_factory=list)  # records Flink's side output got
    fully_dropped: set[int] = field(default_factory=set)  # records dropped from every window
    partly_dropped: set[int] = field(default_factory=set)  # from some of their windows only


def _stale(target: Path, *sources: Path) -> bool:
    return not target.exists() or any(s.stat().st_mtime > target.stat().st_mtime for s in sources)


def build() -> str:
    """Fetch Flink's jars and compile the replay if not done yet; returns the classpath."""
    return build_in(HERE, SOURCES)


def build_in(here: Path, sources: list[Path], resources: Path | None = None) -> str:
    """Fetch the jars of ``here/pom.xml`` into ``here/lib`` and compile ``sources`` (with
    ``resources`` copied beside the classes) into ``here/classes``, each only when stale;
    returns the classpath."""
    for tool in ("mvn", "javac", "java"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"the Flink conformance harness needs {tool!r} (Java 17+, Maven)")
    lib, classes = here / "lib", here / "classes"
    done = lib / ".complete"
    if _stale(done, here / "pom.xml"):
        shutil.rmtree(lib, ignore_errors=True)
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(here / "pom.xml"), "dependency:copy-dependencies"],
            check=True,
        )
        done.touch()
    stamp = classes / ".complete"
    if _stale(stamp, *sources, done):
        shutil.rmtree(classes, ignore_errors=True)
        subprocess.run(
            ["javac", "-nowarn", "-d", str(classes), "-cp", f"{lib}/*", *map(str, sources)],
            check=True,
        )
        if resources is not None:
            shutil.copytree(resources, classes, dirs_exist_ok=True)
        stamp.touch()
    return f"{classes}:{lib}/*"


def processing_order(scenarios: list[Scenario]) -> list[list[tuple[int, Record]]]:
    """Each scenario's distinct records as ``(pt, record)`` in global processing order, by the
    reference simulator (its own processing times), independently of the plugin's Spark code."""
    return [processing_times(s.records, s.job) for s in scenarios]


def _feed(scenario: Scenario, timed: list[tuple]) -> str:
    job = scenario.job
    topics = sorted({r.topic for _, r in timed})
    bounds = dict(job.topic_bounds)
    if job.combine == "max" and len({bounds.get(t, job.bound) for t in topics}) > 1:
        raise ValueError(
            f"{scenario.name}: MAX combining is one generator over every record, with one bound"
        )
    lines = [
        f"size {job.size}",
        f"slide {job.slide}",
        f"offset {job.window_offset}",
        f"domain {job.domain}",
        f"trigger {job.trigger}",
        f"lateness {job.lateness}",
        f"interval {job.interval}",
        f"emission {job.emission}",
        f"combine {job.combine}",
        f"idleness {job.idleness}",
        f"gap {job.gap}",
    ]
    lines += [f"topic {t} {bounds.get(t, job.bound)}" for t in topics]
    splits = sorted({(topics.index(r.topic), r.partition) for _, r in timed})
    lines += [f"split {t} {p}" for t, p in splits]
    lines += [
        f"r {topics.index(r.topic)} {r.partition} {r.offset} {r.et} {pt} {r.key} {r.value!r}"
        for pt, r in timed
    ]
    return "\n".join(lines) + "\n"


def run_flink(
    classpath: str, scenarios: list[Scenario], timed: list[list[tuple]]
) -> list[FlinkRun]:
    """Replay every scenario on Flink in one JVM."""
    with tempfile.TemporaryDirectory(prefix="flink-conformance-") as tmp:
        args = []
        for i, (scenario, records) in enumerate(zip(scenarios, timed, strict=True)):
            (Path(tmp) / f"{i}.in").write_text(_feed(scenario, records))
            args += [f"{tmp}/{i}.in", f"{tmp}/{i}.out"]
        done = subprocess.run(
            ["java", "-XX:+UseSerialGC", "-cp", classpath, "FlinkReplay", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode:
            raise RuntimeError(f"the Flink replay failed:\n{done.stderr[-4000:]}")
        return [_parse((Path(tmp) / f"{i}.out").read_text()) for i in range(len(scenarios))]


def _parse(text: str) -> FlinkRun:
    run = FlinkRun()
    for line in text.splitlines():
        kind, *f = line.split(" ")
        if kind == "fire":
            cause, time, key, start, end, wm, count, total, low, high = f
            run.firings.append(
                (
                    cause,
                    int(time),
                    key,
                    int(start),
                    int(end),
                    int(wm),
                    int(count),
                    float(total),
                    float(low),
                    float(high),
                )
            )
        elif kind == "drop":
            run.dropped.append((int(f[0]), f[1], int(f[2])))
        elif kind == "side":
            run.side_output.append(int(f[0]))
        elif kind == "record":
            index, windows, dropped = map(int, f)
            (run.fully_dropped if dropped == windows else run.partly_dropped).add(index)
    return run


def flink_log(run: FlinkRun, job: Job) -> tuple[list[tuple], dict[tuple, int]]:
    """Flink's firings as an emission log in the plugin's shape (the simulator's tuples):
    ``emit_time`` = firing time + D3, ``emit_sequence`` = output order per (key, emit_time)."""
    sequence: dict[tuple, int] = defaultdict(int)
    emissions = []
    for cause, time, key, start, end, _wm, count, total, low, high in run.firings:
        if cause == "c":  # a processing-time timer for maxTs: Flink fires it 1 ms later
            time = end  # (ProcessingTimeServiceUtil.getProcessingTimeDelay), as the plugin
        if job.trigger == "per_record":
            firing = "per_record"
        else:
            firing = "late" if cause.startswith("e") else "on_time"
        emit = time + job.operator_delay
        emissions.append(
            (key, start, end, emit, sequence[(key, emit)], firing, count, total, low, high)
        )
        sequence[(key, emit)] += 1
    dropped: dict[tuple, int] = defaultdict(int)
    for _, key, start in run.dropped:
        dropped[(key, start)] += 1
    return emissions, dict(dropped)


def _order(e: tuple) -> tuple:
    return (e[0], e[3], e[4], e[1])


def compare(
    flink: tuple[list[tuple], dict], plugin: tuple[list[tuple], dict], job: Job
) -> list[str]:
    """Differences, as readable lines (empty: identical firings, values, times, drops). Firings
    are compared as multisets: a firing one side repeats more often is reported once per extra
    copy. The order of a key's firings at one instant is compared through ``emit_sequence``."""
    f_emissions, p_emissions = Counter(flink[0]), Counter(plugin[0])
    f_dropped, p_dropped = flink[1], plugin[1]
    problems = [
        f"Flink only:  {e}" for e in sorted((f_emissions - p_emissions).elements(), key=_order)
    ]
    problems += [
        f"plugin only: {e}" for e in sorted((p_emissions - f_emissions).elements(), key=_order)
    ]
    for k in sorted(set(f_dropped) | set(p_dropped)):
        if f_dropped.get(k) != p_dropped.get(k):
            problems.append(f"dropped {k}: Flink {f_dropped.get(k)}, plugin {p_dropped.get(k)}")
    return problems
