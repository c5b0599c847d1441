"""The reports' figures through matplotlib, as inline SVG: scalable (a viewBox, no fixed pixel
size), text kept as text (searchable, selectable), no script, the same bytes for the same
input, and a hover text per point where a figure gives one.

matplotlib is the `report` extra (`pip install "pytest-npuperf[report]"`), imported only when
a figure is drawn, never by a run that writes no report. Without it every page says so in one
line (`missing_note`) and the rest of each report is written as usual.
"""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Callable, Sequence
from html import escape
from typing import Any

# The figures' series colours: the tab10 cycle (matplotlib's default) and two dark ones, so
# that a panel's up to 12 series (figures.MAX_SERIES) never share a colour; each is at least
# 27 CIELAB units from every other.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#000080", "#00441b")
INK, MUTED, GRID = "#24292f", "#57606a", "#d0d7de"
DASHED, DOTTED = (0, (5, 3)), (0, (1, 2))
MISSING = 'figures not drawn: matplotlib is not installed (pip install "pytest-npuperf[report]")'
PX = 1 / 72  # inches per drawing unit: matplotlib writes SVG in points, 72 to the inch

_STYLE = {
    "svg.fonttype": "none",  # text as <text>, not glyph outlines: a tenth of the bytes
    "svg.hashsalt": "npuperf",  # ids from the content, not random: the same input, same bytes
    "font.family": "sans-serif", "font.size": 9, "axes.titlesize": 10, "figure.titlesize": 11,
    "legend.fontsize": 8, "legend.framealpha": 0.9, "axes.edgecolor": INK,
    "axes.grid": True, "grid.color": GRID, "grid.linewidth": 0.6, "axes.axisbelow": True,
    "text.color": INK, "axes.labelcolor": INK, "xtick.color": INK, "ytick.color": INK,
    "lines.linewidth": 1.4, "lines.markersize": 4,
}


def available() -> bool:
    """Whether matplotlib can be imported (the `report` extra is installed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def missing_note() -> str:
    """The one line a page shows in place of its figures when matplotlib is missing."""
    return f'<p class="npuperf-note">{escape(MISSING[:1].upper() + MISSING[1:])}.</p>'


def figure(width: float, height: float, rows: int = 1, columns: int = 1, title: str = "",
           margins: tuple[float, float, float, float] | None = None):
    """A matplotlib Figure of `width` x `height` drawing units (CSS pixels at its natural
    size) with `rows` x `columns` panels, laid out so that labels never overlap (or, for a
    small chart drawn per case, at fixed `margins`: left, bottom, right, top in drawing
    units, which saves the layout pass, half the drawing time); returns the figure and its
    panels, row by row."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * PX, height * PX),
                 layout="constrained" if margins is None else None)
    if margins is not None:
        left, bottom, right, top = margins
        fig.subplots_adjust(left=left / width, bottom=bottom / height,
                            right=1 - right / width, top=1 - top / height)
    axes = list(fig.subplots(rows, columns, squeeze=False).ravel())
    if title:
        fig.suptitle(title)
    fig.npuperf_hover = {}  # gid -> each point's hover text
    return fig, axes


def log(ax, which: str = "xy", base: float = 10) -> None:
    """Log scale on the `which` axes of `ax`, ticks labelled as plain numbers ("0.5", "1024",
    "1e+06"; not 2^10 or 10^0: those cost a typesetting pass each); between the powers, round
    values labelled too when the axis spans too few powers to read it by them."""
    from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator

    for name in which:
        axis = getattr(ax, f"{name}axis")
        getattr(ax, f"set_{name}scale")("log", base=base)
        axis.set_major_formatter(FuncFormatter(_plain))
        # 2x and 5x a power of ten (none between powers of two): each tick is an artist, and
        # 8 per decade made most of a figure's drawing time.
        axis.set_minor_locator(LogLocator(base, subs=(2.0, 5.0) if base == 10 else ()))
        axis.set_minor_formatter(LogFormatter(base, labelOnlyBase=False,
                                              minor_thresholds=(1, 0.5)))


def _plain(value: float, _position: int | None = None) -> str:
    return f"{float(f'{value:.10g}'):g}"


def hover(fig, artist, titles: Sequence[str]) -> None:
    """Give each point of `artist` (a scatter of only drawable points: matplotlib skips the
    others, and the texts follow the points drawn in order) its hover text."""
    if titles:
        gid = f"hover-{len(fig.npuperf_hover)}"
        artist.set_gid(gid)
        fig.npuperf_hover[gid] = list(titles)


def svg_figure(build: Callable[..., Any]) -> Callable[..., str | None]:
    """`build` (returning a matplotlib Figure, or None when there is nothing to show) made a
    function that returns the figure's SVG text; None as well without matplotlib."""

    @functools.wraps(build)
    def draw(*args: Any, **kwargs: Any) -> str | None:
        if not available():
            return None
        import matplotlib

        with matplotlib.rc_context(_STYLE):
            fig = build(*args, **kwargs)
            return None if fig is None else to_svg(fig)
    return draw


_HEAD = re.compile(r'^.*?<svg\b[^>]*?\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"\s+'
                   r'viewBox="([^"]+)"[^>]*>', re.S)
_USE = re.compile(r"<(?:use|path) [^>]*?/>")


def to_svg(fig) -> str:
    """The figure as an inline `<svg>` element: no XML prolog, no fixed size, a title."""
    out = io.StringIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    text = out.getvalue()
    head = _HEAD.match(text)
    width = float(head[1])
    name = next((t for t in [fig._suptitle.get_text() if fig._suptitle else ""]
                 + [ax.get_title() for ax in fig.axes] if t), "chart")
    opening = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/'
               f'xlink" viewBox="{head[3]}" style="width:100%;max-width:{width:g}px;'
               f'height:auto" role="img" aria-label="{escape(name, quote=True)}">'
               f"<title>{escape(name)}</title>")
    text = opening + text[head.end():]
    for gid, titles in fig.npuperf_hover.items():
        text = _titled(text, gid, titles)
    return text.strip()


def _titled(text: str, gid: str, titles: list[str]) -> str:
    """Each point drawn in group `gid` (a <use> or <path> per point, in order) with its
    hover text as a <title> child."""
    start = text.find(f'<g id="{gid}">')
    if start < 0:
        return text
    end = _group_end(text, start)
    body = text[start:end]
    defs_end = body.find("</defs>")
    head, points = (body[:defs_end + 7], body[defs_end + 7:]) if defs_end >= 0 else ("", body)
    found = iter(titles)

    def with_title(match: re.Match) -> str:
        title = next(found, None)
        if title is None:
            return match[0]
        return f"{match[0][:-2]}><title>{escape(title)}</title></{match[0][1:match[0].index(' ')]}>"
    return text[:start] + head + _USE.sub(with_title, points) + text[end:]


def _group_end(text: str, start: int) -> int:
    """The index just past the `</g>` closing the group opened at `start`."""
    depth, at = 0, start
    for match in re.finditer(r"<g\b|</g>", text[start:]):
        depth += 1 if match[0] == "<g" else -1
        if depth == 0:
            at = start + match.end()
            break
    return at
