"""Charts as plain SVG text, for the report's figures (report/figures.py): no plotting library
(importing and running one cost a session more than a second), no script, no fixed pixel size
(a viewBox: the self-contained html report scales them).

A Figure holds panels in a grid (1x1, 1x2, Nx2) under an optional title; each panel (Axes) has
linear or log axes (base 2 or 10) with round ticks and plain labels, axis labels, a title, a
light grid, and what is drawn on it in call order: lines with markers, scatters (one colour or
one per point), densities (a scatter too large to draw point by point), horizontal / vertical
reference lines, a shaded vertical band, a histogram, small annotations, and a legend at the
corner that hides the fewest points. Values a log axis
cannot show (zero, negative, not finite) are dropped. The same input gives the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape

from .chart_axis import Axis, Scale, limits, text_width

# The figures' series colours: the tab10 cycle (plotting libraries' usual default) and two
# dark ones, so that a panel's up to 12 series (figures.MAX_SERIES) never share a colour;
# each is at least 27 CIELAB units from every other.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000080", "#00441b")
INK, MUTED, GRID = "#24292f", "#57606a", "#d0d7de"
DASHED, DOTTED = "5,3", "1.5,2.5"
TICK_FONT, LABEL_FONT, TITLE_FONT, FIGURE_FONT, LEGEND_FONT, NOTE_FONT = 10, 10, 11.5, 13, 9, 8
TICK = 4.0  # tick mark length
DENSITY_CELL = 5.0  # a density's squares (drawing units)
_DENSITY_LEVELS = (0.2, 0.35, 0.5, 0.7, 0.9)  # its opacities, from one point to the most


def _num(value: float) -> str:
    """A drawing coordinate: a tenth of a unit is finer than any screen shows."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _attr(text: str) -> str:
    return escape(text, quote=True)


@dataclass
class _Mark:
    """One thing drawn on a panel. kind: line, scatter, density, hline, vline, band, bars, text."""

    kind: str
    xs: list[float] = field(default_factory=list)
    ys: list[float] = field(default_factory=list)
    colors: list[str] = field(default_factory=list)  # one, or one per point (scatter)
    label: str = ""
    width: float = 1.5
    dash: str = ""
    radius: float = 0.0  # markers (line, scatter)
    opacity: float = 1.0
    text: str = ""
    titles: list[str] = field(default_factory=list)  # scatter: each point's hover text
    hollow: bool = False  # scatter: rings, not dots (points apart from the others)


