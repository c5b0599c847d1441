"""What each report figure shows (report/figures.py): its series, points, legend, titles,
ticks and colours, the MAX_SERIES rule, and None when the run has nothing to show; the
regression figure's minimum-effect band at the configured minimum effect, and noisy cases
apart from the verdicts' colours."""

from __future__ import annotations

import dataclasses
import math
import re

from pytest_npuperf.history.compare import compare_samples
from pytest_npuperf.measure.result import STATUS_SUSPECT
from pytest_npuperf.report.charts import PALETTE, figure
from pytest_npuperf.report.figures import (
    BOUND_COLORS,
    MAX_SERIES,
    VERDICT_COLORS,
    collective_bandwidth,
    gap_distribution,
    gemm_latency,
    regression_ratios,
    roofline,
)
from tests.report_data import HCOM, STEADY, case, gemm_results, outcome
from tests.test_charts import (
    by_colour,
    group,
    groups,
    legend,
    line,
    parse,
    path_xs,
    points,
    style,
    swatches,
    texts,
    tick_labels,
)


def series(root) -> list:
    return [g for g in groups(root, "series-")]


def path_ys(path) -> list[float]:
    return [float(v) for v in re.findall(r"-?[\d.]+(?:e-?\d+)?", path.get("d"))[1::2]]


def line_colour(g) -> str:
    return style(g.find("{http://www.w3.org/2000/svg}path"), "stroke")


def test_gemm_latency_draws_one_line_per_n_k_over_m():
    root = parse(gemm_latency(gemm_results()))
    lines = series(root)
    assert len(lines) == 2 and [len(line(root, g.get("id"))) for g in lines] == [4, 4]
    assert [line_colour(g) for g in lines] == list(PALETTE[:2])
    # Sorted by M: left to right; latency grows with M: upwards (smaller y).
    for g in lines:
        xs, ys = zip(*line(root, g.get("id")))
        assert list(xs) == sorted(xs) and list(ys) == sorted(ys, reverse=True)
    assert legend(root) == ["N=512 K=7168 BF16", "N=7168 K=1536 BF16"]
    labels = texts(root)
    assert "GEMM latency vs M per (N, K)" in labels and "M (rows)" in labels
    assert "median latency (us)" in labels
    assert {"1", "16", "1024"} <= set(tick_labels(root, "x"))  # log base 2 on M


def test_gemm_latency_keeps_the_largest_series_and_its_legend_off_the_data():
    results = []
    for index in range(MAX_SERIES + 2):
        n = 64 * (index + 1)
        for m in range(1, 3 + (index < MAX_SERIES)):  # the last two series have fewer points
            r = case("MatMulV2", f"{m},128;{n},128", samples=[1.0 + m + index] * 5)
            r.case_id = f"MatMulV2-{m}x128x{n}-BF16-{index:04x}"
            results.append(r)
    root = parse(gemm_latency(results))
    assert len(series(root)) == MAX_SERIES
    assert (f"GEMM latency vs M per (N, K) (the {MAX_SERIES} largest of {MAX_SERIES + 2} "
            "(N, K) series)") in texts(root)
    shown = legend(root)
    assert len(shown) == MAX_SERIES and f"N={64 * MAX_SERIES} K=128 BF16" in shown
    assert f"N={64 * (MAX_SERIES + 1)} K=128 BF16" not in shown
    # The legend stands right of every point drawn (it covered the data on the page).
    frame = groups(root, "legend_")[0].find("{http://www.w3.org/2000/svg}g/"
                                            "{http://www.w3.org/2000/svg}path")
    legend_left = min(path_xs(frame))
    assert max(p["x"] for p in points(root)) < legend_left
    assert gemm_latency([case("RmsNorm", "8,8", samples=[1.0])]) is None  # no GEMM, no figure


