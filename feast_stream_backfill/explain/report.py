"""One self-contained HTML page per run: for each view, what to look at first (the anomalies
named with their effects), the view against the live job (its calibration, where one is kept),
the advisor's table, the anomaly tables, the job's watermark picture and its hottest key's
timeline, inlined as base64 PNGs (the page needs no other file)."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import reduce

import pandas as pd
from matplotlib.figure import Figure
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from feast_stream_backfill.calibration import Calibration
from feast_stream_backfill.calibration.visibility import UNCERTAIN_BELOW
from feast_stream_backfill.explain.advisor import Cell, advise
from feast_stream_backfill.explain.anomalies import Anomalies, anomalies
from feast_stream_backfill.explain.prepared import Prepared
from feast_stream_backfill.explain.samples import watermark_samples
from feast_stream_backfill.explain.timeline import (
    draw_job_watermark,
    draw_key_timeline,
    key_timeline,
)


@dataclass
class ViewReport:
    """One view's section; ``calibration``: the view against the live job (None: never
    calibrated), its residual distribution shading the key's timeline."""

    name: str
    advice: pd.DataFrame
    anomalies: Anomalies
    job_picture: Figure
    key: Mapping[str, object]
    key_picture: Figure
    plan: str
    calibration: Calibration | None = None


def hottest_key(prepared: Prepared) -> dict[str, object]:
    """The key with the most records (ties: the smallest)."""
    keys = prepared.job.keys
    row = (
        prepared.distinct.where(reduce(Column.__and__, [F.col(k).isNotNull() for k in keys]))
        .groupBy(*keys)
        .count()
        .orderBy(F.desc("count"), *keys)
        .first()
    )
    if row is None:
        raise ValueError("report: no record has a key")
    return {k: row[k] for k in keys}


def view_report(
    prepared: Prepared,
    name: str,
    cells: Sequence[Cell],
    predictions: DataFrame | None = None,
    ttl_seconds: float | None = None,
    key: Mapping[str, object] | None = None,
    progress: Callable[[str], None] = lambda step: None,
    cells_per_pass: int | None = None,
    prediction_time: str = "event_timestamp",
    calibration: Calibration | None = None,
) -> ViewReport:
    advice = advise(
        prepared,
        cells,
        predictions,
        prediction_time,
        ttl_seconds=ttl_seconds,
        progress=progress,
        cells_per_pass=cells_per_pass,
    )
    progress("watermark over the archive")
    samples = watermark_samples(prepared)
    progress("anomalies")
    found = anomalies(prepared, samples)
    key = key or hottest_key(prepared)
    progress(f"timeline of {dict(key)}")
    timeline = key_timeline(prepared, key)
    delays = None if calibration is None else calibration.delays
    return ViewReport(
        name,
        advice,
        found,
        draw_job_watermark(samples, name),
        key,
        draw_key_timeline(timeline, None if delays is None else delays.quantiles),
        prepared.plan.explain(),
        calibration,
    )


def findings(found: Anomalies) -> list[str]:
    """The anomalies in sentences, each with its effect."""
    lines = []
    for r in found.far.to_dict("records"):
        if r["direction"] != "ahead" or pd.isna(r["drops_caused"]):
            continue
        lines.append(
            f"Partition {r['partition']} offset {r['offset']}: event time {r['event_time']}, "
            f"{r['neighbours_hours']:,.1f} h ahead of its neighbours (a broken producer clock?). "
            "Processing times are inferred from event times, so its partition's later records "
            "are read after it, and its partition holds the watermark back until then. Its "
            f"effect, against the same archive without it: {int(r['drops_caused']):+,} dropped, "
            f"{int(r['pending_caused']):+,} pending, {int(r['fired_after_end_caused']):+,} "
            "(record, window) pairs fired only after the archive's last normal instant."
        )
    behind = found.far_counts["behind"]
    if behind:
        lines.append(f"{behind:,} records far behind their neighbours (severely late).")
    for r in found.holding.head(3).to_dict("records"):
        lines.append(
            f"Partition {r['partition']} held the job's watermark back for "
            f"{r['held_hours']:,.2f} h in all (longest from {r['longest_from']} to "
            f"{r['longest_to']}): every window waited for it, up to "
            f"{r['max_behind_next_hours'] or 0:,.2f} h behind the next partition."
        )
    for r in found.silent.head(3).to_dict("records"):
        lines.append(
            f"Partition {r['partition']} was silent for {r['hours']:,.2f} h, from "
            f"{r['silent_from']} to {r['silent_to']}."
        )
    if found.duplicates:
        lines.append(f"{found.duplicates:,} records archived twice (each counted once).")
    if found.null_keys:
        lines.append(
            f"{found.null_keys:,} records with a null key (the backfill refuses them unless "
            "null_keys='drop', which drops them as a filter before keyBy would)."
        )
    return lines


