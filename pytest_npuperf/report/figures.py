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
from ..measure.result import STATUS_NOISY, STATUS_SUSPECT, CaseResult
from ..replay.outcome import GAP_HIGH, GAP_LOW, WriteOutcome
from .charts import DASHED, DOTTED, INK, MUTED, Figure
from .regression import Judged, judged

MAX_SERIES = 12  # lines in one plot before it stops being readable
# Points a scatter draws one by one (each a circle with its hover text): a run of 10^5 cases
# draws its worst this way and the rest as a density (`_scatter`).
MAX_DRAWN = 1_000
_GEMM_ID = re.compile(r"^(?P<type>[A-Za-z0-9_]+)-(?P<m>\d+)x(?P<k>\d+)x(?P<n>\d+)-(?P<dtype>[A-Z0-9_]+)-")
VERDICT_COLORS = {SLOWER: "#d1242f", FASTER: "#1a7f37", SAME: "#57606a", UNCERTAIN: "#bf8700",
                  NEW: "#8250df"}
BOUND_COLORS = {"compute": "#0969da", "memory": "#bc4c00", "latency": "#8250df", "": "#57606a"}
SUSPECT_COLOR, NOISY_COLOR = "#d1242f", "#bf8700"
MARKER, LINE_WIDTH = 2.0, 1.6  # series: dot radius and line width (drawing units)
FLAGGED = (STATUS_NOISY, STATUS_SUSPECT)  # measured, never the row's stored value


def _scatter(ax, xs: list[float], ys: list[float], *, color: str, label: str,
             titles: list[str] | None = None, rank: list[float] | None = None,
             hollow: bool = False, radius: float = 2.3) -> int:
    """A scatter of at most MAX_DRAWN points: of a larger one the MAX_DRAWN that rank
    highest (`rank`: how far from agreement, the worst first; by default those first given)
    are drawn one by one, with their hover text, and all of them as a density beneath: the
    figure's size is bounded, a large run's outliers still stand out, and every case stays
    in the run JSON and the tables. Returns how many points were drawn one by one."""
    if len(xs) <= MAX_DRAWN:
        ax.scatter(xs, ys, color=color, label=label, titles=titles or (), hollow=hollow,
                   radius=radius)
        return len(xs)
    ax.density(xs, ys, color=color)
    chosen = sorted(range(len(xs)), key=lambda i: -rank[i])[:MAX_DRAWN] if rank is not None \
        else list(range(MAX_DRAWN))
    ax.scatter([xs[i] for i in chosen], [ys[i] for i in chosen], color=color, label=label,
               titles=[titles[i] for i in chosen] if titles else (), hollow=hollow,
               radius=radius)
    return MAX_DRAWN


def _drawn_note(drawn: int, total: int) -> str:
    """What a title says of a large run's scatter (empty when every point was drawn)."""
    return "" if drawn >= total else (f"; the {drawn:,} farthest of {total:,} drawn one by "
                                      f"one, all as density")


