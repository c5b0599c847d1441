"""Facts about a session that several reports state: counts, duty cycle, slowest cases.

Computed in one place so that the markdown, JSON, terminal and HTML reports never disagree.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterable

from ..db.layout import device_of
from ..db.measured_stack import MEASURED_STACK_FILE
from ..measure.overhead import breakdown
from ..measure.result import (
    FAILING_STATUSES,
    PREEMPTED_REASON,
    STATUS_NOISY,
    STATUS_SUSPECT,
    STATUSES,
    CaseResult,
)
from ..replay.outcome import GAP_HIGH, GAP_LOW, SessionInfo, WriteOutcome

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


DUTY_CYCLE_DEFINITION = ("time inside measured calls / (wall time of the pytest run, from "
                         "pytest's start (its interpreter's, not a shell's before an exec) to "
                         "the reports, x measuring processes)")


def _capacity_s(session: SessionInfo) -> float | None:
    """Process-seconds the command had for measuring: its wall time once per worker."""
    if not finite(session.wall_s) or session.wall_s <= 0:
        return None
    return session.wall_s * max(1, session.workers)


def duty_cycle(in_calls_s: float, session: SessionInfo) -> float | None:
    """The one duty cycle (DUTY_CYCLE_DEFINITION); None when the wall time is unknown. With
    N xdist workers the wall time counts N times, so 1.0 is every worker always measuring."""
    capacity = _capacity_s(session)
    return None if capacity is None else in_calls_s / capacity


def per_case_overhead(in_calls_s: float, session: SessionInfo, cases: int) -> float | None:
    """What each case cost beyond its measured calls: (wall x workers - in calls) / cases."""
    capacity = _capacity_s(session)
    if capacity is None or cases <= 0:
        return None
    return (capacity - in_calls_s) / cases


def session_calls_s(results: Iterable[CaseResult], session: SessionInfo) -> float:
    """Time inside the timed calls within the session's wall time (none for `npuperf backfill` of
    calls made earlier)."""
    return time_in_calls(results) if session.timed_here else 0.0


def overhead(results: list[CaseResult], session: SessionInfo) -> tuple[float, dict[str, float]] | None:
    """(seconds, per part) of the session's overhead (measure/overhead.py, the one
    definition); None when the wall time is unknown."""
    capacity = _capacity_s(session)
    if capacity is None:
        return None
    total = capacity - session_calls_s(results, session)
    case_parts: dict[str, float] = {}
    beyond = 0.0
    if session.timed_here:
        for result in results:
            for name, seconds in (result.overhead_s or {}).items():
                case_parts[name] = case_parts.get(name, 0.0) + seconds
            if finite(result.wall_s) and finite(result.time_in_calls_s):
                beyond += result.wall_s - result.time_in_calls_s
    return total, breakdown(total, case_parts, beyond, session.parts, session.workers)


def overhead_line(results: list[CaseResult], session: SessionInfo) -> str | None:
    """`overhead 5.08 s (67 ms per case): start-up 2.10 s, ...`: every report's the same."""
    found = overhead(results, session)
    if found is None:
        return None
    total, parts = found
    per_case = f" ({1e3 * total / len(results):.1f} ms per case)" if results else ""
    shown = ", ".join(f"{name} {fmt_s(seconds)}" for name, seconds in parts.items()
                      if abs(seconds) >= 0.005)
    return f"overhead {fmt_s(total)}{per_case}" + (f": {shown}" if shown else "")


def duty_line(results: list[CaseResult], session: SessionInfo) -> str | None:
    """The duty cycle sentence every report prints the same way (None where the session
    timed no calls itself)."""
    if not session.timed_here:
        return None
    in_calls = time_in_calls(results)
    duty = duty_cycle(in_calls, session)
    if duty is None:
        return None
    overhead = per_case_overhead(in_calls, session, len(results))
    workers = f" x {session.workers} workers" if session.workers > 1 else ""
    since = f" since {session.wall_from}" if session.wall_from else ""
    text = (f"duty cycle {duty:.2f}: {fmt_s(in_calls)} inside measured calls of "
            f"{fmt_s(session.wall_s)} wall time{since}{workers}")
    if overhead is not None:
        text += f"; overhead {1e3 * overhead:.0f} ms per case"
    return text


def preemption(results: list[CaseResult]) -> dict[str, int]:
    """Samples the host's other processes took CPU time from: in all, the cases that had
    any, those left without enough undisturbed ones (noisy), and those that kept them."""
    hit = [r for r in results if r.preempted]
    return {"samples": sum(r.preempted for r in hit), "cases": len(hit),
            "noisy": sum(1 for r in hit if r.status == STATUS_NOISY
                         and r.error.startswith(PREEMPTED_REASON)),
            "kept": sum(1 for r in hit if r.preempted_kept)}


def host_warnings(results: list[CaseResult], session: SessionInfo) -> list[str]:
    """A machine too busy to trust its timings, and cases whose samples say so."""
    lines = []
    cores, load = session.cores, session.load_at_start
    if cores and load is not None and load > cores:
        lines.append(f"machine oversubscribed at session start: 1-minute load {load:.1f} above "
                     f"the {cores} core(s) available; timings are not trustworthy")
    busy = sum(1 for r in results if r.note.startswith("machine oversubscribed"))
    if busy:
        lines.append(f"{busy} case(s) started while the machine was oversubscribed (see their "
                     f"status)")
    preempted = preemption(results)
    if preempted["samples"]:
        kept = "kept, counted (--npuperf-preempted keep)" if preempted["kept"] else "left out"
        lines.append(f"{preempted['samples']} sample(s) of {preempted['cases']} case(s) "
                     f"preempted: the host ran other processes during them ({kept}); "
                     f"{preempted['noisy']} case(s) without enough undisturbed samples")
    flagged = len(noisy(results))
    if flagged:
        lines.append(f"{flagged} case(s) noisy: samples inconsistent with a quiet machine, kept "
                     f"out of Average Duration(us)")
    fallbacks = sum(1 for r in results if r.fallback)
    if fallbacks:
        lines.append(f"{fallbacks} case(s) measured with another method than the session's "
                     f"(see MicroBench Method / Status)")
    return lines


def slowest(results: Iterable[CaseResult], n: int) -> list[CaseResult]:
    """The cases that took the most wall time: where the session's time went."""
    timed = [r for r in results if finite(r.wall_s) and r.wall_s > 0]
    return heapq.nlargest(n, timed, key=lambda r: r.wall_s)  # stable, as a sort: ties in order


def problems(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.status in PROBLEM_STATUSES]


def suspects(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.status == STATUS_SUSPECT]


def noisy(results: Iterable[CaseResult]) -> list[CaseResult]:
    return [r for r in results if r.status == STATUS_NOISY]


def source_device(outcome: WriteOutcome) -> str:
    return device_of(outcome.source) or str(outcome.source)


def non_native_note(outcome: WriteOutcome) -> str | None:
    """Why the source database was left alone: it belongs to another device, or it is the
    embedded one."""
    if outcome.native or (outcome.target is None and not outcome.dry_run):
        return None  # native, or cases that came from no database (shape-grid points)
    where = ("dry run: nothing written" if outcome.dry_run
             else f"results written to {outcome.target} (named after the source's serving "
                  f"stack, whose kernels the rows are; the stack that measured them is in "
                  f"{MEASURED_STACK_FILE} there)")
    if outcome.target is not None and device_of(outcome.target) == device_of(outcome.source):
        return f"the embedded database is package data, left as installed; {where}"
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


def fmt_pct(value: float | None) -> str:
    return "-" if value is None or not finite(value) else f"{100 * value:.2f} %"


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
