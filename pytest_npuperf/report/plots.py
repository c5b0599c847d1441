"""A case's samples as a small chart for its pytest-html row and its page entry: the sorted
samples (a quantile curve: flat means stable, a tail at the right means outliers) on axes in
microseconds, with the median as a dashed line named in the legend and min, median and max in
the title. Drawn with matplotlib (report/charts.py); without it, a one-line note.
"""

from __future__ import annotations

import math
import statistics

from .charts import DASHED, available, figure, missing_note, svg_figure

LINE = "#1f6feb"
MEDIAN = "#d1242f"
WIDTH, HEIGHT = 400, 170


def samples_svg(samples: list[float], width: int = WIDTH, height: int = HEIGHT) -> str:
    values = sorted(v for v in map(float, samples) if math.isfinite(v))
    if not values:
        return '<p class="npuperf-note">no samples</p>'
    if not available():
        return missing_note()
    return _samples(values, max(int(width), 120), max(int(height), 80))


@svg_figure
def _samples(values: list[float], width: int, height: int):
    median = statistics.median(values)
    count = len(values)
    points = _downsample(values, max(width - 80, 2))
    # x: the rank of each drawn sample among all (1 = the fastest)
    ranks = [1 + round(i * (count - 1) / max(len(points) - 1, 1)) for i in range(len(points))]
    fig, (ax,) = figure(width, height, margins=(52, 34, 10, 20))
    ax.plot(ranks, points, color=LINE, linewidth=1.5, marker="o" if len(points) == 1 else "",
            gid="samples")
    ax.axhline(median, color=MEDIAN, linewidth=1.2, linestyle=DASHED,
               label=f"median {median:.4g} us", gid="median")
    ax.set_title(f"{count} sample{'s' if count != 1 else ''}: min {values[0]:.4g}, median "
                 f"{median:.4g}, max {values[-1]:.4g} us", fontsize=9)
    ax.set_xlabel("samples, fastest to slowest")
    ax.set_ylabel("us")
    ax.legend(loc="upper left")
    return fig


def _downsample(values: list[float], limit: int) -> list[float]:
    """At most `limit` evenly spaced order statistics, always keeping min and max."""
    n = len(values)
    if n <= limit:
        return values
    return [values[round(i * (n - 1) / (limit - 1))] for i in range(limit)]


__all__ = ["samples_svg"]