class Axes:
    """One panel: call its drawing methods, set its labels, then let the Figure render it."""

    def __init__(self) -> None:
        self.title = self.xlabel = self.ylabel = ""
        self.xscale, self.yscale = Scale(), Scale()
        self.visible = True
        self.marks: list[_Mark] = []
        self.xticks: list[tuple[float, str]] | None = None
        self.legend_columns = 0  # 0: no legend
        self._cycle = 0

    # -- what is drawn ---------------------------------------------------------------------
    def log(self, which: str = "xy", base: float = 10) -> None:
        for name in which:
            setattr(self, f"{name}scale", Scale(base))

    def line(self, xs: Sequence[float], ys: Sequence[float], *, color: str | None = None,
             width: float = 1.5, dash: str = "", marker: float = 0.0, label: str = "") -> None:
        """A polyline through the points (in the given order); `marker`: dot radius."""
        self.marks.append(_Mark("line", list(xs), list(ys), [color or self.next_color()],
                                label, width, dash, marker))

    def scatter(self, xs: Sequence[float], ys: Sequence[float], *,
                color: str | Sequence[str], radius: float = 2.3, label: str = "",
                titles: Sequence[str] = (), hollow: bool = False) -> None:
        """Dots (rings when `hollow`); `titles`: each point's text shown on hover."""
        # One colour for all points (kept also without points: a legend-only entry).
        colors = [color] * max(len(xs), 1) if isinstance(color, str) else list(color)
        self.marks.append(_Mark("scatter", list(xs), list(ys), colors, label, radius=radius,
                                titles=list(titles), hollow=hollow))

    def density(self, xs: Sequence[float], ys: Sequence[float], *, color: str,
                label: str = "", cell: float = DENSITY_CELL) -> None:
        """Many points as their density: squares of `cell` units, darker where more points
        fall (what a scatter of 10^5 points becomes: its size bounded by the panel's, not the
        points')."""
        self.marks.append(_Mark("density", list(xs), list(ys), [color], label, radius=cell))

    def hline(self, y: float, *, color: str = INK, width: float = 1.3, dash: str = "",
              label: str = "") -> None:
        self.marks.append(_Mark("hline", [], [y], [color], label, width, dash))

    def vline(self, x: float, *, color: str = INK, width: float = 1.3, dash: str = "",
              label: str = "") -> None:
        self.marks.append(_Mark("vline", [x], [], [color], label, width, dash))

    def vband(self, x0: float, x1: float, *, color: str, opacity: float = 0.12,
              label: str = "") -> None:
        self.marks.append(_Mark("band", [x0, x1], [], [color], label, opacity=opacity))

    def hist(self, values: Sequence[float], bins: int, *, color: str, opacity: float = 0.8,
             label: str = "") -> None:
        """Counts of `values` in `bins` equal bins between their minimum and maximum."""
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return
        lo, hi = min(finite), max(finite)
        if hi == lo:
            lo, hi = lo - 0.5, hi + 0.5
        bins = max(int(bins), 1)
        counts = [0] * bins
        for v in finite:
            counts[min(int((v - lo) / (hi - lo) * bins), bins - 1)] += 1
        edges = [lo + (hi - lo) * i / bins for i in range(bins + 1)]
        self.marks.append(_Mark("bars", edges, [float(c) for c in counts], [color], label,
                                opacity=opacity))

    def annotate(self, text: str, x: float, y: float) -> None:
        """Small text just right of and above the point."""
        self.marks.append(_Mark("text", [x], [y], [INK], text=text))

    def set_xticks(self, values: Sequence[float], labels: Sequence[str]) -> None:
        """Fixed ticks (the axis widens to show them all)."""
        self.xticks = list(zip(values, labels))

    def legend(self, columns: int = 1) -> None:
        self.legend_columns = max(1, columns)

    def next_color(self) -> str:
        self._cycle += 1
        return PALETTE[(self._cycle - 1) % len(PALETTE)]

    # -- rendering -----------------------------------------------------------------------
    def _extent(self) -> tuple[list[float], list[float], float | None]:
        """The x and y values the limits must hold, and the y floor (bars stand on zero)."""
        xs: list[float] = []
        ys: list[float] = []
        floor = None
        for mark in self.marks:
            if mark.kind in ("line", "scatter", "text", "density"):
                for x, y in zip(mark.xs, mark.ys):
                    if self.xscale.valid(x) and self.yscale.valid(y):
                        xs.append(x)
                        ys.append(y)
            elif mark.kind == "bars":
                xs.extend(mark.xs)
                ys.extend([0.0, *mark.ys])
                floor = 0.0
            else:
                xs.extend(x for x in mark.xs if self.xscale.valid(x))
                ys.extend(y for y in mark.ys if self.yscale.valid(y))
        xs.extend(v for v, _ in self.xticks or () if self.xscale.valid(v))
        return xs, ys, floor

    def render(self, left: float, top: float, width: float, height: float) -> str:
        """The panel in the cell at (left, top) of `width` x `height`."""
        if not self.visible:
            return ""
        xs, ys, floor = self._extent()
        bottom = top + height - (TICK + TICK_FONT + 6 + (LABEL_FONT + 4 if self.xlabel else 0))
        y_axis = Axis(self.yscale, *limits(self.yscale, ys, floor=floor), bottom,
                      top + (TITLE_FONT + 10 if self.title else 8))
        yticks = y_axis.ticks(TICK_FONT, horizontal=False, whole=floor is not None)
        label_width = max((text_width(t, TICK_FONT) for _, t in yticks), default=0.0)
        x_axis = Axis(self.xscale, *limits(self.xscale, xs),
                      left + (LABEL_FONT + 6 if self.ylabel else 2) + label_width + TICK + 4,
                      left + width - 14)
        xticks = self.xticks if self.xticks is not None else x_axis.ticks(TICK_FONT, True)
        parts = [self._frame(x_axis, y_axis, xticks, yticks)]
        points: list[tuple[float, float]] = []
        notes: list[tuple[float, float, float]] = []
        for mark in self.marks:
            parts.append(_annotation(mark, x_axis, y_axis, notes) if mark.kind == "text"
                         else _draw(mark, x_axis, y_axis, points))
        parts.append(self._labels(x_axis, y_axis, left))
        if self.legend_columns:
            parts.append(_legend([m for m in self.marks if m.label], self.legend_columns,
                                 x_axis, y_axis, points))
        return "".join(parts)

    def _frame(self, x_axis: Axis, y_axis: Axis, xticks: list[tuple[float, str]],
               yticks: list[tuple[float, str]]) -> str:
        x0, x1, y0, y1 = x_axis.start, x_axis.end, y_axis.start, y_axis.end
        grid, marks, labels = [], [], []
        for px, text in _shown(x_axis, xticks):
            x = _num(px)
            grid.append(f"M{x} {_num(y0)}V{_num(y1)}")
            marks.append(f"M{x} {_num(y0)}v{_num(TICK)}")
            labels.append(f'<text x="{x}" y="{_num(y0 + TICK + TICK_FONT)}" '
                          f'text-anchor="middle">{escape(text)}</text>')
        for px, text in _shown(y_axis, yticks):
            y = _num(px)
            grid.append(f"M{_num(x0)} {y}H{_num(x1)}")
            marks.append(f"M{_num(x0)} {y}h-{_num(TICK)}")
            labels.append(f'<text x="{_num(x0 - TICK - 2)}" y="{y}" text-anchor="end" '
                          f'dominant-baseline="middle">{escape(text)}</text>')
        return (f'<path d="{"".join(grid)}" stroke="{GRID}" stroke-width="0.8" fill="none"/>'
                f'<path d="M{_num(x0)} {_num(y1)}V{_num(y0)}H{_num(x1)}{"".join(marks)}" '
                f'stroke="{INK}" stroke-width="0.8" fill="none"/>'
                f'<g font-size="{TICK_FONT}" fill="{INK}">{"".join(labels)}</g>')

    def _labels(self, x_axis: Axis, y_axis: Axis, cell_left: float) -> str:
        parts = []
        middle_x = (x_axis.start + x_axis.end) / 2
        if self.title:
            parts.append(f'<text x="{_num(middle_x)}" y="{_num(y_axis.end - 6)}" '
                         f'font-size="{TITLE_FONT}" text-anchor="middle">'
                         f"{escape(self.title)}</text>")
        if self.xlabel:
            y = y_axis.start + TICK + TICK_FONT + 4 + LABEL_FONT
            parts.append(f'<text x="{_num(middle_x)}" y="{_num(y)}" font-size="{LABEL_FONT}" '
                         f'text-anchor="middle">{escape(self.xlabel)}</text>')
        if self.ylabel:
            x, y = _num(cell_left + LABEL_FONT / 2 + 3), _num((y_axis.start + y_axis.end) / 2)
            parts.append(f'<text x="{x}" y="{y}" font-size="{LABEL_FONT}" text-anchor="middle" '
                         f'transform="rotate(-90 {x} {y})">{escape(self.ylabel)}</text>')
        return f'<g fill="{INK}">{"".join(parts)}</g>'


