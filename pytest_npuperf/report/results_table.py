"""The results table at the end of a session (`--npuperf-table all|N|none`): per case its
stored value, minimum, precision (the 95 % CI half-width of the value), samples, status, the
share of its roofline bound it reached, and its verdict against the baseline when there is
one, as pytest-benchmark users get a table after every run.

By default the N worst and N best cases, ranked by what the run can judge: the change against
the baseline (ratio of medians) when cases were compared, else the share of the physical bound
reached (roofline), else the value itself. First among the worst come the cases that failed
(their own fault, or SLOWER against the baseline, the biggest change first), then those that
ended without a trusted value (noisy, suspect: their status says why); skipped cases are
counted, not listed.
"""

from __future__ import annotations

from collections.abc import Callable

from ..measure.result import FAILING_STATUSES, STATUS_SKIPPED, CaseResult
from ..measure.units import fmt_duration

DEFAULT_ROWS = 5
HEADER = ("case", "value", "min", "±CI", "samples", "status", "of bound", "vs baseline")


def _ratio(r: CaseResult) -> float | None:
    ratio = (r.regression or {}).get("ratio")
    return float(ratio) if ratio else None


def _share(r: CaseResult) -> float | None:
    """The share of its roofline bound the case reached (1.0: at the bound)."""
    value = r.value
    return r.bound_us / value if r.bound_us and value else None


def ranking(results: list[CaseResult]) -> tuple[str, Callable[[CaseResult], float]]:
    """(what the ranking is by, badness of a measured case: larger is worse)."""
    if any(_ratio(r) for r in results):
        return "change against the baseline", lambda r: _ratio(r) or 1.0
    if any(_share(r) for r in results):
        return "share of the roofline bound reached", lambda r: -(_share(r) or 0.0)
    return "value", lambda r: r.value or 0.0


def _row(r: CaseResult) -> tuple[str, ...]:
    stats = r.stats
    verdict = (r.regression or {}).get("verdict", "")
    ratio = _ratio(r)
    share = _share(r)
    return (r.case_id, fmt_duration(r.value) if stats else "-",
            fmt_duration(stats.min) if stats else "-",
            f"±{100 * r.precision:.1f} %" if r.precision is not None and stats else "-",
            str(stats.samples) if stats else "-", r.status,
            (f"{100 * share:.0f} %" if share >= 0.1 else f"{100 * share:.2g} %")
            if share is not None else "-",
            f"{verdict} {ratio:.3f}x" if verdict and ratio else verdict or "-")


def _lines(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    left = (0, 5, 7)
    return ["  ".join(cell.ljust(w) if i in left else cell.rjust(w)
                      for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
            for row in [HEADER, *rows]]


def _slower(r: CaseResult) -> bool:
    return (r.regression or {}).get("verdict") == "SLOWER"


def results_table(results: list[CaseResult], limit: int | None = DEFAULT_ROWS) -> list[str]:
    """The table's lines ([] for `none` or no case)."""
    if limit == 0 or not results:
        return []
    failed = [r for r in results if r.status in FAILING_STATUSES]
    slower = sorted((r for r in results if _slower(r) and r.status not in FAILING_STATUSES),
                    key=lambda r: (-(_ratio(r) or 1.0), r.case_id))
    no_value = [r for r in results if r.without_value and not _slower(r)]
    skipped = sum(1 for r in results if r.status == STATUS_SKIPPED)
    measured = [r for r in results if r.value is not None and r.status not in FAILING_STATUSES
                and not r.without_value and not _slower(r)]
    by, badness = ranking(measured)
    ordered = sorted(measured, key=lambda r: (-badness(r), r.case_id))
    first = failed + slower + no_value
    listed = first + ordered
    if first:
        by = f"failed and SLOWER first, then no value, then {by}"
    if limit is None or len(listed) <= 2 * limit + 1:
        title = f"{len(listed)} case(s), worst first: {by}"
        rows, more = [_row(r) for r in listed], 0
    else:
        worst = listed[:limit]
        best = ordered[-limit:] if len(ordered) > limit else []
        best = [r for r in best if r not in worst]
        title = (f"the {len(worst)} worst and the {len(best)} best of {len(listed)} case(s): "
                 f"{by}")
        more = len(listed) - len(worst) - len(best)
        rows = [_row(r) for r in worst] + [("...",) + ("",) * (len(HEADER) - 1)] + \
            [_row(r) for r in best]
    lines = [f"{title} (--npuperf-table all|N|none):", *_lines(rows)]
    if more:
        lines[-len(best) - 1] = f"... {more} more"
    if skipped:
        lines.append(f"{skipped} case(s) skipped (no replay for their kernel type here)")
    return lines
