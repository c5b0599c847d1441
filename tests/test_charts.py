"""The SVG chart module of the reports (report/charts.py, report/chart_axis.py): well-formed,
scalable, deterministic SVG; ticks and plain labels on linear and log axes; what log axes
cannot show dropped; degenerate inputs drawn; text escaped; the legend out of the data's way."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from pytest_npuperf.report.chart_axis import Axis, Scale, limits, nice_ticks, plain
from pytest_npuperf.report.charts import DASHED, DOTTED, PALETTE, Figure

NS = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # raises on anything that is not well-formed XML


def find(root: ET.Element, tag: str) -> list[ET.Element]:
    return list(root.iter(f"{NS}{tag}"))


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in find(root, "text")]


def tick_labels(root: ET.Element, anchor: str) -> list[str]:
    """x tick labels (anchor middle, font of the ticks) or y tick labels (anchor end)."""
    return [t.text for g in find(root, "g") if g.get("font-size") == "10"
            for t in g.iter(f"{NS}text") if t.get("text-anchor") == anchor]


def polyline_points(element: ET.Element) -> list[tuple[float, float]]:
    return [tuple(map(float, p.split(","))) for p in element.get("points").split()]


@pytest.mark.parametrize(("value", "label"), [
    (0.30000000000000004, "0.3"), (0.5, "0.5"), (10000.0, "10000"), (1e4 * 10, "100000"),
    (1e6, "1e+06"), (2.0 ** -3, "0.125"), (-2.5, "-2.5"), (0.0, "0")])
def test_tick_labels_are_plain(value, label):
    assert plain(value) == label


def test_linear_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 1, 5) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(-3.2, 47, 5) == [0, 10, 20, 30, 40]
    assert nice_ticks(0.12, 0.31, 4) == [0.15, 0.2, 0.25, 0.3]


def test_log_ticks_are_powers_and_fit_side_by_side():
    decades = Axis(Scale(10), 3.0, 2e5, 0, 600).ticks(10, horizontal=True)
    assert [label for _, label in decades] == ["10", "100", "1000", "10000", "100000"]
    twos = Axis(Scale(2), 1, 8192, 0, 600).ticks(10, horizontal=True)
    assert [v for v, _ in twos] == [2.0 ** k for k in range(0, 14, 2)]  # every other power
    # Message sizes 1 KiB..1 GiB on a narrow panel: fewer ticks, never overlapping labels.
    narrow = Axis(Scale(2), 2 ** 10, 2 ** 30, 0, 300).ticks(10, horizontal=True)
    assert 2 <= len(narrow) <= 5
    positions = [Axis(Scale(2), 2 ** 10, 2 ** 30, 0, 300).to_px(v) for v, _ in narrow]
    widths = [len(label) * 10 * 0.56 for _, label in narrow]
    assert all(b - a >= (wa + wb) / 2 for a, b, wa, wb in
               zip(positions, positions[1:], widths, widths[1:]))


def test_narrow_log_ranges_get_intermediate_or_linear_ticks():
    within = [label for _, label in Axis(Scale(10), 3, 600, 300, 0).ticks(10, False)]
    assert within == ["5", "10", "20", "50", "100", "200", "500"]
    # Less than a decade with one 1-2-5 value inside: round linear values, still log-placed.
    short = [label for _, label in Axis(Scale(10), 4.6, 16, 300, 0).ticks(10, False)]
    assert short == ["6", "8", "10", "12", "14", "16"]
    ratios = [label for _, label in Axis(Scale(10), 0.78, 1.28, 0, 600).ticks(10, True)]
    assert "1" in ratios and len(ratios) >= 3  # not a lone "1" on a ratio axis


def test_limits_add_a_margin_and_survive_degenerate_data():
    lo, hi = limits(Scale(), [0.0, 10.0])
    assert lo == pytest.approx(-0.5) and hi == pytest.approx(10.5)
    lo, hi = limits(Scale(10), [1.0, 100.0])  # the margin is taken in log space
    assert lo == pytest.approx(10 ** -0.1) and hi == pytest.approx(10 ** 2.1)
    assert limits(Scale(), [0.0, 4.0], floor=0.0)[0] == 0.0  # bars stand on zero
    for scale, values in ((Scale(), [7.0, 7.0]), (Scale(), [0.0]), (Scale(10), [5.0]),
                          (Scale(), []), (Scale(2), [])):
        lo, hi = limits(scale, values)
        assert lo < hi and all(math.isfinite(v) for v in (lo, hi))
        assert all(lo < v < hi for v in values)


def figure_with_everything(title: str = "T") -> str:
    fig = Figure(720, 400, title=title)
    ax = fig.axes[0]
    ax.line([1, 2, 4, 8], [10, 20, 15, 40], marker=2, label="a series")
    ax.line([1, 8], [5, 5], dash=DASHED, label="flat")
    ax.scatter([2, 3], [30, 12], color=["#d1242f", "#1a7f37"], label="points")
    ax.hline(25, dash=DOTTED, label="ref")
    ax.vline(3)
    ax.vband(1.5, 2.5, color="#1a7f37", label="band")
    ax.annotate("note", 4, 15)
    ax.log("x", base=2)
    ax.title, ax.xlabel, ax.ylabel = "panel", "x label", "y label"
    ax.legend()
    return fig.svg()


def test_a_figure_is_scalable_self_contained_and_deterministic():
    svg = figure_with_everything()
    root = parse(svg)
    assert root.get("viewBox") == "0 0 720 400"
    assert root.get("width") is None and root.get("height") is None  # no fixed pixel size
    assert "max-width:720px" in root.get("style") and root.get("font-family") == "sans-serif"
    assert not find(root, "script") and "href" not in svg and "<?xml" not in svg
    assert svg == figure_with_everything()  # same input, same bytes
    labels = texts(root)
    for expected in ("T", "panel", "x label", "y label", "note", "a series", "flat",
                     "points", "ref", "band"):
        assert expected in labels, expected
    # The series take the colour cycle in order; explicit colours are kept.
    (first, second) = find(root, "polyline")
    assert first.get("stroke") == PALETTE[0] and second.get("stroke") == PALETTE[1]
    assert second.get("stroke-dasharray") == DASHED
    fills = {g.get("fill") for g in find(root, "g")}
    assert {"#d1242f", "#1a7f37"} <= fills
    assert any(p.get("stroke-dasharray") == DOTTED for p in find(root, "path"))


def test_the_legend_lists_labels_in_order_at_the_emptiest_corner():
    fig = Figure(600, 400)
    ax = fig.axes[0]
    ax.scatter([9, 9.5, 10] * 5, [9, 9.5, 10] * 5, color="#000000", label="upper right")
    ax.scatter([0, 0.5], [9.5, 10], color="#111111", label="upper left")
    ax.line([0, 1], [0, 0.5], label="lower left")
    ax.legend()
    root = parse(fig.svg())
    legend = next(g for g in find(root, "g") if g.get("class") == "legend")
    assert [t.text for t in legend.iter(f"{NS}text")] == ["upper right", "upper left",
                                                          "lower left"]
    box = legend.find(f"{NS}rect")
    x, y = float(box.get("x")), float(box.get("y"))
    assert x > 300 and y > 200  # lower right: the only corner without points


def test_log_axes_drop_what_they_cannot_show():
    fig = Figure(600, 400)
    ax = fig.axes[0]
    ax.line([0, -1, float("nan"), 1, 10, float("inf")], [1, 2, 3, 4, 5, 6], marker=2)
    ax.scatter([1, 2, 3, 4], [0, -5, 10, float("nan")], color="#000000")
    ax.hline(-1)
    ax.vline(0)
    ax.annotate("gone", -1, 3)
    ax.log()
    root = parse(fig.svg())
    (line,) = find(root, "polyline")
    assert len(polyline_points(line)) == 2
    assert len(find(root, "circle")) == 3  # the line's two markers and one scatter point
    assert "gone" not in texts(root)
    assert all(math.isfinite(float(v)) for c in find(root, "circle") for v in
               (c.get("cx"), c.get("cy")))


@pytest.mark.parametrize("scale", [None, 10])
def test_one_point_and_equal_values_are_drawn(scale):
    fig = Figure(600, 400, columns=2)
    single, flat = fig.axes
    single.line([5.0], [5.0], label="one point")
    flat.line([1.0, 2.0, 3.0], [7.0, 7.0, 7.0], marker=2)
    flat.scatter([4.0, 4.0], [7.0, 7.0], color="#000000")
    if scale:
        single.log(base=scale)
        flat.log(base=scale)
    root = parse(fig.svg())
    circles = find(root, "circle")
    assert len(circles) == 1 + 3 + 2  # one point's dot, the flat line's markers, the scatter
    (line,) = find(root, "polyline")
    ys = {y for _, y in polyline_points(line)}
    assert len(ys) == 1  # flat, and inside the panel
    assert 0 < ys.pop() < 400


def test_a_histogram_counts_into_bins_standing_on_zero():
    fig = Figure(600, 300)
    ax = fig.axes[0]
    ax.hist([0.0, 0.1, 0.2, 1.0, 1.0, 2.0], bins=4, color="#0969da")
    ax.set_xticks([0, 1, 2, 3], ["1x", "2x", "4x", "8x"])
    root = parse(fig.svg())
    bars = next(g for g in find(root, "g") if g.get("fill") == "#0969da")
    rects = bars.findall(f"{NS}rect")
    heights = [float(r.get("height")) for r in rects]
    # Bins [0, .5) [.5, 1) [1, 1.5) [1.5, 2] hold 3, 0, 2, 1: the empty one is not drawn.
    assert len(rects) == 3
    assert heights[0] / heights[2] == pytest.approx(3, rel=0.02)
    assert heights[1] / heights[2] == pytest.approx(2, rel=0.02)
    bottoms = {round(float(r.get("y")) + h, 1) for r, h in zip(rects, heights)}
    assert len(bottoms) == 1  # every bar on the same baseline
    assert tick_labels(root, "middle") == ["1x", "2x", "4x", "8x"]  # fixed ticks, the axis widened
    counts = tick_labels(root, "end")
    assert counts[0] == "0" and counts[-1] == "3" and all(c.isdigit() for c in counts)


def test_panels_in_a_grid_under_a_title_and_hidden_cells():
    fig = Figure(960, 700, rows=2, columns=2, title="Figure title")
    for index, ax in enumerate(fig.axes[:3]):
        ax.line([1, 2], [index, index + 1])
        ax.title = f"panel {index}"
    fig.axes[3].visible = False
    fig.axes[3].title = "hidden"
    root = parse(fig.svg())
    labels = texts(root)
    assert labels.count("Figure title") == 1
    assert [t for t in labels if t.startswith("panel")] == ["panel 0", "panel 1", "panel 2"]
    assert "hidden" not in labels
    # Each panel in its own cell: the right column's panel starts right of the left one's end.
    lines = find(root, "polyline")
    assert max(x for x, _ in polyline_points(lines[0])) < min(x for x, _ in polyline_points(lines[1]))
    assert max(y for _, y in polyline_points(lines[0])) < min(y for _, y in polyline_points(lines[2]))


def test_text_is_escaped():
    hostile = '<script>alert("x")</script> & "quoted"'
    fig = Figure(600, 400, title=hostile)
    ax = fig.axes[0]
    ax.line([1, 2], [1, 2], label=hostile)
    ax.annotate(hostile, 1, 1)
    ax.title = ax.xlabel = ax.ylabel = hostile
    ax.legend()
    svg = fig.svg()
    assert "<script" not in svg
    root = parse(svg)
    assert texts(root).count(hostile) == 6  # figure title, panel title, 2 labels, legend, note
    assert root.get("aria-label") == hostile


def test_annotations_stay_inside_and_apart():
    fig = Figure(600, 400)
    ax = fig.axes[0]
    ax.scatter([1, 10], [1, 10], color="#000000")
    for name in ("first-case-id", "second-case-id", "third-case-id"):
        ax.annotate(name, 10, 10)  # the same point, at the right edge
    root = parse(fig.svg())
    notes = [t for t in find(root, "text") if t.get("font-size") == "8"]
    assert len(notes) == 3
    assert len({t.get("y") for t in notes}) == 3  # stacked, not drawn over each other
    assert all(float(t.get("x")) + len(t.text) * 8 * 0.56 <= 600 for t in notes)
