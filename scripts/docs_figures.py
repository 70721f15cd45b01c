"""Draws the docs' figures: the watermark (docs/images/watermark.png) and the flow of the code
(docs/images/flow.png). Static pictures, so that the pages read the same offline and on GitHub.

The watermark is a small hand-made example, computed here with the model's rules in plain
Python so that the picture needs no Spark: two partitions, processing time as the running
maximum of event time plus a delay, per-partition watermarks, their MIN moved on periodic ticks,
and one window.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

B, TICK, D2 = 2.0, 1.0, 0.3  # seconds: out-of-orderness bound, tick interval, min delay
WINDOW_END = 10.0
PARTITIONS = {
    "partition 0": [1.0, 3.0, 2.5, 6.0, 9.5, 12.5, 14.0],
    "partition 1": [0.5, 2.0, 4.0, 7.0, 8.0, 11.0, 13.0, 15.0, 9.0],
}
COLORS = {"partition 0": "tab:blue", "partition 1": "tab:orange"}


def processing_times(event_times: list[float]) -> list[float]:
    """pt_i = max(pt_(i-1), et_i + D2): the earliest reading consistent with the offsets."""
    out, pt = [], -math.inf
    for et in event_times:
        pt = max(pt, et + D2)
        out.append(pt)
    return out


def watermark_at(t: float, records: list[tuple[float, float]]) -> float:
    """A partition's watermark after reading every record with pt <= t."""
    seen = [et for pt, et in records if pt <= t]
    return max(seen) - B - 0.001 if seen else -math.inf


IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"

#: The flow's stages, left to right; a column with several boxes is a choice or a fork.
FLOW = [
    [("records", "records, archives,\njob_records")],
    [("plan", "planner")],
    [
        ("aligned-unsorted", "strategies/\naligned_unsorted/"),
        ("aligned-in-order", "processing_time,\nwatermarks,\nwindow_operator"),
        ("merging", "processing_time,\nwatermarks, sessions"),
    ],
    [("emission log", "emission_log,\nemission_store")],
    [("training sets", "training_join"), ("online store", "online_state,\nfeast_plugin")],
]
#: The column whose boxes take their arithmetic from ``rules``, and the note saying so.
STRATEGIES_COLUMN, RULES_NOTE = 2, "each takes its arithmetic\nfrom rules (Spark-free)"


def draw_flow(out: Path) -> None:
    """Boxes per stage (what it is, then its modules), arrows from each box to the next column."""
    width, height, gap = 1.3, 0.8, 0.4
    fig, ax = plt.subplots(figsize=(15, 5), dpi=110)
    centres: list[list[tuple[float, float]]] = []
    for col, boxes in enumerate(FLOW):
        x = col * (width + gap)
        ys = [(len(boxes) - 1) / 2 - i for i in range(len(boxes))]
        centres.append([(x + width / 2, y) for y in ys])
        for (title, modules), y in zip(boxes, ys, strict=True):
            ax.add_patch(plt.Rectangle((x, y - height / 2), width, height, fc="#eef3fb",
                                       ec="#3f51b5", lw=1.2))
            ax.text(x + width / 2, y + 0.24, title, ha="center", va="center", fontsize=9,
                    weight="bold")
            ax.text(x + width / 2, y - 0.08, modules, ha="center", va="center", fontsize=7.5,
                    family="monospace", color="#333333")
    for left, right in zip(centres, centres[1:], strict=False):
        for x0, y0 in left:
            for x1, y1 in right:
                ax.annotate("", (x1 - width / 2, y1), (x0 + width / 2, y0),
                            arrowprops={"arrowstyle": "->", "color": "#555555", "lw": 1})
    ax.text(STRATEGIES_COLUMN * (width + gap) + width / 2, -1.55, RULES_NOTE, ha="center",
            va="center", fontsize=8, style="italic", color="#3f51b5")
    ax.set_xlim(-0.1, len(FLOW) * (width + gap) - gap + 0.1)
    ax.set_ylim(-1.8, 1.6)
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(out)
    print(f"wrote {out}")


def main(out: Path = IMAGES / "watermark.png") -> None:
    parts = {p: list(zip(processing_times(ets), ets, strict=True)) for p, ets in PARTITIONS.items()}
    end = max(pt for recs in parts.values() for pt, _ in recs) + 1.0
    ticks = [k * TICK for k in range(int(end / TICK) + 1)]
    fig, ax = plt.subplots(figsize=(9, 5.2), dpi=110)
    fine = [x / 100 for x in range(int(end * 100))]
    for p, recs in parts.items():
        ax.step(fine, [watermark_at(t, recs) for t in fine], where="post", color=COLORS[p],
                alpha=0.45, lw=1.2, label=f"{p}: watermark (highest et - B - 1 ms)")
    combined, fired_at, level = [], None, -math.inf
    for t in fine:
        tick = math.floor(t / TICK) * TICK  # in force: records read by the tick
        now = min(watermark_at(tick, recs) for recs in parts.values())
        level = max(level, now)  # the combined watermark never goes down
        combined.append(level)
        if fired_at is None and level >= WINDOW_END - 0.001:
            fired_at = t
    ax.step(fine, combined, where="post", color="black", lw=2.2,
            label="job's watermark (MIN, moved on ticks)")
    for p, recs in parts.items():
        for pt, et in recs:
            late = et < WINDOW_END and fired_at is not None and pt >= fired_at
            ax.scatter(pt, et, s=70 if late else 36, color=COLORS[p], zorder=3,
                       marker="x" if late else "o", linewidths=2.5 if late else 1)
            if late:
                ax.annotate("late: dropped", (pt, et), xytext=(-10, -16), ha="right",
                            textcoords="offset points", color="firebrick")
    ax.axhspan(0, WINDOW_END, color="tab:green", alpha=0.06)
    ax.axhline(WINDOW_END - 0.001, color="tab:green", ls="--", lw=1)
    ax.text(0.2, WINDOW_END + 0.25, "window [0 s, 10 s): maxTs = 9.999 s", color="tab:green")
    if fired_at is not None:
        ax.axvline(fired_at, color="tab:green", lw=1.5)
        ax.annotate(f"fires on the tick at {fired_at:.0f} s", (fired_at, 1.0),
                    xytext=(-6, 0), textcoords="offset points", color="tab:green", ha="right")
    for t in ticks:
        ax.axvline(t, color="grey", lw=0.4, alpha=0.4)
    ax.set_xlim(0, end)
    ax.set_ylim(-3, 16)
    ax.set_xlabel("processing time (s): when the job would have read the record")
    ax.set_ylabel("event time (s)")
    ax.set_title(f"B = {B:.0f} s, ticks every I = {TICK:.0f} s, min delay D2 = {D2} s")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
    draw_flow(IMAGES / "flow.png")