def _shown(axis: Axis, ticks: list[tuple[float, str]]) -> list[tuple[float, str]]:
    """(position, label) of the ticks inside the axis's limits."""
    return [(axis.to_px(v), text) for v, text in ticks
            if axis.scale.valid(v) and axis.lo <= v <= axis.hi]


def _dash(mark: _Mark) -> str:
    return f' stroke-dasharray="{mark.dash}"' if mark.dash else ""


def _draw(mark: _Mark, x_axis: Axis, y_axis: Axis, points: list[tuple[float, float]]) -> str:
    """`mark` as SVG; the points it puts on the panel are added to `points` (for the legend)."""
    color = mark.colors[0] if mark.colors else INK
    xok, yok = x_axis.scale.valid, y_axis.scale.valid
    if mark.kind == "scatter" and (mark.titles or mark.hollow):
        return _points(mark, x_axis, y_axis, points)
    if mark.kind == "density":
        return _density(mark, x_axis, y_axis, points)
    if mark.kind in ("line", "scatter"):
        kept = [(x_axis.to_px(x), y_axis.to_px(y), c) for x, y, c in
                zip(mark.xs, mark.ys, mark.colors * len(mark.xs) if len(mark.colors) == 1
                    else mark.colors) if xok(x) and yok(y)]
        points.extend((x, y) for x, y, _ in kept)
        out = ""
        if mark.kind == "line" and len(kept) > 1:
            coords = " ".join(f"{_num(x)},{_num(y)}" for x, y, _ in kept)
            out = (f'<polyline points="{coords}" fill="none" stroke="{color}" '
                   f'stroke-width="{_num(mark.width)}" stroke-linejoin="round"{_dash(mark)}/>')
        radius = mark.radius if mark.kind == "scatter" or mark.radius else 0.0
        if radius or (mark.kind == "line" and len(kept) == 1):
            radius = radius or mark.width
            by_color: dict[str, list[str]] = {}
            for x, y, c in kept:
                by_color.setdefault(c, []).append(f'<circle cx="{_num(x)}" cy="{_num(y)}" '
                                                  f'r="{_num(radius)}"/>')
            out += "".join(f'<g fill="{c}">{"".join(circles)}</g>'
                           for c, circles in by_color.items())
        return out
    x0, x1, y0, y1 = x_axis.start, x_axis.end, y_axis.start, y_axis.end
    stroke = f'stroke="{color}" stroke-width="{_num(mark.width)}"{_dash(mark)}'
    if mark.kind == "hline" and yok(mark.ys[0]):
        y = _num(y_axis.to_px(mark.ys[0]))
        return f'<path d="M{_num(x0)} {y}H{_num(x1)}" {stroke}/>'
    if mark.kind == "vline" and xok(mark.xs[0]):
        x = _num(x_axis.to_px(mark.xs[0]))
        return f'<path d="M{x} {_num(y0)}V{_num(y1)}" {stroke}/>'
    if mark.kind == "band" and all(map(xok, mark.xs)):
        a, b = sorted(x_axis.to_px(x) for x in mark.xs)
        return (f'<rect x="{_num(a)}" y="{_num(y1)}" width="{_num(b - a)}" '
                f'height="{_num(y0 - y1)}" fill="{color}" fill-opacity="{mark.opacity:g}"/>')
    if mark.kind == "bars":
        base = y_axis.to_px(max(0.0, y_axis.lo))
        rects = []
        for left, right, count in zip(mark.xs, mark.xs[1:], mark.ys):
            if count > 0:
                a, b, top = x_axis.to_px(left), x_axis.to_px(right), y_axis.to_px(count)
                points.append(((a + b) / 2, top))
                rects.append(f'<rect x="{_num(a)}" y="{_num(top)}" width="{_num(b - a)}" '
                             f'height="{_num(base - top)}"/>')
        return f'<g fill="{color}" fill-opacity="{mark.opacity:g}">{"".join(rects)}</g>'
    return ""


