"""HTML fragments for pytest-html: extra result-table columns, a per-case detail block
(statistics and a sample plot), and a summary section. Plain strings, so this module needs
neither pytest nor pytest-html; the plugin places them in pytest-html's hooks.

Every value is escaped: case ids, shapes and error messages come from database files.
"""

from __future__ import annotations

from html import escape

from ..measure.result import CaseResult
from ..replay.outcome import SessionInfo, WriteOutcome
from . import model_gap
from . import summary as S
from .names import ReportPaths
from .plots import WIDTH, samples_svg
from .regression import html_section

WORST_GAPS = 10

# title -> (column key, sortable). pytest-html sorts a column by comparing the cell texts
# as strings, which would misorder numbers, so only the text columns are sortable.
COLUMNS: dict[str, tuple[str, bool]] = {
    "Median (us)": ("npuperf_median", False),
    "Mean (us)": ("npuperf_mean", False),
    "Samples": ("npuperf_samples", False),
    "Statistic": ("npuperf_statistic", True),
    "Precision": ("npuperf_precision", False),
    "Stop reason": ("npuperf_stop", True),
    "Outliers": ("npuperf_outliers", False),
    "Method": ("npuperf_method", True),
    "Status": ("npuperf_status", True),
}


def html_cells(result: CaseResult | None) -> dict[str, str]:
    """Title -> escaped content of that column's cell; empty for a test that is not a case."""
    stats = result.stats if result is not None else None
    measured = result is not None and stats is not None
    texts = {
        "Median (us)": S.fmt_us(stats.median) if stats else "",
        "Mean (us)": S.fmt_us(stats.mean) if stats else "",
        "Samples": str(stats.samples) if stats else "",
        "Statistic": result.statistic if measured else "",
        "Precision": S.fmt_pct(result.precision) if measured else "",
        "Stop reason": result.stop_reason if measured else "",
        "Outliers": str(stats.outliers) if stats else "",
        "Method": result.method if measured else "",
        "Status": result.status_text if result is not None else "",
    }
    return {title: escape(text) for title, text in texts.items()}


def html_header_cells() -> list[str]:
    """`<th>` cells for pytest_html_results_table_header, in html_row_cells() order."""
    cells = []
    for title, (key, sortable) in COLUMNS.items():
        attrs = f' class="sortable" data-column-type="{key}"' if sortable else ""
        cells.append(f"<th{attrs}>{escape(title)}</th>")
    return cells


def html_row_cells(result: CaseResult | None) -> list[str]:
    """`<td>` cells for pytest_html_results_table_row. The `col-<key>` class is what
    pytest-html reads to sort a column whose header carries data-column-type="<key>"."""
    contents = html_cells(result)
    return [f'<td class="col-{key}">{contents[title]}</td>'
            for title, (key, _sortable) in COLUMNS.items()]