def test_gemm_latency_puts_the_types_of_one_call_on_one_line_and_only_them():
    results = []
    for m, kernel_type in ((1, "MatMulV2"), (16, "MatMulV3"), (128, "MatMulCommon")):
        r = case(kernel_type, f"{m},128;64,128", samples=[1.0 + m] * 5)
        r.case_id = f"{kernel_type}-{m}x128x64-BF16-{m:04x}"
        results.append(r)
    batched = case("BatchMatMulV2", "4,128;64,128", samples=[3.0] * 5)
    batched.case_id = "BatchMatMulV2-4x128x64-BF16-0004"  # reads like a GEMM id: not one
    root = parse(gemm_latency([*results, batched]))
    (only,) = series(root)
    vertices = line(root, only.get("id"))
    assert [x for x, _ in vertices] == sorted(x for x, _ in vertices)
    assert len(vertices) == 3 and legend(root) == ["N=64 K=128 BF16"]
    assert gemm_latency([batched]) is None


def test_roofline_places_every_case_under_the_ceilings():
    results = gemm_results()
    results[0].status = STATUS_SUSPECT
    root = parse(roofline(results))
    # Left: the ceilings (fastest first, as measured), the peak, the cases by bound; right:
    # the diagonal and every colour of its points.
    llc, memory, peak, *cases, diagonal = legend(root)[:-3]
    assert memory.startswith("main memory ") and memory.endswith(" GB/s")
    assert llc.startswith("LLC ") and llc.endswith(" GB/s")
    assert peak.startswith("peak ") and peak.endswith(" TFLOP/s")
    assert cases == ["compute-bound", "memory-bound"] and diagonal == "median = bound"
    bound_by = [r.bound_by for r in results[1:]]
    assert legend(root)[-3:] == [f"compute-bound ({bound_by.count('compute')})",
                                 f"memory-bound ({bound_by.count('memory')})",
                                 "suspect: faster than its bound (1)"]
    colours = by_colour(root)
    # Left: every case by what bounds it; right: the same, the suspect one in red.
    assert colours[BOUND_COLORS["compute"]] == bound_by.count("compute") * 2 + \
        (results[0].bound_by == "compute")
    assert colours["#d1242f"] == 1
    assert "Achieved vs bound" in texts(root)
    assert {"Roofline", "arithmetic intensity (FLOP/byte)", "median (us)"} <= set(texts(root))
    assert roofline([case("Add", "8", samples=[1.0])]) is None  # no bound: nothing to place


def test_gap_distribution_is_a_histogram_in_the_agreement_band(tmp_path):
    root = parse(gap_distribution(outcome(tmp_path)))
    bars = [p for g in groups(root, "bars") for p in g.iter("{http://www.w3.org/2000/svg}path")]
    heights = []
    for bar in bars:
        ys = path_ys(bar)
        heights.append(max(ys) - min(ys))
    unit = min(h for h in heights if h > 0)
    assert sum(round(h / unit) for h in heights) == 5  # five gap rows, each in one bar
    assert [t for t in tick_labels(root, "x")] == ["0.25x", "0.5x", "1x", "2x", "4x", "8x"]
    assert legend(root) == ["agreement band [0.8x, 1.2x]"]
    assert "Duration gap: replay vs profiling (5 rows, 4 hotspots)" in texts(root)
    assert gap_distribution(None) is None


def test_regression_ratios_by_verdict_with_the_worst_named():
    results = gemm_results()
    hostile = results[4]  # M=128: SLOWER
    hostile.case_id = 'MatMulV2-<b>&"x"'
    root = parse(regression_ratios(results))
    # The worst named in the legend (escaped, parsed back), numbered at their points: long
    # case ids beside the points covered each other.
    names = legend(root)[4:]
    assert legend(root)[:4] == ["minimum effect \u00b15 %", "SAME (6)", "SLOWER (2)", "p = 0.01"]
    assert sorted(n.split(": ", 1)[1].rsplit(" (", 1)[0] for n in names) == \
        sorted([hostile.case_id, results[5].case_id])
    colours = by_colour(root)
    assert colours[VERDICT_COLORS["SAME"]] == 6 and colours[VERDICT_COLORS["SLOWER"]] == 2
    notes = [texts(g)[0] for g in groups(root, "note-")]
    assert sorted(notes) == ["1", "2"] and [n.split(":")[0] for n in names] == ["1", "2"]
    assert any(p["title"].startswith('MatMulV2-<b>&"x": SLOWER') for p in points(root))
    assert regression_ratios(gemm_results()[:0]) is None