def _density(mark: _Mark, x_axis: Axis, y_axis: Axis, points: list[tuple[float, float]]) -> str:
    """The points counted per square of the grid, a square's opacity rising with the log of
    its count."""
    cell = mark.radius or DENSITY_CELL
    xok, yok = x_axis.scale.valid, y_axis.scale.valid
    counts: dict[tuple[int, int], int] = {}
    for x, y in zip(mark.xs, mark.ys):
        if xok(x) and yok(y):
            key = (math.floor(x_axis.to_px(x) / cell), math.floor(y_axis.to_px(y) / cell))
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    most = math.log1p(max(counts.values()))
    levels: dict[float, list[str]] = {}
    for (i, j), count in sorted(counts.items()):
        level = _DENSITY_LEVELS[min(int(math.log1p(count) / most * len(_DENSITY_LEVELS)),
                                    len(_DENSITY_LEVELS) - 1)] if most else _DENSITY_LEVELS[0]
        points.append(((i + 0.5) * cell, (j + 0.5) * cell))
        levels.setdefault(level, []).append(f'<rect x="{_num(i * cell)}" y="{_num(j * cell)}" '
                                            f'width="{_num(cell)}" height="{_num(cell)}"/>')
    color = mark.colors[0] if mark.colors else INK
    return "".join(f'<g fill="{color}" fill-opacity="{level:g}">{"".join(rects)}</g>'
                   for level, rects in sorted(levels.items()))