def html_extra(result: CaseResult) -> str:
    """Detail block shown under a case's row: statistics table and the sample plot."""
    rows: list[tuple[str, str]] = [("status", result.status), ("kernel", result.kernel_type),
                                   ("file", result.file)]
    if result.row is not None:
        rows.append(("row", str(result.row)))
    if result.stats is not None:
        st = result.stats
        rows += [("method", result.method), ("samples", str(st.samples)),
                 ("warmup", str(result.warmup)),
                 (f"stored value: {result.statistic} (us)", S.fmt_us(result.value)),
                 ("precision (95 % CI half-width)", S.fmt_pct(result.precision)),
                 ("stop reason", result.stop_reason or "-"),
                 ("mean (us)", S.fmt_us(st.mean)),
                 ("median (us)", S.fmt_us(st.median)), ("std (us)", S.fmt_us(st.std)),
                 ("min (us)", S.fmt_us(st.min)), ("p90 (us)", S.fmt_us(st.p90)),
                 ("max (us)", S.fmt_us(st.max)), ("Tukey outliers", str(st.outliers))]
    if result.fallback:
        rows.append(("method fallback", result.fallback))
    if result.threads is not None:
        rows.append(("threads", str(result.threads)))
    if result.note:
        rows.append(("note", result.note))
    if result.bound_us is not None:
        rows.append(("physical bound (us)", S.fmt_us(result.bound_us)))
    tflops, gbps = S.achieved(result)
    if tflops is not None:
        rows.append(("achieved TFLOP/s", f"{tflops:.3f}"))
    if gbps is not None:
        rows.append(("achieved GB/s", f"{gbps:.3f}"))
    if result.device:
        rows.append(("device", result.device))
    rows.append(("time in calls / case wall", f"{S.fmt_s(result.time_in_calls_s)} / "
                                              f"{S.fmt_s(result.wall_s)}"))
    table = "".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in rows)
    parts = ['<div class="npuperf-case">',
             f'<table class="npuperf-stats">{table}</table>']
    if result.stats is not None and result.samples:
        # A fixed width: pytest-html's detail row would otherwise shrink the chart to a line.
        parts.append(f'<div class="npuperf-plot" style="width:{WIDTH}px;max-width:100%">'
                     f'{samples_svg(result.samples)}</div>')
    if result.error:
        parts.append(f'<p class="npuperf-error">{escape(result.error)}</p>')
    if result.detail:
        parts.append(f'<pre class="npuperf-detail">{escape(result.detail)}</pre>')
    parts.append("</div>")
    return "".join(parts)


def html_summary(outcome: WriteOutcome, results: list[CaseResult], session: SessionInfo,
                 paths: ReportPaths | None = None, *, figures: dict[str, str] | None = None,
                 baseline: str = "") -> str:
    """The section heading the pytest-html report (with `figures` and the comparison with
    `baseline`, when given: the standalone page shows those in sections of its own)."""
    counts = S.status_counts(results)
    duty = S.duty_line(results, session)
    spent = S.overhead_line(results, session)
    items = [
        f"Run <code>{escape(outcome.run_id)}</code> on {escape(S.device_line(session))}",
        escape(S.status_phrase(counts)),
        *([escape(duty[:1].upper() + duty[1:])] if duty else []),
        *([escape(spent[:1].upper() + spent[1:])] if spent else []),
        *(escape(f"Warning: {w}") for w in S.host_warnings(results, session)),
        f"Source database: <code>{escape(str(outcome.source))}</code>",
        ("Dry run: nothing written" if outcome.dry_run or outcome.target is None
         else f"Database written: <code>{escape(str(outcome.target))}</code>"),
    ]
    note = S.non_native_note(outcome)
    if note:
        items.append(escape(note[:1].upper() + note[1:]))
    if paths is not None:
        items.append("Reports: " + ", ".join(f"<code>{escape(str(p))}</code>"
                                             for p in paths.all()))
    parts = ['<div class="npuperf-summary">', "<h2>Operator performance</h2>",
             "<ul>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>", _gap_table(outcome),
             model_gap.html_section(outcome)]
    if baseline:
        parts.append(f"<h3>Against the baseline</h3>{html_section(results, baseline)}")
    for title, svg in (figures or {}).items():
        parts.append(f'<div class="npuperf-figure"><h3>{escape(title)}</h3>{svg}</div>')
    parts.append("</div>")
    return "".join(parts)


def _gap_table(outcome: WriteOutcome) -> str:
    hotspots = outcome.hotspots
    title = (f"<h3>Duration gap hotspots: {len(hotspots)} "
             f"({escape(S.GAP_THRESHOLD_TEXT)})</h3>")
    if not hotspots:
        return title + "<p>None</p>"
    header = "".join(f"<th>{escape(h)}</th>" for h in
                     ("Operator", "MicroBench(us)", "Profiling(us)", "MB/Profile", "Shape"))
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in (
            g.operator, S.fmt_us(g.microbench_us), S.fmt_us(g.profiling_us),
            S.fmt_ratio(g.ratio), g.shape)) + "</tr>"
        for g in hotspots[:WORST_GAPS])
    return f'{title}<table class="npuperf-gaps"><tr>{header}</tr>{rows}</table>'
