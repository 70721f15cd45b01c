"""The calibration as a picture: how late the live job wrote, and where it was later still.

Left, the density of write time minus backfilled emit time, drawn from the stored quantiles
(no second pass over the writes), with the median and the 90 % spread. Right, each
partition's median delay per hour above the median of all cells: a partition read late is a
row that lights up, a pause or restart a column.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from feast_stream_backfill.calibration import Calibration  # noqa: E402
from feast_stream_backfill.calibration.fit import LEVELS  # noqa: E402
from feast_stream_backfill.calibration.strays import HOUR_MS  # noqa: E402


def draw_calibration(calibration: Calibration, title: str) -> Figure:
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [1, 1.4]}
    )
    figure.suptitle(title)
    _density(left, calibration)
    _cells(right, calibration.cells)
    figure.tight_layout()
    return figure


def _density(ax, calibration: Calibration) -> None:
    ax.set_title("write time minus backfilled emit time")
    ax.set_xlabel("seconds")
    if calibration.delays is None:
        ax.text(0.5, 0.5, "no write matched an emission", ha="center", transform=ax.transAxes)
        return
    q = np.asarray(calibration.delays.quantiles) / 1000
    # between the 1st and 99th percentiles: the tails are a pause's or a restart's
    inner = slice(2, len(q) - 2)
    edges = q[inner]
    widths = np.diff(edges)
    step = LEVELS[1] - LEVELS[0]
    density = np.where(widths > 0, step / np.where(widths > 0, widths, 1), 0)
    ax.stairs(density, edges, fill=True, color="#4c72b0", alpha=0.6)
    total = calibration.delays.total
    ax.axvline(total.median / 1000, color="black", label=f"median {total.median / 1000:.3f} s")
    ax.axvspan(
        total.spread[0] / 1000, total.spread[1] / 1000, color="grey", alpha=0.15, label="90 %"
    )
    ax.set_ylabel("share of writes per second")
    ax.legend(loc="upper right")


def _cells(ax, cells: pd.DataFrame | None) -> None:
    ax.set_title("median delay above all cells', per partition and hour")
    if cells is None or cells.empty or cells["median_ms"].isna().all():
        ax.text(0.5, 0.5, "no partition to show", ha="center", transform=ax.transAxes)
        return
    centre = cells["median_ms"].median()
    grid = cells.pivot_table(index="partition", columns="hour", values="median_ms") - centre
    grid = grid.reindex(sorted(grid.index, key=_partition_order))
    seconds = grid.to_numpy() / 1000
    # at least a second of scale: cells within ms of each other are not worth a colour
    top = max(1.0, float(np.nanmax(seconds)) if np.isfinite(seconds).any() else 1.0)
    image = ax.imshow(
        seconds, aspect="auto", cmap="magma_r", vmin=0, vmax=top, interpolation="nearest"
    )
    ax.set_yticks(range(len(grid.index)), grid.index)
    ax.set_ylabel("partition")
    hours = list(grid.columns)
    ticks = list(range(0, len(hours), max(1, len(hours) // 8)))
    labels = [f"{pd.Timestamp(hours[i] * HOUR_MS, unit='ms'):%m-%d %H:00}" for i in ticks]
    ax.set_xticks(ticks, labels, rotation=30, ha="right")
    ax.figure.colorbar(image, ax=ax, label="seconds")


def _partition_order(label: str) -> tuple:
    head, _, tail = label.rpartition("/")
    return (head, int(tail)) if tail.isdigit() else (head, 1 << 31, tail)