def _compared(ratio: float, index: int, *, threshold: float = 0.05, samples: int = 12,
              status: str = "ok"):
    r = case("Add", f"{index},8", samples=[10.0 * ratio * (1 + 0.001 * (i % 3))
                                           for i in range(samples)])
    r.status = status
    r.regression = compare_samples([10.0 * (1 + 0.001 * (i % 3)) for i in range(samples)],
                                   r.samples, base_run="r0", threshold=threshold,
                                   new_status=status, spread=STEADY).to_dict()
    return r


def test_regression_ratios_on_a_log_axis_around_one():
    results = [_compared(ratio, index) for index, ratio in enumerate((0.5, 0.9, 1.0, 1.1, 2.0))]
    root = parse(regression_ratios(results))
    xs = sorted(p["x"] for p in points(root))
    assert len(xs) == 5
    ticks = tick_labels(root, "x")
    assert "1" in ticks and ("0.5" in ticks or "2" in ticks)
    # Log scale: 0.5 and 2 sit as far from 1 on either side.
    assert math.isclose(xs[2] - xs[0], xs[4] - xs[2], rel_tol=0.02)


def _band(root) -> tuple[float, float]:
    xs = path_xs(group(root, "min-effect").find("{http://www.w3.org/2000/svg}path"))
    return min(xs), max(xs)


def test_the_minimum_effect_band_is_the_configured_one_and_a_5_percent_regression_lies_out():
    """The first case's threshold is widened by its baseline's spread (9 %): the band still
    shows the configured 5 %, and a SLOWER case at 1.06x stands outside it, numbered."""
    wide = _compared(1.0, 0, threshold=0.09)
    slower = _compared(1.06, 1)
    assert wide.regression["threshold"] == 0.09 and slower.regression["verdict"] == "SLOWER"
    root = parse(regression_ratios([wide, slower]))
    low, high = _band(root)
    one = next(p["x"] for p in points(root) if p["title"].startswith(wide.case_id))
    at = next(p["x"] for p in points(root) if p["title"].startswith(slower.case_id))
    # Log axis: the band's edges sit at 1/1.05 and 1.05, as far from 1 on either side.
    assert math.isclose(high - one, one - low, rel_tol=0.02)
    assert math.isclose((high - one) / (at - one), math.log(1.05) / math.log(1.06), rel_tol=0.02)
    assert at > high
    assert f"1: {slower.case_id} (1.060x)" in legend(root)
    assert regression_ratios([wide, slower], min_effect=0.1) != regression_ratios([wide, slower])


def test_noisy_cases_have_their_own_colour_and_legend_entry_never_a_verdicts():
    faster = _compared(0.7, 0)
    noisy = _compared(0.7, 1, status="noisy")
    assert noisy.regression["verdict"] == "UNCERTAIN"
    root = parse(regression_ratios([faster, noisy]))
    drawn = {p["title"].split(":")[0]: p for p in points(root)}
    assert drawn[faster.case_id]["fill"] == VERDICT_COLORS["FASTER"]
    assert drawn[noisy.case_id]["fill"] == "#ffffff"  # a ring of its own colour
    assert drawn[noisy.case_id]["stroke"] not in VERDICT_COLORS.values()
    assert "noisy or suspect: no stored value (1)" in legend(root)


