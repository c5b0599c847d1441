"""The reports' chart layer over matplotlib (report/charts.py): scalable, self-contained,
deterministic SVG with text kept as text; plain tick labels on log axes; each point's hover
text; text escaped; without matplotlib, no figure and a one-line note. And helpers reading
what matplotlib wrote, for the figure tests."""

from __future__ import annotations

import re
import sys
import xml.etree.ElementTree as ET

import pytest

from pytest_npuperf.report import charts
from pytest_npuperf.report.charts import MISSING, figure, hover, log, svg_figure

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # raises on anything that is not well-formed XML


def find(root: ET.Element, tag: str) -> list[ET.Element]:
    return list(root.iter(f"{NS}{tag}"))


def texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in find(root, "text")]


def group(root: ET.Element, gid: str) -> ET.Element | None:
    return next((g for g in find(root, "g") if g.get("id") == gid), None)


def groups(root: ET.Element, prefix: str) -> list[ET.Element]:
    return [g for g in find(root, "g") if (g.get("id") or "").startswith(prefix)]


def legend(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for g in groups(root, "legend_") for t in g.iter(f"{NS}text")]


def style(element: ET.Element, key: str) -> str | None:
    found = re.search(rf"(?:^|;)\s*{key}:\s*([^;]+)", element.get("style", ""))
    return found[1].strip() if found else None


