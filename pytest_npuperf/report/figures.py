"""The run as pictures: SVG text (report/charts.py) embedded in the html reports, one
self-contained file. Drawn only when a report is written.

- latency vs M per (N, K) for the GEMM families (MatMulV2/V3/Common: the case id carries M, K, N);
- the roofline: achieved TFLOP/s against arithmetic intensity under the device's ceilings,
  and each case's median against its bound;
- the duration-gap distribution (replay / profiling);
- the regression ratios against the baseline (ratio against significance);
- collective bandwidth against message size per op (the written database's hcom_*.csv).

Each function returns None when the run has nothing to show for it.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from pathlib import Path

from ..history.compare import ALPHA, FASTER, NEW, SAME, SLOWER, UNCERTAIN
from ..kernels.catalog import same_call_types
from ..measure.result import STATUS_SUSPECT, CaseResult
from ..replay.outcome import GAP_HIGH, GAP_LOW, BackfillOutcome
from .charts import DASHED, DOTTED, INK, MUTED, Figure
from .regression import Judged, judged

MAX_SERIES = 12  # lines in one plot before it stops being readable
_GEMM_ID = re.compile(r"^(?P<type>[A-Za-z0-9_]+)-(?P<m>\d+)x(?P<k>\d+)x(?P<n>\d+)-(?P<dtype>[A-Z0-9_]+)-")
VERDICT_COLORS = {SLOWER: "#d1242f", FASTER: "#1a7f37", SAME: "#57606a", UNCERTAIN: "#bf8700",
                  NEW: "#8250df"}
BOUND_COLORS = {"compute": "#0969da", "memory": "#bc4c00", "latency": "#8250df", "": "#57606a"}
MARKER, LINE_WIDTH = 2.0, 1.6  # series: dot radius and line width (drawing units)


def _measured(results: list[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.measured and r.stats is not None and r.stats.median > 0]


def gemm_latency(results: list[CaseResult]) -> str | None:
    series: dict[tuple[int, int, str], list[tuple[int, float]]] = defaultdict(list)
    # MatMulV2/V3/Common rows are one call (torch.mm): whichever of them the device ran, a
    # GEMM's point belongs on its (N, K, dtype) line.
    matmuls = same_call_types("MatMulV2")
    for r in _measured(results):
        match = _GEMM_ID.match(r.case_id)
        if r.kernel_type in matmuls and match:
            key = (int(match["n"]), int(match["k"]), match["dtype"])
            series[key].append((int(match["m"]), r.stats.median))
    if not series:
        return None
    ranked = sorted(series.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    shown = ranked[:MAX_SERIES]
    fig = Figure(720, 400)
    ax = fig.axes[0]
    for (n, k, dtype), points in shown:
        points.sort()
        ax.line([p[0] for p in points], [p[1] for p in points], marker=MARKER,
                width=LINE_WIDTH, label=f"N={n} K={k} {dtype}")
    ax.log("x", base=2)
    ax.log("y")
    ax.xlabel = "M (rows)"
    ax.ylabel = "median latency (us)"
    more = f" (the {MAX_SERIES} largest of {len(series)} (N, K) series)" \
        if len(series) > MAX_SERIES else ""
    ax.title = f"GEMM latency vs M per (N, K){more}"
    ax.legend(columns=2 if len(shown) > 6 else 1)
    return fig.svg()


def _ceilings(results: list[CaseResult]) -> tuple[float | None, dict[str, float]]:
    """Peak FLOP/s and bandwidth per memory level, read back from the cases' bounds."""
    peak, bandwidths = None, {}
    for r in results:
        if r.compute_bound_us and r.flops:
            peak = max(peak or 0.0, r.flops / (r.compute_bound_us * 1e-6))
        if r.memory_bound_us and r.bytes and r.memory_level:
            bandwidths[r.memory_level] = r.bytes / (r.memory_bound_us * 1e-6)
        if r.hbm_bound_us and r.bytes:
            bandwidths.setdefault("main memory", r.bytes / (r.hbm_bound_us * 1e-6))
    return peak, bandwidths


