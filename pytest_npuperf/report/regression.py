"""The comparison with the baseline, as every report states it: counts per verdict, then the
regressions and improvements worst first, each with its ratio and p-value."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from html import escape

from ..history.compare import (
    FASTER,
    NEW,
    SAME,
    SLOWER,
    UNCERTAIN,
    VERDICTS,
    Comparison,
    run_shift_note,
)
from ..measure.result import CaseResult
from .tables import html_table, md_table

LISTED = 50


@dataclass(frozen=True)
class Judged:
    case_id: str
    kernel_type: str
    comparison: Comparison


def judged(results: list[CaseResult]) -> list[Judged]:
    """The cases compared with the baseline. The reports and figures of one run each ask for
    them (10^5 verdicts, rebuilt each time: seconds): the last run's are kept, reused while
    the same results hold the same verdicts."""
    verdicts = [r.regression for r in results]  # held: no id of theirs is reused meanwhile
    if _last and _last[0] is results and len(_last[1]) == len(verdicts) \
            and all(map(operator.is_, _last[1], verdicts)):
        return list(_last[2])
    found = [Judged(r.case_id, r.kernel_type, Comparison.from_dict(r.regression))
             for r in results if r.regression]
    _last[:] = [results, verdicts, found]
    return list(found)


_last: list = []  # [results, each one's verdict dict, what judged() made of them]


def counts(items: list[Judged]) -> dict[str, int]:
    found = dict.fromkeys(VERDICTS, 0)
    for item in items:
        found[item.comparison.verdict] = found.get(item.comparison.verdict, 0) + 1
    return found


def worst(items: list[Judged], verdict: str) -> list[Judged]:
    """Cases of `verdict`, the biggest change first."""
    return sorted((i for i in items if i.comparison.verdict == verdict),
                  key=lambda i: (-i.comparison.severity, i.case_id))


def run_shift(items: list[Judged]) -> str:
    return run_shift_note([i.comparison for i in items])


def counts_phrase(items: list[Judged]) -> str:
    found = counts(items)
    return ", ".join(f"{n} {verdict}" for verdict, n in found.items() if n) or "nothing compared"


def fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def row(item: Judged) -> list[object]:
    c = item.comparison
    return [item.case_id, f"{c.ratio:.3f}x" if c.ratio else "-", fmt_p(c.p_value),
            f"{c.base_median_us:.4g}" if c.base_median_us else "-",
            f"{c.new_median_us:.4g}" if c.new_median_us else "-", c.base_run or "-"]


HEADER = ["Case", "Ratio", "p-value", "Baseline median(us)", "Median(us)", "Baseline run"]
UNCERTAIN_HEADER = ["Case", "Ratio", "p-value", "Why"]
LISTS = ((SLOWER, "Regressions (SLOWER)"), (FASTER, "Improvements (FASTER)"))


def uncertain_row(item: Judged) -> list[object]:
    c = item.comparison
    return [item.case_id, f"{c.ratio:.3f}x" if c.ratio else "-", fmt_p(c.p_value), c.reason]


def markdown_section(results: list[CaseResult], baseline: str) -> str:
    """`## Regressions vs Baseline` (empty string without a baseline)."""
    items = judged(results)
    if not baseline and not items:
        return ""
    lines = ["## Regressions vs Baseline", "", f"- Baseline: {baseline or '-'}",
             f"- Verdicts: {counts_phrase(items)}",
             *([f"- Note: {shift}"] if (shift := run_shift(items)) else []),
             "- SLOWER/FASTER: the rank test (Mann-Whitney U) finds the samples differ and the "
             "median moved by at least the threshold; UNCERTAIN: too few or too spread "
             "samples, a flagged measurement, or not significant; NEW: not in the baseline."]
    for verdict, title in LISTS:
        found = worst(items, verdict)
        lines += ["", f"### {title}: {len(found)}", ""]
        if found:
            lines.append(md_table(HEADER, [row(i) for i in found[:LISTED]], right=(1, 2, 3, 4)))
            if len(found) > LISTED:
                lines.append(f"\n... and {len(found) - LISTED} more (see the run JSON).")
        else:
            lines.append("None")
    uncertain = worst(items, UNCERTAIN)
    if uncertain:
        lines += ["", f"### Uncertain: {len(uncertain)}", "",
                  md_table(UNCERTAIN_HEADER, [uncertain_row(i) for i in uncertain[:LISTED]],
                           right=(1, 2))]
    return "\n".join(lines)


def html_section(results: list[CaseResult], baseline: str) -> str:
    """The comparison as HTML (empty string without a baseline): the page's section, and the
    pytest-html summary's when it is given a baseline."""
    items = judged(results)
    if not baseline and not items:
        return ""
    parts = [f"<p>Baseline: {escape(baseline or '-')}. Verdicts: "
             f"{escape(counts_phrase(items))}.</p>"]
    if shift := run_shift(items):
        parts.append(f"<p>Note: {escape(shift)}.</p>")
    for verdict, title in LISTS:
        found = worst(items, verdict)
        parts.append(f'<h3 class="v-{verdict}">{escape(title)}: {len(found)}</h3>')
        if found:
            parts.append(html_table(HEADER, [row(i) for i in found[:LISTED]],
                                    numeric=(1, 2, 3, 4)))
    uncertain = worst(items, UNCERTAIN)
    if uncertain:
        parts.append(f"<h3>Uncertain: {len(uncertain)}</h3>")
        parts.append(html_table(UNCERTAIN_HEADER, [uncertain_row(i) for i in uncertain[:LISTED]],
                                numeric=(1, 2)))
    return "".join(parts)


def terminal_lines(results: list[CaseResult], baseline: str, shown: int = 5) -> list[str]:
    items = judged(results)
    if not baseline and not items:
        return []
    lines = [f"vs baseline {baseline or '-'}: {counts_phrase(items)}"]
    if shift := run_shift(items):
        lines.append(f"  note: {shift}")
    for verdict in (SLOWER, FASTER):
        for item in worst(items, verdict)[:shown]:
            c = item.comparison
            lines.append(f"  {verdict:<7} {c.ratio:7.3f}x  p={fmt_p(c.p_value):<8} {item.case_id}")
    return lines


__all__ = ["FASTER", "NEW", "SAME", "SLOWER", "UNCERTAIN", "Judged", "counts", "html_section",
           "judged", "markdown_section", "run_shift", "terminal_lines", "worst"]
