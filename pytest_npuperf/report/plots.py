"""A sample plot small enough to sit in a table row: the sorted samples (a quantile curve:
flat means stable, a tail at the right means outliers) with the median marked.

Plain SVG text, no plotting library and no script, so the HTML report stays self-contained.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable

LINE = "#1f6feb"
MEDIAN = "#d1242f"
FRAME = "#f6f8fa"
PAD = 3.0


def samples_svg(samples: list[float], width: int = 220, height: int = 48) -> str:
    values = sorted(v for v in map(float, samples) if math.isfinite(v))
    width, height = max(int(width), 2 * int(PAD) + 2), max(int(height), 2 * int(PAD) + 2)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img"')
    frame = f'<rect x="0" y="0" width="{width}" height="{height}" fill="{FRAME}"/>'
    if not values:
        return (f'{head} aria-label="no samples"><title>no samples</title>{frame}'
                f'<text x="{width / 2:g}" y="{height / 2:g}" font-size="10" fill="#57606a" '
                f'text-anchor="middle" dominant-baseline="middle">no samples</text></svg>')

    median = statistics.median(values)
    label = html.escape(f"{len(values)} sample{'s' if len(values) != 1 else ''}: "
                        f"min {values[0]:.3f} us, median {median:.3f} us, "
                        f"max {values[-1]:.3f} us", quote=True)
    points = _downsample(values, max(int(width - 2 * PAD), 2))
    x_of = _scale(0, max(len(points) - 1, 1), PAD, width - PAD)
    y_of = _scale(values[0], values[-1], height - PAD, PAD)
    if len(points) == 1:
        mark = f'<circle cx="{width / 2:.2f}" cy="{y_of(points[0]):.2f}" r="2" fill="{LINE}"/>'
    else:
        coords = " ".join(f"{x_of(i):.2f},{y_of(v):.2f}" for i, v in enumerate(points))
        mark = (f'<polyline points="{coords}" fill="none" stroke="{LINE}" stroke-width="1.5" '
                f'stroke-linejoin="round"/>')
    y_median = y_of(median)
    median_line = (f'<line x1="{PAD:g}" y1="{y_median:.2f}" x2="{width - PAD:g}" '
                   f'y2="{y_median:.2f}" stroke="{MEDIAN}" stroke-width="1" '
                   f'stroke-dasharray="3,2"/>')
    return (f'{head} aria-label="{label}"><title>{label}</title>{frame}{median_line}{mark}'
            f'</svg>')


def _downsample(values: list[float], limit: int) -> list[float]:
    """At most `limit` evenly spaced order statistics, always keeping min and max."""
    n = len(values)
    if n <= limit:
        return values
    return [values[round(i * (n - 1) / (limit - 1))] for i in range(limit)]


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Callable[[float], float]:
    span = hi - lo
    if span <= 0 or span <= 1e-12 * max(abs(lo), abs(hi)):
        middle = (out_lo + out_hi) / 2  # identical samples: a flat line across the middle
        return lambda _value: middle
    factor = (out_hi - out_lo) / span
    return lambda value: out_lo + (value - lo) * factor