def _points(mark: _Mark, x_axis: Axis, y_axis: Axis, points: list[tuple[float, float]]) -> str:
    """A scatter drawn point by point: rings (`hollow`), each with its hover text."""
    colors = mark.colors * len(mark.xs) if len(mark.colors) == 1 else mark.colors
    titles = mark.titles or [""] * len(mark.xs)
    out = []
    for x, y, color, title in zip(mark.xs, mark.ys, colors, titles):
        if not (x_axis.scale.valid(x) and y_axis.scale.valid(y)):
            continue
        px, py = x_axis.to_px(x), y_axis.to_px(y)
        points.append((px, py))
        paint = (f'fill="#fff" stroke="{color}" stroke-width="1.4"' if mark.hollow
                 else f'fill="{color}"')
        hover = f"<title>{escape(title)}</title>" if title else ""
        out.append(f'<circle cx="{_num(px)}" cy="{_num(py)}" r="{_num(mark.radius)}" '
                   f'{paint}>{hover}</circle>')
    return "".join(out)


def _annotation(mark: _Mark, x_axis: Axis, y_axis: Axis,
                notes: list[tuple[float, float, float]]) -> str:
    """Small text above and right of its point (left of it near the panel's right edge),
    moved down past the notes already placed (`notes`: their left, baseline, width)."""
    x, y = mark.xs[0], mark.ys[0]
    if not (x_axis.scale.valid(x) and y_axis.scale.valid(y)):
        return ""
    x, y = x_axis.to_px(x), y_axis.to_px(y)
    width = text_width(mark.text, NOTE_FONT)
    left = x + 4 if x + 4 + width <= x_axis.end else x - 4 - width
    baseline = y - 3
    while any(abs(baseline - b) < NOTE_FONT and left < a + w and a < left + width
              for a, b, w in notes):
        baseline += NOTE_FONT + 1
    notes.append((left, baseline, width))
    return (f'<text x="{_num(left)}" y="{_num(baseline)}" font-size="{NOTE_FONT}" '
            f'fill="{INK}">{escape(mark.text)}</text>')


def _swatch(mark: _Mark, x: float, y: float) -> str:
    """The legend's sample of `mark`, 18 units wide, centred on y."""
    color = mark.colors[0] if mark.colors else INK
    if mark.kind in ("band", "bars", "density"):
        return (f'<rect x="{_num(x)}" y="{_num(y - 4)}" width="18" height="8" fill="{color}" '
                f'fill-opacity="{max(mark.opacity, 0.3):g}"/>')
    if mark.kind == "scatter" and mark.hollow:
        return (f'<circle cx="{_num(x + 9)}" cy="{_num(y)}" r="{_num(mark.radius)}" fill="#fff" '
                f'stroke="{color}" stroke-width="1.4"/>')
    if mark.kind == "scatter":
        return f'<circle cx="{_num(x + 9)}" cy="{_num(y)}" r="{_num(mark.radius)}" fill="{color}"/>'
    line = (f'<path d="M{_num(x)} {_num(y)}h18" stroke="{color}" '
            f'stroke-width="{_num(mark.width)}"{_dash(mark)}/>')
    if mark.radius:
        line += f'<circle cx="{_num(x + 9)}" cy="{_num(y)}" r="{_num(mark.radius)}" fill="{color}"/>'
    return line


