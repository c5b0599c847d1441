"""The run as pictures, drawn with matplotlib (report/charts.py) as inline SVG in the html
reports, one self-contained file. Drawn only when a report is written.

- latency vs M per (N, K) for the GEMM families (MatMulV2/V3/Common: the case id carries M, K, N);
- the roofline: achieved TFLOP/s against arithmetic intensity under the device's ceilings,
  and each case's median against its bound;
- the duration-gap distribution (replay / profiling);
- the regression ratios against the baseline (ratio against significance);
- collective bandwidth against message size per op (the written database's hcom_*.csv).

Each function returns None when the run has nothing to show for it (or matplotlib is missing).
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from ..history.compare import ALPHA, DEFAULT_THRESHOLD, FASTER, NEW, SAME, SLOWER, UNCERTAIN
from ..kernels.catalog import same_call_types
from ..measure.result import STATUS_NOISY, STATUS_SUSPECT, CaseResult
from ..replay.outcome import GAP_HIGH, GAP_LOW, WriteOutcome
from .charts import DASHED, DOTTED, INK, MUTED, PALETTE, figure, hover, log, svg_figure
from .regression import Judged, judged

MAX_SERIES = 12  # lines in one plot before it stops being readable
# Points a scatter draws one by one (each with its hover text): a run of 10^5 cases draws its
# worst this way and all of them as a density beneath (`_scatter`).
MAX_DRAWN = 1_000
_GEMM_ID = re.compile(r"^(?P<type>[A-Za-z0-9_]+)-(?P<m>\d+)x(?P<k>\d+)x(?P<n>\d+)-(?P<dtype>[A-Z0-9_]+)-")
VERDICT_COLORS = {SLOWER: "#d1242f", FASTER: "#1a7f37", SAME: "#57606a", UNCERTAIN: "#bf8700",
                  NEW: "#8250df"}
BOUND_COLORS = {"compute": "#0969da", "memory": "#bc4c00", "latency": "#8250df", "": "#57606a"}
SUSPECT_COLOR, NOISY_COLOR = "#d1242f", "#bf8700"
FLAGGED_COLOR = "#e16f24"  # the regression figure's noisy or suspect cases: no verdict's colour
FLAGGED = (STATUS_NOISY, STATUS_SUSPECT)  # measured, never the row's stored value
DENSITY_CELLS = 30  # hexagons across a density: at most ~1,000 of them, whatever the run


def _drawable(ax, x: float, y: float) -> bool:
    """Whether (x, y) can stand on `ax`'s scales (finite; positive on a log axis)."""
    return all(math.isfinite(v) and (v > 0 or scale != "log")
               for v, scale in ((x, ax.get_xscale()), (y, ax.get_yscale())))


def _scatter(ax, xs: list[float], ys: list[float], *, color: str, label: str,
             titles: list[str] | Callable[[int], str] | None = None,
             rank: list[float] | None = None,
             hollow: bool = False, size: float = 4.6, marker: str = "o") -> int:
    """A scatter of at most MAX_DRAWN points (set the axes' scales first): of a larger one
    the MAX_DRAWN that rank highest (`rank`: how far from agreement, the worst first; by
    default those first given) are drawn one by one, with their hover text, and all of them
    as a density beneath: the figure's size is bounded, a large run's outliers still stand
    out, and every case stays in the run JSON and the tables. `titles`: each point's hover
    text, or what makes the text of point i (only the drawn ones' are made: 10^5 of them
    cost a second). Returns how many points were drawn one by one."""
    kept = [i for i, (x, y) in enumerate(zip(xs, ys)) if _drawable(ax, x, y)]
    if len(kept) > MAX_DRAWN:
        _density(ax, [xs[i] for i in kept], [ys[i] for i in kept], color)
        kept = sorted(kept, key=lambda i: -rank[i])[:MAX_DRAWN] if rank is not None \
            else kept[:MAX_DRAWN]
    paint = {"facecolors": "white", "edgecolors": color, "linewidths": 1.2} if hollow \
        else {"color": color, "edgecolors": "none"}
    points = ax.scatter([xs[i] for i in kept], [ys[i] for i in kept], s=size ** 2,
                        marker=marker, label=label or None, zorder=3, **paint)
    title = titles.__getitem__ if isinstance(titles, list) else titles
    hover(ax.figure, points, [title(i) for i in kept] if title else ())
    return len(kept)


