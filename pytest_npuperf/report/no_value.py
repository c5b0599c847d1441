"""Cases that ended without a value the database may store (noisy, suspect, unattributed): not
PASSED but an outcome of their own, `no value`, counted and shown with their reason in every
report, so that a night on a busy host cannot look green while measuring nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from html import escape

from ..measure.result import NO_VALUE, CaseResult

EXAMPLES = 3
WHY = "not passed; --npuperf-no-value fail fails them"


def without_value(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.without_value]


def headline(results: list[CaseResult]) -> str:
    """`16 case(s) with no value (noisy 15, suspect 1; not passed; ...)`, or ""."""
    found = without_value(results)
    if not found:
        return ""
    by_status = Counter(r.status for r in found)
    statuses = ", ".join(f"{status} {n}" for status, n in by_status.most_common())
    return f"{len(found)} case(s) with {NO_VALUE} ({statuses}; {WHY})"


def examples(results: list[CaseResult], n: int = EXAMPLES) -> list[str]:
    """`case: status: why` of the first `n` cases without a value."""
    return [f"{r.case_id}: {r.status_text}" for r in without_value(results)[:n]]


def terminal_lines(results: list[CaseResult]) -> list[str]:
    line = headline(results)
    if not line:
        return []
    found = len(without_value(results))
    shown = examples(results)
    more = [f"  ... and {found - len(shown)} more (their reasons: the results table with "
            f"--npuperf-table all, the reports)"] if found > len(shown) else []
    return [line + ":", *(f"  {text}" for text in shown), *more]


def html_item(results: list[CaseResult]) -> str:
    """One `<li>` content for the pytest-html summary ("" when every case has a value)."""
    line = headline(results)
    if not line:
        return ""
    shown = "".join(f"<li><code>{escape(text)}</code></li>" for text in examples(results))
    return f"{escape(line[:1].upper() + line[1:])}<ul>{shown}</ul>"
