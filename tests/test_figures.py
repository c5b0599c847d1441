"""What each report figure shows (report/figures.py): its series, points, legend, titles,
ticks and colours, the MAX_SERIES rule, and None when the run has nothing to show."""

from __future__ import annotations

import dataclasses
import math

from pytest_npuperf.history.compare import compare_samples
from pytest_npuperf.measure.result import STATUS_SUSPECT
from pytest_npuperf.report.charts import PALETTE
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
from tests.test_charts import NS, find, parse, polyline_points, texts, tick_labels


def legend(root) -> list[str]:
    return [t.text for g in find(root, "g") if g.get("class") == "legend"
            for t in g.iter(f"{NS}text")]


def circles_by_fill(root) -> dict[str, int]:
    """Drawn points (legend swatches left out) by colour: a ring counts by its stroke."""
    found: dict[str, int] = {}
    for group in find(root, "g"):
        dots = group.findall(f"{NS}circle") if group.get("class") != "legend" else []
        if dots and group.get("fill"):
            found[group.get("fill")] = found.get(group.get("fill"), 0) + len(dots)
    for parent in [root, *find(root, "g")]:
        if parent.get("class") == "legend":
            continue
        for dot in parent.findall(f"{NS}circle"):
            color = dot.get("stroke") if dot.get("fill") == "#fff" else dot.get("fill")
            if color:
                found[color] = found.get(color, 0) + 1
    return found


def test_gemm_latency_draws_one_line_per_n_k_over_m():
    root = parse(gemm_latency(gemm_results()))
    lines = find(root, "polyline")
    assert len(lines) == 2 and [len(polyline_points(x)) for x in lines] == [4, 4]
    assert [x.get("stroke") for x in lines] == list(PALETTE[:2])
    # Sorted by M: left to right; latency grows with M: upwards (smaller y).
    for line in lines:
        xs, ys = zip(*polyline_points(line))
        assert list(xs) == sorted(xs) and list(ys) == sorted(ys, reverse=True)
    assert legend(root) == ["N=512 K=7168 BF16", "N=7168 K=1536 BF16"]
    labels = texts(root)
    assert "GEMM latency vs M per (N, K)" in labels and "M (rows)" in labels
    assert "median latency (us)" in labels
    assert {"1", "16", "1024"} <= set(tick_labels(root, "middle"))  # log base 2 on M


def test_gemm_latency_keeps_the_largest_series():
    results = []
    for index in range(MAX_SERIES + 2):
        n = 64 * (index + 1)
        for m in range(1, 3 + (index < MAX_SERIES)):  # the last two series have fewer points
            r = case("MatMulV2", f"{m},128;{n},128", samples=[1.0 + m + index] * 5)
            r.case_id = f"MatMulV2-{m}x128x{n}-BF16-{index:04x}"
            results.append(r)
    root = parse(gemm_latency(results))
    assert len(find(root, "polyline")) == MAX_SERIES
    assert (f"GEMM latency vs M per (N, K) (the {MAX_SERIES} largest of {MAX_SERIES + 2} "
            "(N, K) series)") in texts(root)
    shown = legend(root)
    assert len(shown) == MAX_SERIES and f"N={64 * MAX_SERIES} K=128 BF16" in shown
    assert f"N={64 * (MAX_SERIES + 1)} K=128 BF16" not in shown
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
    (line,) = find(root, "polyline")
    assert [x for x, _ in polyline_points(line)] == sorted(x for x, _ in polyline_points(line))
    assert len(polyline_points(line)) == 3 and legend(root) == ["N=64 K=128 BF16"]
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
    by_fill = circles_by_fill(root)
    # Left: every case by what bounds it; right: the same, the suspect one in red.
    assert by_fill[BOUND_COLORS["compute"]] == bound_by.count("compute") * 2 + \
        (results[0].bound_by == "compute")
    assert by_fill["#d1242f"] == 1
    assert "Achieved vs bound" in texts(root)
    assert {"Roofline", "arithmetic intensity (FLOP/byte)", "median (us)"} <= set(texts(root))
    assert roofline([case("Add", "8", samples=[1.0])]) is None  # no bound: nothing to place


def test_gap_distribution_is_a_histogram_in_the_agreement_band(tmp_path):
    root = parse(gap_distribution(outcome(tmp_path)))
    bars = next(g for g in find(root, "g") if g.get("fill") == "#0969da")
    heights = [float(r.get("height")) for r in bars.findall(f"{NS}rect")]
    unit = min(heights)
    assert sum(round(h / unit) for h in heights) == 5  # five gap rows, each in one bar
    assert tick_labels(root, "middle") == ["0.25x", "0.5x", "1x", "2x", "4x", "8x"]
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
    names = legend(root)[3:]
    assert legend(root)[:3] == ["SAME (6)", "SLOWER (2)", "p = 0.01"]
    assert sorted(n.split(": ", 1)[1] for n in names) == sorted([hostile.case_id,
                                                                  results[5].case_id])
    by_fill = circles_by_fill(root)
    assert by_fill[VERDICT_COLORS["SAME"]] == 6 and by_fill[VERDICT_COLORS["SLOWER"]] == 2
    notes = [t.text for t in find(root, "text") if t.get("font-size") == "8"]
    assert sorted(notes) == ["1", "2"] and [n.split(":")[0] for n in names] == ["1", "2"]
    swatches = [c.get("fill") for g in find(root, "g") if g.get("class") == "legend"
                for c in g.iter(f"{NS}circle")]
    assert swatches[-2:] == [VERDICT_COLORS["SLOWER"]] * 2
    dashed = [p for p in find(root, "path") if p.get("stroke-dasharray") == "5,3"]
    assert len(dashed) == 2  # the minimum effect either way
    assert regression_ratios(gemm_results()[:0]) is None