def test_collective_bandwidth_one_panel_per_op(tmp_path):
    hccl = tmp_path / "hccl" / "v8.5"
    hccl.mkdir(parents=True)
    (hccl / "hcom_allReduce_.csv").write_text(HCOM)
    (hccl / "hcom_allGather_.csv").write_text(HCOM.replace("30.58", "20.1"))
    (hccl / "hcom_broadcast_.csv").write_text(HCOM.replace("8,DT_BF16", "4,DT_BF16"))
    root = parse(collective_bandwidth(tmp_path / "hccl"))
    labels = texts(root)
    assert root.get("aria-label") == "Collective bandwidth vs message size" in labels
    panels = [t for t in labels if t in ("allGather", "allReduce", "broadcast")]
    assert panels == ["allGather", "allReduce", "broadcast"]  # 2x2, the fourth cell empty
    assert labels.count("bus bandwidth (GB/s)") == 3
    assert [len(line(root, g.get("id"))) for g in series(root)] == [3, 3, 3]
    assert legend(root) == ["8 ranks DT_BF16 tier 1"] * 2 + ["4 ranks DT_BF16 tier 1"]
    assert collective_bandwidth(tmp_path / "nothing") is None
    assert collective_bandwidth(None) is None


def test_one_case_and_equal_values_still_make_figures():
    (single,) = [r for r in gemm_results() if r.case_id.startswith("MatMulV2-16x1536x7168")]
    root = parse(gemm_latency([single]))
    assert len(points(root)) == 1  # the line's one marker
    single.bound_us = single.stats.median  # bound = median: every value on the roofline equal
    root = parse(roofline([single]))
    assert len(points(root)) == 2  # one point in each panel
    assert all(math.isfinite(p["y"]) for p in points(root))


def test_noisy_and_suspect_gemms_are_rings_off_the_line():
    results = gemm_results()
    noisy = next(r for r in results if r.case_id.startswith("MatMulV2-128x1536x7168"))
    noisy.status, noisy.error = "noisy", "median 8.00x its minimum"
    noisy.set_samples([8000.0] * 12)  # the spike that dominated the line
    root = parse(gemm_latency(results))
    assert sorted(len(line(root, g.get("id"))) for g in series(root)) == [3, 4]
    rings = [p for p in points(root) if p["fill"] == "#ffffff"]
    assert len(rings) == 1
    assert "noisy: median 8.00x its minimum" in rings[0]["title"]
    assert "ring: noisy or suspect, off the line" in legend(root)


def test_twelve_series_never_share_a_colour():
    assert len(set(PALETTE[:MAX_SERIES])) == MAX_SERIES == 12
    fig, _ = figure(100, 100)
    import matplotlib

    assert matplotlib.rcParams["axes.prop_cycle"] is not None and fig is not None

    def lab(color: str) -> tuple[float, float, float]:
        def linear(c: float) -> float:
            return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
        r, g, b = (linear(int(color[i:i + 2], 16) / 255) for i in (1, 3, 5))
        x, y, z = ((0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047,
                   0.2126 * r + 0.7152 * g + 0.0722 * b,
                   (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883)

        def f(t: float) -> float:
            return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116
        return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))

    closest = min(math.dist(lab(a), lab(b)) for i, a in enumerate(PALETTE[:12])
                  for b in PALETTE[i + 1:12])
    assert closest > 25  # CIELAB units: clearly different colours side by side


def test_every_colour_of_the_achieved_vs_bound_panel_is_in_its_legend():
    results = gemm_results()
    results[0].status = STATUS_SUSPECT
    results[1].status = "noisy"
    root = parse(roofline(results))
    panel_legend = groups(root, "legend_")[-1]
    shown = swatches(panel_legend)
    right_points = set(by_colour(root)) - {BOUND_COLORS["compute"], BOUND_COLORS["memory"]}
    assert right_points <= shown and {"#d1242f", "#bf8700"} <= shown


