"""A case's samples as a small chart for its pytest-html row and its page entry: the sorted
samples (a quantile curve: flat means stable, a tail at the right means outliers) on axes in
microseconds, with the median as a dashed line named in the legend and min, median and max in
the title. SVG text through report/charts.py (no plotting library, no script), so the report
stays self-contained.
"""

from __future__ import annotations

import math
import statistics

from .charts import DASHED, Figure

LINE = "#1f6feb"
MEDIAN = "#d1242f"
FRAME = "#f6f8fa"
WIDTH, HEIGHT = 400, 170


def samples_svg(samples: list[float], width: int = WIDTH, height: int = HEIGHT) -> str:
    values = sorted(v for v in map(float, samples) if math.isfinite(v))
    width, height = max(int(width), 120), max(int(height), 80)
    if not values:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
                f'viewBox="0 0 {width} {height}" role="img" aria-label="no samples">'
                f'<title>no samples</title><rect x="0" y="0" width="{width}" height="{height}" '
                f'fill="{FRAME}"/><text x="{width / 2:g}" y="{height / 2:g}" font-size="10" '
                f'fill="#57606a" text-anchor="middle" dominant-baseline="middle">no samples'
                f'</text></svg>')
    median = statistics.median(values)
    count = len(values)
    points = _downsample(values, max(width - 80, 2))
    # x: the rank of each drawn sample among all (1 = the fastest)
    ranks = [1 + round(i * (count - 1) / max(len(points) - 1, 1)) for i in range(len(points))]
    fig = Figure(width, height)
    ax = fig.axes[0]
    if len(points) > 1:
        ax.line(ranks, points, color=LINE, width=1.5)
    else:
        ax.scatter(ranks, points, color=LINE, radius=2.5)
    ax.hline(median, color=MEDIAN, width=1.2, dash=DASHED, label=f"median {median:.4g} us")
    ax.title = (f"{count} sample{'s' if count != 1 else ''}: min {values[0]:.4g}, median "
                f"{median:.4g}, max {values[-1]:.4g} us")
    ax.xlabel = "samples, fastest to slowest"
    ax.ylabel = "us"
    ax.legend()
    return fig.svg()


def _downsample(values: list[float], limit: int) -> list[float]:
    """At most `limit` evenly spaced order statistics, always keeping min and max."""
    n = len(values)
    if n <= limit:
        return values
    return [values[round(i * (n - 1) / (limit - 1))] for i in range(limit)]


__all__ = ["samples_svg"]
