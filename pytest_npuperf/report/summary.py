"""Facts about a session that several reports state: counts, duty cycle, slowest cases.

Computed in one place so that the markdown, JSON, terminal and HTML reports never disagree.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from ..db.layout import device_of
from ..measure.outcome import GAP_HIGH, GAP_LOW, BackfillOutcome, SessionInfo
from ..measure.result import FAILING_STATUSES, STATUS_SUSPECT, STATUSES, CaseResult

PROBLEM_STATUSES = FAILING_STATUSES  # failed, error, timeout, crashed
GAP_THRESHOLD_TEXT = f"microbench/profiling not in [{GAP_LOW:.2f}x, {GAP_HIGH:.2f}x]"


def status_counts(results: Iterable[CaseResult]) -> dict[str, int]:
    """Every known status (zeros included, in STATUSES order), then any unknown ones."""
    counted = Counter(r.status for r in results)
    counts = {status: counted.pop(status, 0) for status in STATUSES}
    counts.update(sorted(counted.items()))
    return counts


def kernel_type_counts(results: Iterable[CaseResult]) -> dict[str, dict[str, int]]:
    """kernel type -> {"cases": n, <status>: n, ...} (non-zero statuses only)."""
    table: dict[str, Counter[str]] = {}
    for result in results:
        table.setdefault(result.kernel_type, Counter())[result.status] += 1
    return {kind: {"cases": sum(c.values()), **dict(sorted(c.items()))}
            for kind, c in sorted(table.items())}


def time_in_calls(results: Iterable[CaseResult]) -> float:
    return math.fsum(r.time_in_calls_s for r in results if finite(r.time_in_calls_s))


def duty_cycle(in_calls_s: float, session: SessionInfo) -> float | None:
    """Time inside measured kernel calls / session wall time; None when the wall time is
    unknown. With xdist workers the calls overlap, so the figure can exceed 1."""
    if not finite(session.wall_s) or session.wall_s <= 0:
        return None
    return in_calls_s / session.wall_s


def slowest(results: Iterable[CaseResult], n: int) -> list[CaseResult]:
    """The cases that took the most wall time: where the session's time went."""
    timed = [r for r in results if finite(r.wall_s) and r.wall_s > 0]
    return sorted(timed, key=lambda r: -r.wall_s)[:n]


def problems(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.status in PROBLEM_STATUSES]


def suspects(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.status == STATUS_SUSPECT]


def source_device(outcome: BackfillOutcome) -> str:
    return device_of(outcome.source) or str(outcome.source)


def non_native_note(outcome: BackfillOutcome) -> str | None:
    """Why the source database was left alone, when it belongs to another device."""
    if outcome.native or (outcome.target is None and not outcome.dry_run):
        return None  # native, or cases that came from no database (shape-grid points)
    where = ("dry run: nothing written" if outcome.dry_run
             else f"results written to {outcome.target}")
    return f"the source database belongs to {source_device(outcome)}; {where}"


def device_line(session: SessionInfo) -> str:
    """`NAME (kind 0, database device X; torch 2.9.0)` from Backend.describe()."""
    info = session.device or {}
    name = str(info.get("name") or info.get("kind") or "unknown device")
    details = []
    if info.get("kind"):
        details.append(f"{info['kind']} {info.get('index', 0)}")
    if info.get("database_device"):
        details.append(f"database device {info['database_device']}")
    stack = info.get("stack")
    if isinstance(stack, dict) and stack:
        details.append(", ".join(f"{k} {v}" for k, v in stack.items() if v))
    return f"{name} ({'; '.join(details)})" if details else name


def achieved(result: CaseResult) -> tuple[float | None, float | None]:
    """(TFLOP/s, GB/s) at the median duration, when the case was measured and has work."""
    if not result.measured or result.stats is None:
        return None, None
    median_s = result.stats.median * 1e-6
    if not finite(median_s) or median_s <= 0:
        return None, None
    tflops = result.flops / median_s / 1e12 if finite(result.flops) and result.flops > 0 else None
    gbps = result.bytes / median_s / 1e9 if finite(result.bytes) and result.bytes > 0 else None
    return tflops, gbps


def fmt_us(value: float | None) -> str:
    return "-" if value is None or not finite(value) else f"{value:.3f}"


def fmt_ratio(value: float) -> str:
    return f"{value:.2f}x"


def fmt_s(value: float | None) -> str:
    return "-" if value is None or not finite(value) else f"{value:.2f} s"


def status_phrase(counts: dict[str, int]) -> str:
    """`12 cases: 10 ok, 1 failed, 1 skipped` (zero counts left out)."""
    total = sum(counts.values())
    parts = [f"{n} {status}" for status, n in counts.items() if n]
    return f"{total} case{'s' if total != 1 else ''}" + (f": {', '.join(parts)}" if parts else "")


def finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