def _legend(marks: list[_Mark], columns: int, x_axis: Axis, y_axis: Axis,
            points: list[tuple[float, float]]) -> str:
    """The labelled marks in a box at the panel corner that covers the fewest drawn points
    (upper right first on a tie)."""
    if not marks:
        return ""
    columns = min(columns, len(marks))
    rows = math.ceil(len(marks) / columns)
    line_height, pad = LEGEND_FONT * 1.5, 4.0
    widths = [max(text_width(m.label, LEGEND_FONT) for m in marks[c * rows:(c + 1) * rows]) + 26
              for c in range(columns)]
    box_w, box_h = sum(widths) + pad * 2, rows * line_height + pad * 2
    x0, x1, y0, y1 = x_axis.start, x_axis.end, y_axis.start, y_axis.end
    corners = [(x1 - box_w - 4, y1 + 4), (x0 + 4, y1 + 4), (x0 + 4, y0 - box_h - 4),
               (x1 - box_w - 4, y0 - box_h - 4)]

    def covered(corner: tuple[float, float]) -> int:
        left, top = corner
        return sum(1 for x, y in points if left <= x <= left + box_w and top <= y <= top + box_h)

    left, top = min(corners, key=covered)
    entries = []
    for index, mark in enumerate(marks):
        column, row = divmod(index, rows)
        x = left + pad + sum(widths[:column])
        y = top + pad + line_height * (row + 0.5)
        entries.append(f'{_swatch(mark, x, y)}<text x="{_num(x + 24)}" y="{_num(y)}" '
                       f'dominant-baseline="middle">{escape(mark.label)}</text>')
    return (f'<g class="legend" font-size="{LEGEND_FONT}" fill="{INK}">'
            f'<rect x="{_num(left)}" y="{_num(top)}" width="{_num(box_w)}" '
            f'height="{_num(box_h)}" fill="#fff" fill-opacity="0.85" stroke="{GRID}" rx="2"/>'
            f'{"".join(entries)}</g>')


class Figure:
    """Panels in `rows` x `columns` cells of a `width` x `height` drawing (units: CSS pixels
    at the figure's natural size), under `title`."""

    def __init__(self, width: float, height: float, rows: int = 1, columns: int = 1,
                 title: str = "") -> None:
        self.width, self.height, self.rows, self.columns = width, height, rows, columns
        self.title = title
        self.axes = [Axes() for _ in range(rows * columns)]

    def svg(self) -> str:
        """The figure as an inline `<svg>` element."""
        head = FIGURE_FONT + 12 if self.title else 0
        cell_w, cell_h = self.width / self.columns, (self.height - head) / self.rows
        panels = "".join(ax.render(cell_w * (i % self.columns), head + cell_h * (i // self.columns),
                                   cell_w, cell_h) for i, ax in enumerate(self.axes))
        name = self.title or next((ax.title for ax in self.axes if ax.title), "chart")
        title = (f'<text x="{_num(self.width / 2)}" y="{_num(FIGURE_FONT + 4)}" '
                 f'font-size="{FIGURE_FONT}" text-anchor="middle" fill="{INK}">'
                 f"{escape(self.title)}</text>") if self.title else ""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(self.width)} '
                f'{_num(self.height)}" style="width:100%;max-width:{_num(self.width)}px;'
                f'height:auto" font-family="sans-serif" role="img" aria-label="{_attr(name)}">'
                f"<title>{escape(name)}</title>"
                f'<rect width="{_num(self.width)}" height="{_num(self.height)}" fill="#fff"/>'
                f"{title}{panels}</svg>")