def test_cache_levels_are_listed_as_measured_and_an_inner_one_slower_than_memory_is_marked():
    from pytest_npuperf.report.figures import ceilings_in_order

    # What the CPU roofline drew: L2 (a single-thread copy of a per-core cache) at 135.7
    # GB/s, below main memory at 238.4 GB/s.
    ordered = ceilings_in_order({"L2": 135.7e9, "DRAM": 238.4e9, "LLC": 410.0e9})
    assert [(name, note) for name, _, note in ordered] == [
        ("LLC", ""), ("DRAM", ""), ("L2", " (measured below DRAM, LLC)")]
    results = gemm_results()
    for i, r in enumerate(results):  # the first four stream from L2, the others from the LLC
        r.memory_level = "L2" if i < 4 else "LLC"
        r.memory_bound_us = r.bytes / (135.7e9 if i < 4 else 410e9) * 1e6
        r.hbm_bound_us = r.bytes / 238.4e9 * 1e6
    labels = legend(parse(roofline(results)))
    ceilings = [x for x in labels if x.endswith("GB/s") or "measured below" in x]
    assert ceilings[-1] == "L2 135.7 GB/s (measured below LLC, main memory)"
    speeds = [float(x.split()[-2]) if x.endswith("GB/s") else 135.7 for x in ceilings]
    assert speeds == sorted(speeds, reverse=True)


def test_a_large_runs_scatter_draws_its_worst_points_and_the_rest_as_a_density():
    """10^5 cases must not make 10^5 markers: the MAX_DRAWN farthest from agreement are
    drawn one by one (with their hover text), and every point as a density beneath them."""
    from pytest_npuperf.replay.outcome import GapRow
    from pytest_npuperf.report.figures import MAX_DRAWN, replay_vs_model

    def with_gaps(count: int):
        found = dataclasses.replace(outcome(), gaps=[
            GapRow("MatMulV2", "MatMulV2.csv", 10.0 * (1 + (i % 97) / 200), 10.0, f"{i},8")
            for i in range(count)])
        found.gaps[count // 2] = GapRow("MatMulV2", "MatMulV2.csv", 80.0, 10.0, "worst")
        return found

    svg = replay_vs_model(with_gaps(5 * MAX_DRAWN))
    root = parse(svg)
    drawn = points(root)
    assert len(drawn) == MAX_DRAWN and all(p["title"] for p in drawn)
    cells = list(group(root, "density").iter("{http://www.w3.org/2000/svg}use")) + \
        list(group(root, "density").iter("{http://www.w3.org/2000/svg}path"))
    assert 0 < len(cells) < 5000 and len(svg) < 1_500_000
    assert f"the {MAX_DRAWN:,} farthest of {5 * MAX_DRAWN:,} drawn one by one" in svg
    # The worst gap (8x) is drawn one by one: the top-most point of the panel.
    top = min(drawn, key=lambda p: p["y"])
    assert "worst" in top["title"]
    every = replay_vs_model(with_gaps(MAX_DRAWN))
    assert "drawn one by one" not in every and group(parse(every), "density") is None


def test_a_large_scatter_makes_the_hover_texts_of_its_drawn_points_only():
    """The hover texts of a 10^5-point scatter are made for the MAX_DRAWN points drawn one by
    one, not for every point (each text costs a verdict's description)."""
    from pytest_npuperf.report.figures import MAX_DRAWN, _scatter

    _fig, (ax,) = figure(400, 300)
    made = []

    def title(i: int) -> str:
        made.append(i)
        return f"point {i}"

    count = 3 * MAX_DRAWN
    drawn = _scatter(ax, [1.0 + i for i in range(count)], [1.0] * count, color=PALETTE[0],
                     label="x", titles=title, rank=[float(i) for i in range(count)])
    assert drawn == MAX_DRAWN and len(made) == MAX_DRAWN
    assert sorted(made) == list(range(count - MAX_DRAWN, count))  # the highest ranked
