"""What `npuperf history` and `npuperf compare` print."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from ..db.errors import NpuperfError
from .baseline import Baseline, RunBaseline, resolve_baseline, resolve_run
from .compare import (
    FASTER,
    SLOWER,
    UNCERTAIN,
    VERDICTS,
    Comparison,
    compare_samples,
    run_shift_note,
)
from .records import CaseRecord, RunRecord
from .store import HistoryStore

TREND_COLUMNS = ("kind", "case", "kernel", "signature", "run_id", "started", "git_commit",
                 "device", "status", "method", "statistic", "value_us", "median_us", "mean_us",
                 "min_us", "std_us", "samples", "verdict", "ratio", "p_value")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


class NoMatch(NpuperfError):
    """Nothing in the history matches: a fact about the data (exit status 1)."""

    exit_code = 1


def trend(store: HistoryStore, *, kernel: str | None, signature: str | None, last: int,
          device: str | None = None) -> tuple[list[CaseRecord], dict[str, RunRecord]]:
    records = store.trend(kernel=kernel, signature=signature, device=device, last=last)
    if not records:
        what = ", ".join(f"{k} {v!r}" for k, v in (("kernel", kernel), ("signature", signature),
                                                   ("device", device)) if v) or "any case"
        raise NoMatch(f"{store.path}: no measurement of {what} in this history")
    runs = {run.run_id: run for run in store.runs()}
    return records, runs


def trend_csv(records: list[CaseRecord], runs: dict[str, RunRecord]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(TREND_COLUMNS)
    for r in records:
        run = runs.get(r.run_id)
        writer.writerow([r.kind, r.key, r.kernel, r.signature, r.run_id,
                         run.started_iso if run else "", run.git_commit if run else "",
                         run.device if run else "", r.status, r.method, r.statistic,
                         _csv_num(r.value_us), _csv_num(r.median_us), _csv_num(r.mean_us),
                         _csv_num(r.min_us), _csv_num(r.std_us), r.samples_count, r.verdict,
                         _csv_num(r.ratio), _csv_num(r.p_value)])
    return buffer.getvalue()


def _csv_num(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def render_trend(records: list[CaseRecord], runs: dict[str, RunRecord]) -> str:
    """Per case, one line per run (oldest first) with the change from the run before."""
    lines: list[str] = []
    current = None
    previous: float | None = None
    for r in records:
        if (r.kind, r.key) != current:
            current, previous = (r.kind, r.key), None
            if lines:
                lines.append("")
            lines += [f"{r.key} ({r.kernel}, {r.kind})",
                      f"  {'started':<19}  {'run':<24}  {'commit':<10}  {'value(us)':>10}  "
                      f"{'min(us)':>10}  {'samples':>7}  {'change':>7}  status / verdict"]
        run = runs.get(r.run_id)
        change = "-" if previous is None or r.value_us is None or previous <= 0 \
            else f"{r.value_us / previous - 1:+.1%}"
        verdict = f" / {r.verdict} {r.ratio:.3f}x" if r.verdict and r.ratio else \
            (f" / {r.verdict}" if r.verdict else "")
        lines.append(f"  {(run.started_iso if run else '?')[:19]:<19}  {r.run_id:<24}  "
                     f"{(run.git_commit if run else '')[:10]:<10}  {_fmt(r.value_us):>10}  "
                     f"{_fmt(r.min_us):>10}  {r.samples_count:>7}  {change:>7}  {r.status}{verdict}")
        if r.value_us is not None:
            previous = r.value_us
    return "\n".join(lines)


@dataclass(frozen=True)
class CaseComparison:
    kind: str
    key: str
    kernel: str
    comparison: Comparison


def compare_runs(base_ref: str, new_ref: str, *, history: Path | None, threshold: float
                 ) -> tuple[Baseline, RunRecord, list[CaseComparison]]:
    """NEW (one run) against BASE (see history/baseline.py), case by case."""
    new_run, new_cases = resolve_run(new_ref, history=history)
    baseline = resolve_baseline(base_ref, history=history, device=new_run.device or None,
                                before=new_run.started or None, exclude=(new_run.run_id,))
    if isinstance(baseline, RunBaseline) and baseline.run.run_id == new_run.run_id:
        baseline.close()
        raise NpuperfError(f"BASE and NEW are the same run ({new_run.run_id})")
    found = []
    try:
        for case in new_cases:
            if not case.measured:
                continue
            base = baseline.case(case.kind, case.key)
            if base is None or not base.samples:
                comparison = Comparison("NEW", reason="not in the baseline" if base is None
                                        else "the baseline kept no samples",
                                        new_samples=len(case.samples), threshold=threshold)
            else:
                comparison = compare_samples(
                    base.samples, case.samples, threshold=threshold, base_status=base.status,
                    new_status=case.status, base_run=base.run_id,
                    base_reference=base.extra.get("reference_us"),
                    new_reference=case.extra.get("reference_us"),
                    run_to_run=base.extra.get("run_to_run"))
            found.append(CaseComparison(case.kind, case.key, case.kernel, comparison))
    finally:
        baseline.close()
    return baseline, new_run, found


def render_comparison(baseline: Baseline, new_run: RunRecord, items: list[CaseComparison],
                      *, show_all: bool = False) -> str:
    counts = dict.fromkeys(VERDICTS, 0)
    for item in items:
        counts[item.comparison.verdict] += 1
    lines = [f"NEW:  run {new_run.run_id} ({new_run.started_iso or '?'}, {new_run.device or '?'})",
             f"BASE: {baseline.label}",
             f"{len(items)} case(s): " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)]
    if shift := run_shift_note([i.comparison for i in items]):
        lines.append(f"note: {shift}")
    shown = (SLOWER, FASTER, UNCERTAIN) if not show_all else VERDICTS
    for verdict in shown:
        chosen = sorted((i for i in items if i.comparison.verdict == verdict),
                        key=lambda i: (-i.comparison.severity, i.key))
        if not chosen:
            continue
        lines += ["", f"{verdict} ({len(chosen)}), worst first:",
                  f"  {'ratio':>8}  {'p-value':>8}  {'base(us)':>10}  {'new(us)':>10}  case"]
        for item in chosen:
            c = item.comparison
            ratio = f"{c.ratio:.3f}x" if c.ratio else "-"
            p = "-" if c.p_value is None else (f"{c.p_value:.2g}" if c.p_value >= 1e-4
                                               else f"{c.p_value:.1e}")
            why = f"  ({c.reason})" if c.reason and verdict != SLOWER else ""
            lines.append(f"  {ratio:>8}  {p:>8}  {_fmt(c.base_median_us):>10}  "
                         f"{_fmt(c.new_median_us):>10}  {item.key}{why}")
    return "\n".join(lines)


def comparison_csv(items: list[CaseComparison]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("kind", "case", "kernel", "verdict", "ratio", "p_value", "base_median_us",
                     "new_median_us", "base_samples", "new_samples", "base_run", "reason"))
    for i in sorted(items, key=lambda i: (VERDICTS.index(i.comparison.verdict),
                                          -i.comparison.severity, i.key)):
        c = i.comparison
        writer.writerow((i.kind, i.key, i.kernel, c.verdict, _csv_num(c.ratio),
                         _csv_num(c.p_value), _csv_num(c.base_median_us),
                         _csv_num(c.new_median_us), c.base_samples, c.new_samples, c.base_run,
                         c.reason))
    return buffer.getvalue()