def points(element: ET.Element) -> list[dict]:
    """The markers drawn in `element` (tick marks and legend swatches left out): position,
    fill, stroke and hover text of each. matplotlib writes a marker as a <use> of a shape
    defined once, or, in a small scatter, as a <path> of its own."""
    skipped = {id(u) for prefix in ("xtick_", "ytick_", "legend_", "density")
               for g in groups(element, prefix) for u in g.iter(f"{NS}use")}
    found = [(float(u.get("x")), float(u.get("y")), u)
             for u in element.iter(f"{NS}use") if id(u) not in skipped]
    in_legend = {id(g) for legend_group in groups(element, "legend_")
                 for g in legend_group.iter(f"{NS}g")}
    for collection in groups(element, "PathCollection_") + groups(element, "hover-"):
        if id(collection) in in_legend:
            continue
        for g in [collection, *collection.findall(f"{NS}g")]:
            for path in g.findall(f"{NS}path"):
                numbers = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", path.get("d"))]
                xs, ys = numbers[::2], numbers[1::2]
                found.append(((min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2, path))
    return [{"x": x, "y": y, "fill": style(e, "fill"), "stroke": style(e, "stroke"),
             "title": e.findtext(f"{NS}title")} for x, y, e in found]


def path_xs(path: ET.Element) -> list[float]:
    """The x of each vertex of a path ("M x y L x y ... z"; curves' control points too)."""
    numbers = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", path.get("d"))]
    return numbers[::2]


def swatches(legend_group: ET.Element) -> set[str]:
    """The colours of a legend's markers (a ring's by its stroke)."""
    found = set()
    for e in [*legend_group.iter(f"{NS}use"), *(p for g in legend_group.iter(f"{NS}g")
                                               if (g.get("id") or "").startswith("PathCollection_")
                                               for p in g.iter(f"{NS}path"))]:
        fill = style(e, "fill")
        if fill or style(e, "stroke"):
            found.add(style(e, "stroke") if fill == "#ffffff" else fill)
    return found - {None}


def by_colour(element: ET.Element) -> dict[str, int]:
    """Drawn markers by colour: a ring (white fill) counts by its stroke."""
    found: dict[str, int] = {}
    for p in points(element):
        colour = p["stroke"] if p["fill"] == "#ffffff" else p["fill"]
        found[colour] = found.get(colour, 0) + 1
    return found


def line(root: ET.Element, gid: str) -> list[tuple[float, float]]:
    """The vertices of the line drawn as `gid`."""
    path = group(root, gid).find(f"{NS}path")
    numbers = [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", path.get("d"))]
    return list(zip(numbers[::2], numbers[1::2]))


def tick_labels(root: ET.Element, axis: str) -> list[str]:
    """The labels of the `axis` ("x" or "y") ticks, major and minor, left to right or
    bottom to top."""
    return [label for g in groups(root, f"{axis}tick_")
            for label in ["".join(t.itertext()) for t in g.iter(f"{NS}text")] if label]


@svg_figure
def _everything(title: str = "T"):
    fig, (ax,) = figure(720, 400, title=title)
    log(ax, "x", base=2)
    ax.plot([1, 2, 4, 8], [10, 20, 15, 40], marker="o", label="a series", gid="series-0")
    dots = ax.scatter([2, 3], [30, 12], color=["#d1242f", "#1a7f37"], label="points")
    hover(fig, dots, ["first <point>", "second & last"])
    ax.axhline(25, linestyle=charts.DOTTED, label="ref")
    ax.axvspan(1.5, 2.5, color="#1a7f37", alpha=0.1, label="band")
    ax.set_title("panel")
    ax.set_xlabel("x label")
    ax.set_ylabel("y label")
    ax.legend()
    return fig


def test_a_figure_is_scalable_self_contained_and_deterministic():
    svg = _everything()
    root = parse(svg)
    assert root.get("viewBox") == "0 0 720 400"
    assert root.get("width") is None and root.get("height") is None  # no fixed pixel size
    assert "max-width:720px" in root.get("style") and root.get("aria-label") == "T"
    assert not find(root, "script") and "<?xml" not in svg and "<!DOCTYPE" not in svg
    assert not re.search(r'(?:href|src)="(?!#)', svg)  # nothing fetched
    assert svg == _everything()  # same input, same bytes
    labels = texts(root)
    for expected in ("T", "panel", "x label", "y label", "a series", "points", "ref", "band"):
        assert expected in labels, expected  # text kept as text, searchable
    assert {"1", "2", "4", "8"} <= set(tick_labels(root, "x"))  # plain, not 2^3
    dots = [p for p in points(root) if p["title"]]
    assert [(p["fill"], p["title"]) for p in dots] == [("#d1242f", "first <point>"),
                                                        ("#1a7f37", "second & last")]


def test_log_ticks_are_plain_numbers_and_a_short_range_gets_round_values_between():
    @svg_figure
    def ratio_axis():
        fig, (ax,) = figure(600, 300)
        log(ax, "x")
        ax.plot([0.78, 1.28], [1, 2])
        return fig

    labels = tick_labels(parse(ratio_axis()), "x")
    assert "1" in labels and len(labels) >= 3  # not a lone "1" on a ratio axis
    assert not any("$" in t or "^" in t or "\\times" in t for t in labels)


def test_text_is_escaped():
    hostile = '<script>alert("x")</script> & "quoted"'
    svg = _everything(hostile)
    assert "<script" not in svg
    root = parse(svg)
    assert hostile in texts(root) and root.get("aria-label") == hostile


def test_without_matplotlib_no_figure_is_drawn_and_pages_say_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib: ImportError
    assert not charts.available()
    assert _everything() is None
    from pytest_npuperf.report.plots import samples_svg

    assert samples_svg([1.0, 2.0]) == charts.missing_note()
    from pytest_npuperf.report.figures import draw_figures
    from pytest_npuperf.report.page import render_page
    from pytest_npuperf.report.trend_page import render_trend_page
    from tests.report_data import gemm_results, outcome, session

    results = gemm_results()
    assert draw_figures(results, outcome()) == {}
    page = render_page(outcome(), results, session(), figures={})
    assert page.count(charts.missing_note()) == 1 and "<svg" not in page
    trend = render_trend_page([], {}, source="history.sqlite")
    assert trend.count(charts.missing_note()) == 1
    assert "matplotlib is not installed" in charts.missing_note() and MISSING.count("\n") == 0


@pytest.mark.parametrize("count", [1, 3])
def test_hover_texts_follow_the_points_in_order(count):
    @svg_figure
    def dots():
        fig, (ax,) = figure(300, 200)
        found = ax.scatter(range(count), range(count), color="#000000")
        hover(fig, found, [f"point {i}" for i in range(count)])
        return fig

    drawn = points(parse(dots()))
    assert [p["title"] for p in drawn] == [f"point {i}" for i in range(count)]
    assert [p["x"] for p in drawn] == sorted(p["x"] for p in drawn)