def roofline(results: list[CaseResult]) -> str | None:
    cases = [r for r in _measured(results) if r.bound_us]
    if not cases:
        return None
    peak, bandwidths = _ceilings(cases)
    fig = Figure(960, 420, columns=2)
    left, right = fig.axes
    with_flops = [r for r in cases if r.flops and r.bytes and r.achieved_tflops]
    if with_flops and peak:
        intensity = [r.flops / r.bytes for r in with_flops]
        lo, hi = min(intensity) / 4, max(intensity) * 4
        xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
        for name, bw in sorted(bandwidths.items(), key=lambda kv: kv[1]):
            left.line(xs, [min(peak, x * bw) / 1e12 for x in xs], width=1.3, dash=DASHED,
                      label=f"{name} {bw / 1e9:.4g} GB/s")
        left.hline(peak / 1e12, color=INK, label=f"peak {peak / 1e12:.4g} TFLOP/s")
        for bound_by in ("compute", "memory", "latency"):
            chosen = [(x, r) for x, r in zip(intensity, with_flops) if r.bound_by == bound_by]
            if chosen:
                left.scatter([x for x, _ in chosen], [r.achieved_tflops for _, r in chosen],
                             color=BOUND_COLORS[bound_by], label=f"{bound_by}-bound")
        left.log()
        left.legend()
    left.xlabel = "arithmetic intensity (FLOP/byte)"
    left.ylabel = "achieved TFLOP/s (at the median)"
    left.title = "Roofline"
    times = [r.stats.median for r in cases]
    bounds = [r.bound_us for r in cases]
    colors = ["#d1242f" if r.status == STATUS_SUSPECT else BOUND_COLORS.get(r.bound_by, MUTED)
              for r in cases]
    right.scatter(bounds, times, color=colors)
    lo, hi = min(bounds + times) / 2, max(bounds + times) * 2
    right.line([lo, hi], [lo, hi], color=INK, width=1.3, label="median = bound")
    right.log()
    right.xlabel = "bound (us): compute, memory or the latency floor, the largest"
    right.ylabel = "median (us)"
    suspects = sum(1 for r in cases if r.status == STATUS_SUSPECT)
    right.title = f"Achieved vs bound ({suspects} suspect, red)"
    right.legend()
    return fig.svg()


