"""`report_<stamp>.html`: the run on one self-contained page (no script, no external file),
written with every run, whether or not pytest-html is installed.

Summary, figures (inline SVG from report/figures.py), regressions and improvements against
the baseline worst first, duration-gap hotspots, then every case with its statistics and
roofline figures. Every value from a database or a case is escaped.
"""

from __future__ import annotations

from html import escape

from ..measure.result import CaseResult
from ..replay.outcome import SessionInfo, WriteOutcome
from . import summary as S
from .html import html_summary
from .regression import html_section
from .tables import html_table

CASE_ROWS = 5000

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#24292f;
background:#fff}
main{max-width:1200px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:1.5em;margin:.4em 0}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid
#d0d7de;padding-bottom:.2em}h3{font-size:1em}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #d0d7de;padding:3px 6px;text-align:left;vertical-align:top;
overflow-wrap:anywhere}td:nth-child(2){min-width:12em;max-width:36em}
th{background:#f6f8fa}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font-size:.9em}.figure{margin:1em 0}.figure svg{max-width:100%;height:auto}
.v-SLOWER{color:#d1242f;font-weight:600}.v-FASTER{color:#1a7f37;font-weight:600}
.s-failed,.s-error,.s-timeout,.s-crashed{color:#d1242f}.s-suspect,.s-noisy{color:#bf8700}
nav a{margin-right:1em}
"""


def _figures(figures: dict[str, str]) -> str:
    if not figures:
        return "<p>No figure: nothing measured that one could show.</p>"
    return "".join(f'<div class="figure" role="figure" aria-label="{escape(title, quote=True)}">'
                    f"<h3>{escape(title)}</h3>{svg}</div>" for title, svg in figures.items())


def _pct(value: float | None) -> str | None:
    return None if value is None else f"{100 * value:.1f} %"


def _num(value: float | None, digits: int = 4) -> str | None:
    return None if value is None or not S.finite(value) else f"{value:.{digits}g}"


def cases_html(results: list[CaseResult]) -> str:
    ordered = sorted(results, key=lambda r: (r.kernel_type, r.case_id))
    header = ["Case", "Status", "Median(us)", "Min(us)", "Samples", "Bound(us)", "Bound by",
              "Memory", "TFLOP/s", "GB/s", "MFU", "MBU", "vs baseline"]
    rows = []
    for r in ordered[:CASE_ROWS]:
        st = r.stats
        verdict = (r.regression or {}).get("verdict", "")
        ratio = (r.regression or {}).get("ratio")
        rows.append([r.case_id, r.status_text, _num(st.median if st else None),
                     _num(st.min if st else None), st.samples if st else None, _num(r.bound_us),
                     r.bound_by, r.memory_level, _num(r.achieved_tflops), _num(r.achieved_gbps),
                     _pct(r.mfu), _pct(r.mbu),
                     f"{verdict} {ratio:.3f}x" if verdict and ratio else verdict])
    table = html_table(header, rows, numeric=(2, 3, 4, 5, 8, 9, 10, 11))
    if len(ordered) > CASE_ROWS:
        table += f"<p>The first {CASE_ROWS} of {len(ordered)} cases; the run JSON has all.</p>"
    return table


def render_page(outcome: WriteOutcome, results: list[CaseResult], session: SessionInfo, *,
                figures: dict[str, str] | None = None, baseline: str = "",
                history: str = "") -> str:
    title = f"npuperf run {outcome.run_id}"
    sections = [("summary", "Summary", html_summary(outcome, results, session)
                 + (f"<p>History: {escape(history)}</p>" if history else "")),
                ("figures", "Figures", _figures(figures or {}))]
    regression = html_section(results, baseline)
    if regression:
        sections.append(("baseline", "Against the baseline", regression))
    sections.append(("cases", f"Cases ({len(results)})", cases_html(results)))
    nav = "".join(f'<a href="#{key}">{escape(name)}</a>' for key, name, _ in sections)
    body = "".join(f'<section id="{key}"><h2>{escape(name)}</h2>{content}</section>'
                   for key, name, content in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head><body><main>"
            f"<h1>{escape(title)}</h1><nav>{nav}</nav>{body}</main></body></html>\n")