def test_regression_ratios_on_a_log_axis_around_one():
    results = []
    for index, ratio in enumerate((0.5, 0.9, 1.0, 1.1, 2.0)):
        r = case("Add", f"{index},8", samples=[10.0 * ratio] * 12)
        r.regression = compare_samples([10.0] * 12, r.samples, base_run="r0",
                                       spread=STEADY).to_dict()
        results.append(r)
    root = parse(regression_ratios(results))
    xs = [float(c.get("cx")) for g in find(root, "g") if g.get("class") != "legend"
          for c in g.findall(f"{NS}circle")]
    assert len(xs) == 5
    ticks = tick_labels(root, "middle")
    assert "1" in ticks and ("0.5" in ticks or "2" in ticks)
    # Log scale: 0.5 and 2 sit as far from 1 on either side.
    placed = sorted(xs)
    assert math.isclose(placed[2] - placed[0], placed[4] - placed[2], rel_tol=0.02)


def test_collective_bandwidth_one_panel_per_op(tmp_path):
    hccl = tmp_path / "hccl" / "v8.5"
    hccl.mkdir(parents=True)
    (hccl / "hcom_allReduce_.csv").write_text(HCOM)
    (hccl / "hcom_allGather_.csv").write_text(HCOM.replace("30.58", "20.1"))
    (hccl / "hcom_broadcast_.csv").write_text(HCOM.replace("8,DT_BF16", "4,DT_BF16"))
    root = parse(collective_bandwidth(tmp_path / "hccl"))
    labels = texts(root)
    assert labels[0] == "Collective bandwidth vs message size"
    panels = [t for t in labels if t in ("allGather", "allReduce", "broadcast")]
    assert panels == ["allGather", "allReduce", "broadcast"]  # 2x2, the fourth cell empty
    assert labels.count("bus bandwidth (GB/s)") == 3
    lines = find(root, "polyline")
    assert [len(polyline_points(x)) for x in lines] == [3, 3, 3]
    assert legend(root) == ["8 ranks DT_BF16 tier 1"] * 2 + ["4 ranks DT_BF16 tier 1"]
    assert collective_bandwidth(tmp_path / "nothing") is None
    assert collective_bandwidth(None) is None


def test_one_case_and_equal_values_still_make_figures():
    (single,) = [r for r in gemm_results() if r.case_id.startswith("MatMulV2-16x1536x7168")]
    root = parse(gemm_latency([single]))
    assert not find(root, "polyline") and sum(circles_by_fill(root).values()) == 1
    single.bound_us = single.stats.median  # bound = median: every value on the roofline equal
    root = parse(roofline([single]))
    assert sum(circles_by_fill(root).values()) == 2  # one point in each panel
    assert all(math.isfinite(float(c.get("cy"))) for c in find(root, "circle"))


def test_noisy_and_suspect_gemms_are_rings_off_the_line():
    results = gemm_results()
    noisy = next(r for r in results if r.case_id.startswith("MatMulV2-128x1536x7168"))
    noisy.status, noisy.error = "noisy", "median 8.00x its minimum"
    noisy.set_samples([8000.0] * 12)  # the spike that dominated the line
    root = parse(gemm_latency(results))
    lines = find(root, "polyline")
    assert sorted(len(polyline_points(x)) for x in lines) == [3, 4]  # the spike is off its line
    rings = [c for c in find(root, "circle") if c.get("fill") == "#fff"]
    assert len(rings) == 2  # the point and its legend swatch
    assert any("noisy: median 8.00x its minimum" in (t.text or "")
               for c in rings for t in c.iter(f"{NS}title"))
    assert "ring: noisy or suspect, off the line" in legend(root)


def test_twelve_series_never_share_a_colour():
    assert len(set(PALETTE[:MAX_SERIES])) == MAX_SERIES == 12

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
    panel_legend = [g for g in find(root, "g") if g.get("class") == "legend"][-1]
    swatches = {c.get("fill") if c.get("fill") != "#fff" else c.get("stroke")
                for c in panel_legend.iter(f"{NS}circle")}
    right_points = set(circles_by_fill(root)) - {BOUND_COLORS["compute"], BOUND_COLORS["memory"]}
    assert right_points <= swatches and {"#d1242f", "#bf8700"} <= swatches


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
    """10^5 cases must not make 10^5 circles: the MAX_DRAWN farthest from agreement are drawn
    one by one (with their hover text), and every point as a density beneath them."""
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
    circles = list(root.iter(f"{NS}circle"))
    legend_dots = sum(1 for g in find(root, "g") if g.get("class") == "legend"
                      for _ in g.iter(f"{NS}circle"))
    assert len(circles) - legend_dots == MAX_DRAWN
    squares = [r for g in find(root, "g") if g.get("fill-opacity") for r in g.iter(f"{NS}rect")]
    assert 0 < len(squares) < 2000 and len(svg) < 400_000
    assert f"the {MAX_DRAWN:,} farthest of {5 * MAX_DRAWN:,} drawn one by one" in svg
    # The worst gap (8x) is drawn one by one: the top-most point of the panel is a circle.
    top_circle = min(float(c.get("cy")) for c in circles)
    top_square = min(float(r.get("y")) for r in squares)
    assert top_circle <= top_square + 5
    every = replay_vs_model(with_gaps(MAX_DRAWN))
    assert "drawn one by one" not in every
    assert not [g for g in find(parse(every), "g") if g.get("fill-opacity")]