def _density(ax, xs: list[float], ys: list[float], color: str) -> None:
    """All the points as hexagons, darker where more fall (log of the count)."""
    from matplotlib.colors import LinearSegmentedColormap

    shades = LinearSegmentedColormap.from_list("density", [color + "26", color + "e6"])
    ax.hexbin(xs, ys, gridsize=DENSITY_CELLS, bins="log", mincnt=1, cmap=shades,
              linewidths=0, xscale=ax.get_xscale(), yscale=ax.get_yscale(), zorder=1,
              gid="density")


def _drawn_note(drawn: int, total: int) -> str:
    """What a title says of a large run's scatter (empty when every point was drawn)."""
    return "" if drawn >= total else (f"; the {drawn:,} farthest of {total:,} drawn one by "
                                      f"one, all as density")


def _measured(results: list[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.measured and r.stats is not None and r.stats.median > 0]


def _legend_outside(ax, columns: int = 1) -> None:
    """The legend right of the panel: never over the data, however many series."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, ncols=columns)


@svg_figure
def gemm_latency(results: list[CaseResult]):
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
    fig, (ax,) = figure(760 if len(shown) <= 6 else 900, 400)
    log(ax, "x", base=2)
    log(ax, "y")
    flagged_any = False
    for index, ((n, k, dtype), points) in enumerate(shown):
        points.sort(key=lambda p: p[:2])
        color = PALETTE[index]
        # Only trusted measurements make a line: a noisy or suspect one (never stored as the
        # row's value) is a ring of the series' colour, off the line.
        trusted = [p for p in points if p[2].status not in FLAGGED]
        flagged = [p for p in points if p[2].status in FLAGGED]
        ax.plot([p[0] for p in trusted], [p[1] for p in trusted], color=color, marker="o",
                markersize=4, label=f"N={n} K={k} {dtype}", gid=f"series-{index}")
        if flagged:
            flagged_any = True
            _scatter(ax, [p[0] for p in flagged], [p[1] for p in flagged], color=color,
                     label="", size=6, hollow=True,
                     titles=[f"{p[2].case_id}: {p[2].status_text}" for p in flagged])
    if flagged_any:
        ax.scatter([], [], s=36, facecolors="white", edgecolors=MUTED,
                   label="ring: noisy or suspect, off the line")
    ax.set_xlabel("M (rows)")
    ax.set_ylabel("median latency (us)")
    more = f" (the {MAX_SERIES} largest of {len(series)} (N, K) series)" \
        if len(series) > MAX_SERIES else ""
    ax.set_title(f"GEMM latency vs M per (N, K){more}")
    _legend_outside(ax, columns=2 if len(shown) > 6 else 1)
    return fig


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


@svg_figure
def roofline(results: list[CaseResult]):
    cases = [r for r in _measured(results) if r.bound_us]
    if not cases:
        return None
    peak, bandwidths = _ceilings(cases)
    fig, (left, right) = figure(1000, 440, columns=2)
    for ax in (left, right):
        log(ax)
    with_flops = [r for r in cases if r.flops and r.bytes and r.achieved_tflops]
    if with_flops and peak:
        intensity = [r.flops / r.bytes for r in with_flops]
        lo, hi = min(intensity) / 4, max(intensity) * 4
        xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
        for index, (name, bw, note) in enumerate(ceilings_in_order(bandwidths)):
            left.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], color=PALETTE[(index + 4) % len(PALETTE)],
                      linewidth=1.2, linestyle=DOTTED if note else DASHED,
                      label=f"{name} {bw / 1e9:.4g} GB/s{note}")
        left.axhline(peak / 1e12, color=INK, linewidth=1.2,
                     label=f"peak {peak / 1e12:.4g} TFLOP/s")
        for bound_by in ("compute", "memory", "latency"):
            chosen = [(x, r) for x, r in zip(intensity, with_flops) if r.bound_by == bound_by]
            if chosen:
                # The worst: those furthest below the ceiling they are bound by.
                _scatter(left, [x for x, _ in chosen], [r.achieved_tflops for _, r in chosen],
                         color=BOUND_COLORS[bound_by], label=f"{bound_by}-bound",
                         rank=[r.stats.median / r.bound_us for _, r in chosen])
        left.legend(loc="lower right")
    left.set_xlabel("arithmetic intensity (FLOP/byte)")
    left.set_ylabel("achieved TFLOP/s (at the median)")
    left.set_title("Roofline")
    times = [r.stats.median for r in cases]
    bounds = [r.bound_us for r in cases]
    lo, hi = min(bounds + times) / 2, max(bounds + times) * 2
    right.plot([lo, hi], [lo, hi], color=INK, linewidth=1.2, label="median = bound")
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
                color=color, hollow=hollow, size=5.2 if hollow else 4.6,
                label=f"{label} ({len(chosen)})",
                titles=lambda i, chosen=chosen: (
                    f"{chosen[i].case_id}: median {chosen[i].stats.median:.4g} us, bound "
                    f"{chosen[i].bound_us:.4g} us ({chosen[i].bound_by or 'unknown'})"),
                rank=[max(r.stats.median / r.bound_us, r.bound_us / r.stats.median)
                      for r in chosen])
    right.set_xlabel("bound (us): compute, memory or the latency floor, the largest")
    right.set_ylabel("median (us)")
    right.set_title("Achieved vs bound" + _drawn_note(drawn, len(cases)))
    right.legend(loc="upper left")
    return fig


@svg_figure
def gap_distribution(outcome: WriteOutcome | None):
    if outcome is None or not outcome.gaps:
        return None
    ratios = [g.ratio for g in outcome.gaps if g.ratio > 0]
    if not ratios:
        return None
    fig, (ax,) = figure(720, 345)
    ax.set_xscale("log", base=2)
    ax.axvspan(GAP_LOW, GAP_HIGH, color="#1a7f37", alpha=0.12, linewidth=0,
               label=f"agreement band [{GAP_LOW:g}x, {GAP_HIGH:g}x]")
    lo, hi = min(ratios), max(ratios)
    if hi == lo:
        lo, hi = lo / 1.5, hi * 1.5
    bins = min(40, max(8, len(ratios) // 3))
    edges = [lo * (hi / lo) ** (i / bins) for i in range(bins + 1)]
    ax.hist(ratios, bins=edges, color="#0969da", alpha=0.8, gid="bars")
    ax.set_xlim(2.0 ** (math.floor(math.log2(lo)) - 1), 2.0 ** (math.ceil(math.log2(hi)) + 1))
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    ax.xaxis.set_minor_locator(LogLocator(base=2, subs=()))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    hot = sum(1 for g in outcome.gaps if g.hotspot)
    ax.set_xlabel("MicroBench / Profiling (log scale)")
    ax.set_ylabel("rows")
    ax.set_title(f"Duration gap: replay vs profiling ({len(ratios)} rows, {hot} hotspots)")
    ax.legend(loc="upper right")
    return fig


@svg_figure
def replay_vs_model(outcome: WriteOutcome | None):
    """Each compared row: its in-model time (x) and its replay (y), log-log, on the y = x line
    of perfect agreement and the [0.8x, 1.2x] band; one colour per kernel type."""
    gaps = [g for g in outcome.gaps if g.profiling_us > 0 and g.microbench_us > 0] \
        if outcome is not None else []
    if not gaps:
        return None
    fig, (ax,) = figure(760, 420)
    log(ax)
    low = min(min(g.profiling_us, g.microbench_us) for g in gaps) / 1.5
    high = max(max(g.profiling_us, g.microbench_us) for g in gaps) * 1.5
    ax.plot([low, high], [low, high], color=INK, linewidth=1.2, label="replay = in-model")
    for factor in (GAP_LOW, GAP_HIGH):
        ax.plot([low, high], [low * factor, high * factor], color=MUTED, linewidth=1.0,
                linestyle=DOTTED, label=f"{GAP_LOW:g}x and {GAP_HIGH:g}x"
                if factor == GAP_LOW else None)
    drawn = 0
    for index, kind in enumerate(sorted({g.operator for g in gaps})):
        chosen = [g for g in gaps if g.operator == kind]
        drawn += _scatter(ax, [g.profiling_us for g in chosen],
                          [g.microbench_us for g in chosen], size=5.5,
                          color=PALETTE[index % len(PALETTE)], label=f"{kind} ({len(chosen)})",
                          rank=[g.severity for g in chosen],
                          titles=[f"{g.operator} {g.shape}: replay {g.microbench_us:.4g} us, "
                                  f"in-model {g.profiling_us:.4g} us" for g in chosen])
    ax.set_xlabel("in-model device time (us, profiled)")
    ax.set_ylabel("replay (us)")
    ax.set_title(f"Replay vs in-model ({len(gaps)} rows{_drawn_note(drawn, len(gaps))})")
    _legend_outside(ax)
    return fig


@svg_figure
def regression_ratios(results: list[CaseResult], min_effect: float = DEFAULT_THRESHOLD):
    """Each compared case's ratio against its significance, coloured by verdict, in the band
    of the configured minimum effect (`min_effect`; a case's own may be wider, widened by
    its baseline's run-to-run spread: its verdict says so). Noisy and suspect cases (no
    stored value: their verdict is UNCERTAIN) are rings of their own colour."""
    flagged_ids = {r.case_id: r.status for r in results if r.status in FLAGGED}
    items = [i for i in judged(results) if i.comparison.ratio]
    if not items:
        return None
    fig, (ax,) = figure(860, 400)
    log(ax, "x")
    ax.axvspan(1 / (1 + min_effect), 1 + min_effect, color=MUTED, alpha=0.15, linewidth=0,
               label=f"minimum effect \u00b1{100 * min_effect:g} %", gid="min-effect")
    drawn = 0
    for verdict in (SAME, UNCERTAIN, FASTER, SLOWER, "flagged"):
        if verdict == "flagged":
            chosen = [i for i in items if i.case_id in flagged_ids]
            color, label = FLAGGED_COLOR, "noisy or suspect: no stored value"
        else:
            chosen = [i for i in items if i.comparison.verdict == verdict
                      and i.case_id not in flagged_ids]
            color, label = VERDICT_COLORS[verdict], verdict
        if chosen:
            drawn += _scatter(ax, [i.comparison.ratio for i in chosen],
                              [_significance(i) for i in chosen], size=5,
                              color=color, label=f"{label} ({len(chosen)})",
                              hollow=verdict == "flagged",
                              marker="D" if verdict == "flagged" else "o",
                              rank=[i.comparison.severity for i in chosen],
                              titles=lambda j, chosen=chosen: (
                                  f"{chosen[j].case_id}: {flagged_ids.get(chosen[j].case_id, '')} "
                                  f"{chosen[j].comparison.describe()}".replace(":  ", ": ")))
    ax.axhline(-math.log10(ALPHA), color=MUTED, linewidth=1.1, linestyle=DOTTED,
               label=f"p = {ALPHA:g}")
    worst = sorted((i for i in items if i.comparison.verdict == SLOWER
                    and i.case_id not in flagged_ids),
                   key=lambda i: -i.comparison.severity)[:3]
    # The worst regressions are numbered at their point and named in the legend: case ids
    # are long, and several beside their points would cover each other and the points.
    for number, item in enumerate(worst, start=1):
        ax.annotate(str(number), (item.comparison.ratio, _significance(item)),
                    xytext=(4, 3), textcoords="offset points", fontsize=8, gid=f"note-{number}")
        ax.scatter([], [], s=25, color=VERDICT_COLORS[SLOWER],
                   label=f"{number}: {item.case_id} ({item.comparison.ratio:.3f}x)")
    ax.set_xlabel("median / baseline median (log scale; shaded: the minimum effect)")
    ax.set_ylabel("-log10 p (Mann-Whitney U)")
    ax.set_title("Change against the baseline per case" + _drawn_note(drawn, len(items)))
    _legend_outside(ax)
    return fig


def _significance(item: Judged) -> float:
    return -math.log10(max(item.comparison.p_value or 1.0, 1e-300))


def _float(text: str | None) -> float | None:
    try:
        value = float(text) if text not in (None, "") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) and value > 0 else None


def read_collective_tables(hccl_dir: Path | None) -> dict[str, list[dict[str, str]]]:
    """op -> rows of every `hcom_<op>_.csv` under `hccl_dir` (docs/format.md §7)."""
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


@svg_figure
def collective_bandwidth(hccl_dir: Path | None):
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
    fig, axes = figure(520 * columns, 330 * rows_count + 25, rows_count, columns,
                       title="Collective bandwidth vs message size")
    for ax, (op, series) in zip(axes, sorted(plotted.items())):
        log(ax, "x", base=2)
        for index, ((ranks, dtype, tier), points) in enumerate(sorted(series.items())[:MAX_SERIES]):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=4,
                    color=PALETTE[index], label=f"{ranks} ranks {dtype} tier {tier}",
                    gid=f"series-{op}-{index}")
        ax.set_title(op)
        ax.set_xlabel("message bytes per rank")
        ax.set_ylabel(f"{' / '.join(sorted(kinds))} bandwidth (GB/s)")
        ax.legend(loc="best")
    for ax in axes[len(plotted):]:
        ax.set_visible(False)
    return fig


def draw_figures(results: list[CaseResult], outcome: WriteOutcome | None,
                 hccl_dir: Path | None = None, *, min_effect: float = DEFAULT_THRESHOLD
                 ) -> dict[str, str]:
    """Title -> inline SVG, for each figure this run has data for (none without
    matplotlib: the pages say so, charts.missing_note)."""
    figures = {
        "GEMM latency vs M": gemm_latency(results),
        "Roofline": roofline(results),
        "Duration gap": gap_distribution(outcome),
        "Replay vs in-model": replay_vs_model(outcome),
        "Regressions vs baseline": regression_ratios(results, min_effect),
        "Collective bandwidth": collective_bandwidth(hccl_dir),
    }
    return {title: svg for title, svg in figures.items() if svg}