def png_base64(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "<p>None.</p>"
    return frame.to_html(index=False, float_format=lambda v: f"{v:,.3f}", na_rep="–", border=0)


def _image(alt: str, fig: Figure) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{png_base64(fig)}">'


def _against_live_job(report: ViewReport) -> str:
    """The calibration's findings; for a view without one, how to make it."""
    name = html.escape(report.name)
    if report.calibration is None:
        return (
            f'<p class="note">{name} has no calibration against the live job: '
            f"<code>feast-stream-backfill calibrate {name}</code> makes one (see the guide "
            "docs/guides/calibration.md).</p>"
        )
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in report.calibration.summary())
    shaded = (
        ""
        if report.calibration.delays is None
        else "<p>The timeline below is shaded where the live job showed the backfill's value "
        f"with a probability below {UNCERTAIN_BELOW:g}.</p>"
    )
    return f'<h3>Against the live job</h3><ul class="calibration">{lines}</ul>{shaded}'


def _section(report: ViewReport) -> str:
    found = report.anomalies
    items = "".join(f"<li>{html.escape(line)}</li>" for line in findings(found)) or "<li>none</li>"
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in found.notes)
    key = ", ".join(f"{k}={v}" for k, v in report.key.items())
    return f"""
<section id="{html.escape(report.name)}">
<h2>{html.escape(report.name)}</h2>
<h3>What to look at</h3><ul class="findings">{items}</ul>
{_against_live_job(report)}
<h3>Watermark bound B and allowed lateness L: what each costs</h3>
<p>Records dropped and pending count (record, window) pairs; delay is emit time minus the window's
end, in seconds; wrong: prediction points whose value differs from a naive event-time join.</p>
{_table(report.advice)}
<h3>Watermark lag</h3>
{_image(f"watermark lag of {report.name}", report.job_picture)}
<h3>Timeline of the hottest key ({html.escape(key)})</h3>
{_image(f"timeline of {key}", report.key_picture)}
<h3>How the backfill computes this view</h3>
<pre class="plan">{html.escape(report.plan)}</pre>
<h3>Anomalies</h3>
<p>{found.far_counts["ahead"]:,} records far ahead, {found.far_counts["behind"]:,} far behind;
{found.duplicates:,} duplicates; {found.null_keys:,} null keys.</p>
<h4>Records far from their partition's clock (the furthest 20)</h4>{_table(found.far)}
<h4>Partitions holding the watermark back</h4>{_table(found.holding)}
<h4>Silent periods (the longest 20)</h4>{_table(found.silent)}
<ul class="notes">{notes}</ul>
</section>"""


STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { padding: 0.25em 0.7em; border-bottom: 1px solid #ddd; text-align: right; }
th { background: #f0f0f0; }
img { max-width: 100%; border: 1px solid #ddd; }
ul.findings li { margin: 0.3em 0; }
ul.notes, p.note { color: #666; font-size: 0.85em; }
"""


def render_html(reports: Sequence[ViewReport], title: str = "feast-stream-backfill") -> str:
    made = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sections = "".join(_section(r) for r in reports)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>{STYLE}</style></head>
<body><h1>{html.escape(title)}</h1><p>Made {made}.</p>{sections}</body></html>
"""
