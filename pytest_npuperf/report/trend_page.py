"""The trend page (`npuperf trend`): every case's value over the recorded runs, on one
self-contained html file a nightly job can publish (inline SVG, no script, nothing fetched).

Per kernel type, per case, one chart: the value of each run on a line through the trusted
(ok) measurements; noisy and suspect measurements as rings off the line (they are never the
stored value); a run judged SLOWER than its baseline as a large red dot, FASTER as a green
one (on trusted values only), over the time each run started (matplotlib's date ticks: labels
as precise as their spacing needs, never two alike); a case no run gave a value is a sentence
saying so, not an empty chart. Hovering a point shows its run, time, git commit, software
stack, value, samples, status and verdict. Cases of a kernel type are listed regressions
first, then by how far their newest value moved, at most `max_cases` of them.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from html import escape

from ..history.records import CaseRecord, RunRecord
from ..history.views import commit_text, stack_text
from ..measure.units import fmt_duration
from .charts import available, figure, hover, log, missing_note, svg_figure
from .page import STYLE
from .tables import html_table

OK_COLOR, NOISY_COLOR, SUSPECT_COLOR = "#1f77b4", "#bf8700", "#8250df"
SLOWER_COLOR, FASTER_COLOR = "#d1242f", "#1a7f37"
MAX_TICKS = 6
DEFAULT_MAX_CASES = 60
SUMMARY_ROWS = 50


@dataclass
class CaseTrend:
    kind: str
    key: str
    kernel: str
    device: str  # a case's values on two devices are two trends, never one line
    points: list[CaseRecord]  # oldest first
    title: str = ""

    @property
    def newest(self) -> CaseRecord:
        return self.points[-1]

    @property
    def regressed(self) -> bool:
        return self.newest.verdict == "SLOWER"

    @property
    def change(self) -> float:
        """log of the newest trusted value over the one before it (0: unknown)."""
        values = [p.value_us for p in self.points if p.status == "ok" and p.value_us]
        return math.log(values[-1] / values[-2]) if len(values) > 1 else 0.0


def _hover(point: CaseRecord, run: RunRecord | None) -> str:
    lines = [f"run {point.run_id}", (run.started_iso if run else "")[:19],
             f"commit {commit_text(run) or 'unknown'}", stack_text(run) or "stack unknown",
             f"value {fmt_duration(point.value_us)} ({point.statistic} of "
             f"{point.samples_count} samples, min {fmt_duration(point.min_us)})",
             f"status {point.status}"]
    if point.verdict:
        ratio = f" {point.ratio:.3f}x" if point.ratio else ""
        lines.append(f"vs baseline: {point.verdict}{ratio}"
                     + (f" (baseline run {point.baseline_run})" if point.baseline_run else ""))
    return "\n".join(line for line in lines if line)


def _when(point: CaseRecord, runs: dict[str, RunRecord]) -> _dt.datetime | None:
    """When the point's run started, as its own clock read (the time the page lists)."""
    run = runs.get(point.run_id)
    if run is not None and run.started_iso:
        return _dt.datetime.fromisoformat(run.started_iso).replace(tzinfo=None)
    if point.run_started:
        return _dt.datetime.fromtimestamp(point.run_started)
    return None


def case_chart(trend: CaseTrend, order: dict[str, int], runs: dict[str, RunRecord]) -> str:
    """One case's values over the runs (x: when each run started, or its place among the
    runs shown when one has no time); a sentence instead when no run gave it a value."""
    if not any(p.value_us for p in trend.points):
        statuses = ", ".join(f"{status} {count}x" for status, count in sorted(
            Counter(p.status for p in trend.points).items()))
        return (f'<p class="no-value"><b>{escape(trend.title or trend.key)}</b>: no value to '
                f"draw: none of its {len(trend.points)} run(s) measured it ({escape(statuses)})."
                "</p>")
    return _case_chart(trend, order, runs) or ""


@svg_figure
def _case_chart(trend: CaseTrend, order: dict[str, int], runs: dict[str, RunRecord]):
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    fig, (ax,) = figure(560, 200)
    times = {p.run_id: _when(p, runs) for p in trend.points}
    dated = all(times.values())

    def x(p: CaseRecord):
        return times[p.run_id] if dated else order[p.run_id]

    groups: dict[str, list[CaseRecord]] = defaultdict(list)
    for p in trend.points:
        if p.value_us:
            groups[p.status if p.status in ("noisy", "suspect") else "ok"].append(p)
    values = [p.value_us for p in trend.points if p.value_us]
    if max(values) / min(values) > 20:
        log(ax, "y")
    ok = groups.get("ok", [])
    if len(ok) > 1:
        ax.plot([x(p) for p in ok], [p.value_us for p in ok], color=OK_COLOR, linewidth=1.4,
                gid="trusted")
    for status, color, label, hollow in (("ok", OK_COLOR, "ok", False),
                                         ("noisy", NOISY_COLOR, "noisy (off the line)", True),
                                         ("suspect", SUSPECT_COLOR, "suspect (off the line)", True)):
        chosen = groups.get(status, [])
        if chosen:
            paint = {"facecolors": "white", "edgecolors": color, "linewidths": 1.3} if hollow \
                else {"color": color}
            dots = ax.scatter([x(p) for p in chosen], [p.value_us for p in chosen], s=36,
                              zorder=3, label=f"{label} ({len(chosen)})", **paint)
            hover(fig, dots, [_hover(p, runs.get(p.run_id)) for p in chosen])
    for verdict, color in (("SLOWER", SLOWER_COLOR), ("FASTER", FASTER_COLOR)):
        # A verdict dot only on a trusted value: a noisy one is a ring, never a green dot.
        judged = [p for p in ok if p.verdict == verdict]
        if judged:
            dots = ax.scatter([x(p) for p in judged], [p.value_us for p in judged], s=110,
                              color=color, zorder=4,
                              label=f"{verdict} than its baseline ({len(judged)})")
            hover(fig, dots, [_hover(p, runs.get(p.run_id)) for p in judged])
    if dated:
        # Ticks at round times with labels as precise as their spacing needs: two runs in
        # one minute never share a label.
        locator = AutoDateLocator(minticks=3, maxticks=MAX_TICKS)
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
    else:
        shown = sorted(order, key=order.get)[::max(1, math.ceil(len(order) / MAX_TICKS))]
        ax.set_xticks([order[i] for i in shown], [i[:10] for i in shown])
    ax.set_ylabel(f"{trend.newest.statistic} (us)")
    ax.set_title(trend.title or trend.key)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return fig