def _measured(results: list[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.measured and r.stats is not None and r.stats.median > 0]


def gemm_latency(results: list[CaseResult]) -> str | None:
    series: dict[tuple[int, int, str], list[tuple[int, float, CaseResult]]] = defaultdict(list)
    # MatMulV2/V3/Common rows are one call (torch.mm): whichever of them the device ran, a
    # GEMM's point belongs on its (N, K, dtype) line.
    matmuls = same_call_types("MatMulV2")
    for r in _measured(results):
        match = _GEMM_ID.match(r.case_id)
        if r.kernel_type in matmuls and match:
            key = (int(match["n"]), int(match["k"]), match["dtype"])
            series[key].append((int(match["m"]), r.stats.median, r))
    if not series:
        return None
    ranked = sorted(series.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    shown = ranked[:MAX_SERIES]
    fig = Figure(720, 400)
    ax = fig.axes[0]
    flagged_any = False
    for (n, k, dtype), points in shown:
        points.sort(key=lambda p: p[:2])
        color = ax.next_color()
        # Only trusted measurements make a line: a noisy or suspect one (never stored as the
        # row's value) is a ring of the series' colour, off the line.
        trusted = [p for p in points if p[2].status not in FLAGGED]
        flagged = [p for p in points if p[2].status in FLAGGED]
        ax.line([p[0] for p in trusted], [p[1] for p in trusted], color=color, marker=MARKER,
                width=LINE_WIDTH, label=f"N={n} K={k} {dtype}")
        if flagged:
            flagged_any = True
            _scatter(ax, [p[0] for p in flagged], [p[1] for p in flagged], color=color,
                     label="", radius=3.2, hollow=True,
                     titles=[f"{p[2].case_id}: {p[2].status_text}" for p in flagged])
    if flagged_any:
        ax.scatter([], [], color=MUTED, radius=3.2, hollow=True,
                   label="ring: noisy or suspect, off the line")
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


# Where a level sits in the memory hierarchy, innermost first (names as the devices report
# them): a level nearer the core is expected to be at least as fast as the ones beyond it.
_HIERARCHY = ("L1", "L2", "LLC", "L3", "UB", "HBM", "DRAM", "main memory")


def ceilings_in_order(bandwidths: dict[str, float]) -> list[tuple[str, float, str]]:
    """(level, bandwidth, note) fastest first, as measured: the legend lists the ceilings in
    the order the lines stand in the plot. A level measured slower than one further from the
    core is marked: its probe did not reach the cache's speed (e.g. a single-threaded copy of
    a per-core L2 against a threaded copy from memory), so its line is no ceiling to trust."""
    def depth(name: str) -> int:
        return next((i for i, level in enumerate(_HIERARCHY) if name.startswith(level)),
                    len(_HIERARCHY))

    ordered = sorted(bandwidths.items(), key=lambda kv: (-kv[1], depth(kv[0]), kv[0]))
    out = []
    for name, bw in ordered:
        beyond = [other for other, obw in bandwidths.items()
                  if depth(other) > depth(name) and obw > bw]
        note = f" (measured below {', '.join(sorted(beyond))})" if beyond else ""
        out.append((name, bw, note))
    return out


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
        for name, bw, note in ceilings_in_order(bandwidths):
            left.line(xs, [min(peak, x * bw) / 1e12 for x in xs], width=1.3,
                      dash=DOTTED if note else DASHED,
                      label=f"{name} {bw / 1e9:.4g} GB/s{note}")
        left.hline(peak / 1e12, color=INK, label=f"peak {peak / 1e12:.4g} TFLOP/s")
        for bound_by in ("compute", "memory", "latency"):
            chosen = [(x, r) for x, r in zip(intensity, with_flops) if r.bound_by == bound_by]
            if chosen:
                # The worst: those furthest below the ceiling they are bound by.
                _scatter(left, [x for x, _ in chosen], [r.achieved_tflops for _, r in chosen],
                         color=BOUND_COLORS[bound_by], label=f"{bound_by}-bound",
                         rank=[r.stats.median / r.bound_us for _, r in chosen])
        left.log()
        left.legend()
    left.xlabel = "arithmetic intensity (FLOP/byte)"
    left.ylabel = "achieved TFLOP/s (at the median)"
    left.title = "Roofline"
    times = [r.stats.median for r in cases]
    bounds = [r.bound_us for r in cases]
    lo, hi = min(bounds + times) / 2, max(bounds + times) * 2
    right.line([lo, hi], [lo, hi], color=INK, width=1.3, label="median = bound")
    drawn = 0
    # Every colour of the panel in its legend: the kind of bound, and the flagged cases.
    for label, color, chosen, hollow in (
            ("compute-bound", BOUND_COLORS["compute"],
             [r for r in cases if r.status not in FLAGGED and r.bound_by == "compute"], False),
            ("memory-bound", BOUND_COLORS["memory"],
             [r for r in cases if r.status not in FLAGGED and r.bound_by == "memory"], False),
            ("bound unknown", BOUND_COLORS[""],
             [r for r in cases if r.status not in FLAGGED
              and r.bound_by not in ("compute", "memory")], False),
            ("suspect: faster than its bound", SUSPECT_COLOR,
             [r for r in cases if r.status == STATUS_SUSPECT], False),
            ("noisy (not stored)", NOISY_COLOR,
             [r for r in cases if r.status == STATUS_NOISY], True)):
        if chosen:
            # The worst: furthest from their bound, either way (below it: suspect).
            drawn += _scatter(
                right, [r.bound_us for r in chosen], [r.stats.median for r in chosen],
                color=color, hollow=hollow, radius=2.6 if hollow else 2.3,
                label=f"{label} ({len(chosen)})",
                titles=[f"{r.case_id}: median {r.stats.median:.4g} us, bound "
                        f"{r.bound_us:.4g} us ({r.bound_by or 'unknown'})" for r in chosen],
                rank=[max(r.stats.median / r.bound_us, r.bound_us / r.stats.median)
                      for r in chosen])
    right.log()
    right.xlabel = "bound (us): compute, memory or the latency floor, the largest"
    right.ylabel = "median (us)"
    right.title = "Achieved vs bound" + _drawn_note(drawn, len(cases))
    right.legend()
    return fig.svg()


def gap_distribution(outcome: WriteOutcome | None) -> str | None:
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


def replay_vs_model(outcome: WriteOutcome | None) -> str | None:
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
    drawn = 0
    for kind in sorted({g.operator for g in gaps}):
        chosen = [g for g in gaps if g.operator == kind]
        drawn += _scatter(ax, [g.profiling_us for g in chosen],
                          [g.microbench_us for g in chosen], radius=3.0,
                          color=ax.next_color(), label=f"{kind} ({len(chosen)})",
                          rank=[g.severity for g in chosen])
    ax.xlabel = "in-model device time (us, profiled)"
    ax.ylabel = "replay (us)"
    ax.title = f"Replay vs in-model ({len(gaps)} rows{_drawn_note(drawn, len(gaps))})"
    ax.legend()
    return fig.svg()


def regression_ratios(results: list[CaseResult]) -> str | None:
    items = [i for i in judged(results) if i.comparison.ratio]
    if not items:
        return None
    threshold = items[0].comparison.threshold
    fig = Figure(720, 385)
    ax = fig.axes[0]
    drawn = 0
    for verdict in (SAME, UNCERTAIN, FASTER, SLOWER):
        chosen = [i for i in items if i.comparison.verdict == verdict]
        if chosen:
            drawn += _scatter(ax, [i.comparison.ratio for i in chosen],
                              [_significance(i) for i in chosen], radius=2.5,
                              color=VERDICT_COLORS[verdict], label=f"{verdict} ({len(chosen)})",
                              rank=[i.comparison.severity for i in chosen])
    for x in (1 + threshold, 1 / (1 + threshold)):
        ax.vline(x, color=MUTED, width=1.1, dash=DASHED)
    ax.hline(-math.log10(ALPHA), color=MUTED, width=1.1, dash=DOTTED, label=f"p = {ALPHA:g}")
    worst = sorted((i for i in items if i.comparison.verdict == SLOWER),
                   key=lambda i: -i.comparison.severity)[:3]
    # The worst regressions are numbered at their point and named in the legend: case ids
    # are long, and several beside their points would cover each other and the points.
    for number, item in enumerate(worst, start=1):
        ax.annotate(str(number), item.comparison.ratio, _significance(item))
        ax.scatter([], [], color=VERDICT_COLORS[SLOWER], radius=2.5,
                   label=f"{number}: {item.case_id}")
    ax.log("x")
    ax.xlabel = "median / baseline median (log scale; dashed: the minimum effect)"
    ax.ylabel = "-log10 p (Mann-Whitney U)"
    ax.title = "Change against the baseline per case" + _drawn_note(drawn, len(items))
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


def draw_figures(results: list[CaseResult], outcome: WriteOutcome | None,
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