def gap_distribution(outcome: BackfillOutcome | None) -> str | None:
    if outcome is None or not outcome.gaps:
        return None
    logs = [math.log2(g.ratio) for g in outcome.gaps if g.ratio > 0]
    if not logs:
        return None
    fig = Figure(720, 345)
    ax = fig.axes[0]
    ax.vband(math.log2(GAP_LOW), math.log2(GAP_HIGH), color="#1a7f37", opacity=0.12,
             label=f"agreement band [{GAP_LOW:g}x, {GAP_HIGH:g}x]")
    ax.hist(logs, bins=min(40, max(8, len(logs) // 3)), color="#0969da", opacity=0.8)
    ticks = [t for t in range(math.floor(min(logs)) - 1, math.ceil(max(logs)) + 2)]
    ax.set_xticks(ticks, [f"{2.0 ** t:g}x" for t in ticks])
    hot = sum(1 for g in outcome.gaps if g.hotspot)
    ax.xlabel = "MicroBench / Profiling (log scale)"
    ax.ylabel = "rows"
    ax.title = f"Duration gap: replay vs profiling ({len(logs)} rows, {hot} hotspots)"
    ax.legend()
    return fig.svg()


def replay_vs_model(outcome: BackfillOutcome | None) -> str | None:
    """Each compared row: its in-model time (x) and its replay (y), log-log, on the y = x line
    of perfect agreement and the [0.8x, 1.2x] band; one colour per kernel type."""
    gaps = [g for g in outcome.gaps if g.profiling_us > 0 and g.microbench_us > 0] \
        if outcome is not None else []
    if not gaps:
        return None
    fig = Figure(720, 420)
    ax = fig.axes[0]
    ax.log("xy")
    low = min(min(g.profiling_us, g.microbench_us) for g in gaps) / 1.5
    high = max(max(g.profiling_us, g.microbench_us) for g in gaps) * 1.5
    ax.line([low, high], [low, high], color=INK, width=1.2, label="replay = in-model")
    for factor in (GAP_LOW, GAP_HIGH):
        ax.line([low, high], [low * factor, high * factor], color=MUTED, width=1.0, dash=DOTTED,
                label=f"{GAP_LOW:g}x and {GAP_HIGH:g}x" if factor == GAP_LOW else "")
    for kind in sorted({g.operator for g in gaps}):
        chosen = [g for g in gaps if g.operator == kind]
        ax.scatter([g.profiling_us for g in chosen], [g.microbench_us for g in chosen],
                   radius=3.0, color=ax.next_color(), label=f"{kind} ({len(chosen)})")
    ax.xlabel = "in-model device time (us, profiled)"
    ax.ylabel = "replay (us)"
    ax.title = f"Replay vs in-model ({len(gaps)} rows)"
    ax.legend()
    return fig.svg()


def regression_ratios(results: list[CaseResult]) -> str | None:
    items = [i for i in judged(results) if i.comparison.ratio]
    if not items:
        return None
    threshold = items[0].comparison.threshold
    fig = Figure(720, 385)
    ax = fig.axes[0]
    for verdict in (SAME, UNCERTAIN, FASTER, SLOWER):
        chosen = [i for i in items if i.comparison.verdict == verdict]
        if chosen:
            ax.scatter([i.comparison.ratio for i in chosen], [_significance(i) for i in chosen],
                       radius=2.5, color=VERDICT_COLORS[verdict],
                       label=f"{verdict} ({len(chosen)})")
    for x in (1 + threshold, 1 / (1 + threshold)):
        ax.vline(x, color=MUTED, width=1.1, dash=DASHED)
    ax.hline(-math.log10(ALPHA), color=MUTED, width=1.1, dash=DOTTED, label=f"p = {ALPHA:g}")
    worst = sorted((i for i in items if i.comparison.verdict == SLOWER),
                   key=lambda i: -i.comparison.severity)[:3]
    for item in worst:
        ax.annotate(item.case_id, item.comparison.ratio, _significance(item))
    ax.log("x")
    ax.xlabel = "median / baseline median (log scale; dashed: the minimum effect)"
    ax.ylabel = "-log10 p (Mann-Whitney U)"
    ax.title = "Change against the baseline per case"
    ax.legend()
    return fig.svg()


def _significance(item: Judged) -> float:
    return -math.log10(max(item.comparison.p_value or 1.0, 1e-300))


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def read_collective_tables(hccl_dir: Path | None) -> dict[str, list[dict[str, str]]]:
    """op -> rows of every `hcom_<op>_.csv` under `hccl_dir` (CONTRACT.md §7)."""
    tables: dict[str, list[dict[str, str]]] = {}
    if hccl_dir is None or not hccl_dir.is_dir():
        return tables
    for path in sorted(hccl_dir.glob("*/hcom_*.csv")) + sorted(hccl_dir.glob("hcom_*.csv")):
        op = path.stem.removeprefix("hcom_").rstrip("_")
        try:
            with open(path, newline="", encoding="utf-8-sig") as handle:
                tables.setdefault(op, []).extend(csv.DictReader(handle))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue  # a broken table costs its plot, never the report
    return tables


def collective_bandwidth(hccl_dir: Path | None) -> str | None:
    tables = read_collective_tables(hccl_dir)
    plotted: dict[str, dict[tuple[str, str, str], list[tuple[float, float]]]] = {}
    kinds: set[str] = set()
    for op, rows in tables.items():
        series: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
        for row in rows:
            size = _float(row.get("message_bytes"))
            bandwidth = _float(row.get("busbw_gbps"))
            kind = "bus"
            if bandwidth is None:
                bandwidth, kind = _float(row.get("bandwidth_gbps")), "algorithm"
            if bandwidth is None and size and _float(row.get("Duration(us)")):
                bandwidth, kind = size / (_float(row.get("Duration(us)")) * 1e3), "algorithm"
            if size and bandwidth:
                key = (row.get("num_devices", "?"), row.get("dtype", "?"),
                       row.get("topology_tier", "?"))
                series[key].append((size, bandwidth))
                kinds.add(kind)
        if series:
            plotted[op] = series
    if not plotted:
        return None
    columns = min(len(plotted), 2)
    rows_count = math.ceil(len(plotted) / columns)
    fig = Figure(480 * columns, 326 * rows_count + 25, rows_count, columns,
                 title="Collective bandwidth vs message size")
    for ax, (op, series) in zip(fig.axes, sorted(plotted.items())):
        for (ranks, dtype, tier), points in sorted(series.items())[:MAX_SERIES]:
            points.sort()
            ax.line([p[0] for p in points], [p[1] for p in points], marker=MARKER,
                    width=LINE_WIDTH, label=f"{ranks} ranks {dtype} tier {tier}")
        ax.log("x", base=2)
        ax.title = op
        ax.xlabel = "message bytes per rank"
        ax.ylabel = f"{' / '.join(sorted(kinds))} bandwidth (GB/s)"
        ax.legend()
    for ax in fig.axes[len(plotted):]:
        ax.visible = False
    return fig.svg()


def draw_figures(results: list[CaseResult], outcome: BackfillOutcome | None,
                 hccl_dir: Path | None = None) -> dict[str, str]:
    """Title -> inline SVG, for each figure this run has data for."""
    figures = {
        "GEMM latency vs M": gemm_latency(results),
        "Roofline": roofline(results),
        "Duration gap": gap_distribution(outcome),
        "Replay vs in-model": replay_vs_model(outcome),
        "Regressions vs baseline": regression_ratios(results),
        "Collective bandwidth": collective_bandwidth(hccl_dir),
    }
    return {title: svg for title, svg in figures.items() if svg}