def device_of(record: CaseRecord, runs: dict[str, RunRecord]) -> str:
    run = runs.get(record.run_id)
    return (run.device if run is not None and run.device else record.device) or "?"


def _trends(records: list[CaseRecord], runs: dict[str, RunRecord]
            ) -> dict[str, list[CaseTrend]]:
    by_case: dict[tuple[str, str, str], list[CaseRecord]] = defaultdict(list)
    for record in records:
        by_case[(record.kind, record.key, device_of(record, runs))].append(record)
    several = len({device for _, _, device in by_case}) > 1
    by_kernel: dict[str, list[CaseTrend]] = defaultdict(list)
    for (kind, key, device), points in by_case.items():
        points.sort(key=lambda p: (p.run_started or 0.0, p.run_id))
        by_kernel[points[0].kernel].append(CaseTrend(
            kind, key, points[0].kernel, device, points,
            title=f"{key} on {device}" if several else key))
    for trends in by_kernel.values():
        trends.sort(key=lambda t: (not t.regressed, -abs(t.change), t.key))
    return dict(sorted(by_kernel.items()))


def render_trend_page(records: list[CaseRecord], runs: dict[str, RunRecord], *, source: str,
                      filters: str = "", max_cases: int = DEFAULT_MAX_CASES,
                      now: _dt.datetime | None = None) -> str:
    """The page for `records` (CaseRecords of the runs in `runs`, any order)."""
    shown = sorted({r.run_id for r in records},
                   key=lambda i: (runs[i].started if i in runs else 0.0, i))
    order = {run_id: index for index, run_id in enumerate(shown, start=1)}
    by_kernel = _trends(records, runs)
    regressions = [t for trends in by_kernel.values() for t in trends if t.regressed]
    generated = (now or _dt.datetime.now()).isoformat(timespec="seconds")
    first, last = (runs.get(shown[0]), runs.get(shown[-1])) if shown else (None, None)
    devices = ", ".join(sorted({runs[i].device for i in shown if i in runs and runs[i].device}))
    facts = [f"History: <code>{escape(source)}</code>" + (f" ({escape(filters)})" if filters
                                                          else ""),
             f"{len(shown)} run(s)" + (f", {escape(first.started_iso[:19])} to "
                                       f"{escape(last.started_iso[:19])}"
                                       if first and last else ""),
             f"{sum(len(t) for t in by_kernel.values())} case(s) of {len(by_kernel)} kernel "
             f"type(s); devices: {escape(devices or '-')}",
             f"{len(regressions)} case(s) SLOWER than their baseline in their newest run",
             f"Generated {escape(generated)}. Hover a point for its run, commit, stack and "
             f"value; rings are noisy or suspect measurements, never stored as a value."]
    drawing = available()
    sections = ['<section id="summary"><h2>Summary</h2><ul>'
                + "".join(f"<li>{f}</li>" for f in facts) + "</ul>"
                + ("" if drawing else missing_note())]
    if regressions:
        rows = [[t.title or t.key, t.kernel, f"{t.newest.ratio:.3f}x" if t.newest.ratio else "-",
                 fmt_duration(t.newest.value_us), t.newest.run_id,
                 commit_text(runs.get(t.newest.run_id)) or "-"]
                for t in regressions[:SUMMARY_ROWS]]
        sections.append('<h3 class="v-SLOWER">Regressions in the newest runs</h3>'
                        + html_table(["Case", "Kernel", "Ratio", "Value", "Run", "Commit"],
                                     rows, numeric=(2, 3)))
    sections.append("</section>")
    nav = []
    for kernel, trends in by_kernel.items():
        anchor = "k-" + "".join(c if c.isalnum() else "-" for c in kernel)
        nav.append(f'<a href="#{anchor}">{escape(kernel)} ({len(trends)})</a>')
        bad = sum(1 for t in trends if t.regressed)
        charts = "".join(f'<div class="figure{" regressed" if t.regressed else ""}">'
                         f"{case_chart(t, order, runs)}</div>"
                         for t in trends[:max_cases]) if drawing else ""
        more = (f"<p>The first {max_cases} of {len(trends)} cases (regressions and the largest "
                f"changes first): npuperf trend --kernel {escape(kernel)} --max-cases N shows "
                f"more.</p>" if len(trends) > max_cases else "")
        sections.append(f'<section id="{anchor}"><h2>{escape(kernel)}: {len(trends)} case(s)'
                        + (f', <span class="v-SLOWER">{bad} SLOWER</span>' if bad else "")
                        + f"</h2>{charts}{more}</section>")
    style = STYLE + (".figure{display:inline-block;width:560px;max-width:100%;margin:4px;"
                     "vertical-align:top}.figure.regressed{outline:2px solid #d1242f}"
                     "nav{line-height:1.8}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>npuperf trend</title>"
            f"<style>{style}</style></head><body><main><h1>npuperf trend</h1>"
            f"<nav>{''.join(nav)}</nav>{''.join(sections)}</main></body></html>\n")
