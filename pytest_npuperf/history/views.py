"""What `npuperf runs`, `npuperf history` and `npuperf compare` print."""

from __future__ import annotations

import csv
import datetime as _dt
import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..db.errors import NpuperfError
from ..measure.units import fmt_duration
from .baseline import (
    Baseline,
    RunBaseline,
    co_tenant_share,
    probes_of,
    resolve_baseline,
    resolve_run,
)
from .compare import (
    FASTER,
    SLOWER,
    UNCERTAIN,
    VERDICTS,
    Comparison,
    RunShift,
    compare_samples,
    run_shift_note,
)
from .records import CaseRecord, RunRecord
from .spread import Spread
from .store import HistoryStore

TREND_COLUMNS = ("kind", "case", "kernel", "signature", "run_id", "started", "git_commit",
                 "device", "status", "method", "statistic", "value_us", "median_us", "mean_us",
                 "min_us", "std_us", "samples", "verdict", "ratio", "p_value")


def _fmt(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


_RELATIVE = re.compile(r"^(\d+)\s*([dhw])$")


def parse_when(text: str, *, now: float | None = None) -> float:
    """`--since` / `--until`: an ISO date or time (`2026-11-20`, `2026-11-20T08:00`, local
    time) or an age (`7d`, `12h`, `2w`), as epoch seconds."""
    value = str(text).strip()
    match = _RELATIVE.match(value.lower())
    if match:
        hours = int(match.group(1)) * {"h": 1, "d": 24, "w": 168}[match.group(2)]
        return (now if now is not None else _dt.datetime.now().timestamp()) - hours * 3600
    try:
        return _dt.datetime.fromisoformat(value).timestamp()
    except ValueError:
        raise NpuperfError(f"{text!r} is neither a date (2026-11-20, 2026-11-20T08:00) nor an "
                           f"age (7d, 12h, 2w)") from None


def stack_text(run: RunRecord | None) -> str:
    """`torch 2.13.0+cpu, cann 8.5` from a run's software stack."""
    stack = run.stack if run is not None and isinstance(run.stack, dict) else {}
    return ", ".join(f"{k} {v}" for k, v in stack.items() if v and not isinstance(v, dict))


def commit_text(run: RunRecord | None) -> str:
    if run is None or not run.git_commit:
        return ""
    return run.git_commit[:10] + ("+dirty" if run.git_dirty else "")


def run_outcome(run: RunRecord) -> str:
    if (run.options or {}).get("partial"):
        return "partial"
    return {True: "passed", False: "failed", None: "?"}[run.passed]


def render_runs(found: list[tuple[RunRecord, int]], kernel: str | None) -> str:
    """`npuperf runs`: one line per run, oldest first."""
    cases = f"{kernel} cases" if kernel else "cases"
    header = (f"{'run id':<28}  {'started':<19}  {'device':<28}  {'commit':<16}  "
              f"{cases:>{max(5, len(cases))}}  {'outcome':<7}  stack")
    lines = [header]
    for run, matched in found:
        lines.append(f"{run.run_id:<28}  {(run.started_iso or '?')[:19]:<19}  "
                     f"{run.device or '?':<28}  {commit_text(run) or '-':<16}  "
                     f"{matched:>{max(5, len(cases))}}  {run_outcome(run):<7}  "
                     f"{stack_text(run) or '-'}")
    lines.append(f"{len(found)} run(s)")
    return "\n".join(lines)


def runs_csv(found: list[tuple[RunRecord, int]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(("run_id", "started", "device", "git_commit", "git_dirty", "cases",
                     "matched", "outcome", "stack", "host", "baseline"))
    for run, matched in found:
        writer.writerow((run.run_id, run.started_iso, run.device, run.git_commit,
                         "" if run.git_dirty is None else int(run.git_dirty), run.cases, matched,
                         run_outcome(run), stack_text(run), run.host, run.baseline))
    return buffer.getvalue()


class NoMatch(NpuperfError):
    """Nothing in the history matches: a fact about the data (exit status 1)."""

    exit_code = 1


def trend(store: HistoryStore, *, kernel: str | None, signature: str | None, last: int | None,
          device: str | None = None, since: float | None = None, until: float | None = None
          ) -> tuple[list[CaseRecord], dict[str, RunRecord]]:
    records = store.trend(kernel=kernel, signature=signature, device=device, last=last,
                          since=since, until=until)
    if not records:
        what = ", ".join(f"{k} {v!r}" for k, v in (("kernel", kernel), ("signature", signature),
                                                   ("device", device)) if v) or "any case"
        when = " in that time" if since is not None or until is not None else ""
        raise NoMatch(f"{store.path}: no measurement of {what}{when} in this history")
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


def _device(record: CaseRecord, runs: dict[str, RunRecord]) -> str:
    """The device a measurement was taken on (its run's database device)."""
    run = runs.get(record.run_id)
    return (run.device if run is not None and run.device else record.device) or "?"


def _change(value: float | None, previous: float | None) -> str:
    if previous is None or value is None or previous <= 0:
        return "-"
    return f"{value / previous - 1:+.1%}"


def _verdict(r: CaseRecord) -> str:
    if r.verdict and r.ratio:
        return f" / {r.verdict} {r.ratio:.3f}x"
    return f" / {r.verdict}" if r.verdict else ""


def render_trend(records: list[CaseRecord], runs: dict[str, RunRecord]) -> str:
    """Per case, one line per run (oldest first) with the change from the run before."""
    lines: list[str] = []
    current = None
    previous: float | None = None
    for r in sorted(records, key=lambda r: (r.kind, r.key, _device(r, runs))):
        if (r.kind, r.key, _device(r, runs)) != current:
            current, previous = (r.kind, r.key, _device(r, runs)), None
            if lines:
                lines.append("")
            lines += [f"{r.key} ({r.kernel}, {r.kind}, on {_device(r, runs)})",
                      f"  {'started':<19}  {'run':<24}  {'commit':<10}  {'value':>10}  "
                      f"{'min':>10}  {'samples':>7}  {'change':>7}  status / verdict"]
        run = runs.get(r.run_id)
        lines.append(f"  {(run.started_iso if run else '?')[:19]:<19}  {r.run_id:<24}  "
                     f"{(run.git_commit if run else '')[:10]:<10}  "
                     f"{fmt_duration(r.value_us):>10}  {fmt_duration(r.min_us):>10}  "
                     f"{r.samples_count:>7}  {_change(r.value_us, previous):>7}  "
                     f"{r.status}{_verdict(r)}")
        if r.value_us is not None:
            previous = r.value_us
    return "\n".join(lines)


def render_summary(records: list[CaseRecord], runs: dict[str, RunRecord]) -> str:
    """One line per case: its newest value, the change from the run before, its best and
    worst value and the runs shown, then how to see every run of a case."""
    by_case: dict[tuple[str, str, str], list[CaseRecord]] = {}
    for r in records:
        by_case.setdefault((r.kind, r.key, _device(r, runs)), []).append(r)
    several = len({device for _, _, device in by_case}) > 1
    names = {case: f"{case[1]} on {case[2]}" if several else case[1] for case in by_case}
    width = min(max((len(name) for name in names.values()), default=4), 90)
    lines = [f"{'case':<{width}}  {'newest':>10}  {'change':>7}  {'best':>10}  {'worst':>10}  "
             f"{'runs':>4}  status / verdict"]
    for case, group in by_case.items():
        key = names[case]
        values = [r.value_us for r in group if r.value_us is not None]
        newest = group[-1]
        before = next((r.value_us for r in reversed(group[:-1]) if r.value_us is not None), None)
        lines.append(f"{key:<{width}}  {fmt_duration(newest.value_us):>10}  "
                     f"{_change(newest.value_us, before):>7}  "
                     f"{fmt_duration(min(values) if values else None):>10}  "
                     f"{fmt_duration(max(values) if values else None):>10}  {len(group):>4}  "
                     f"{newest.status}{_verdict(newest)}")
    newest_runs = {r.run_id for r in records}
    lines += ["", f"{len(by_case)} case(s) over {len(newest_runs)} run(s); every run of a "
                  f"case: npuperf history --kernel K or --signature S; a page of charts: "
                  f"npuperf trend"]
    return "\n".join(lines)


@dataclass(frozen=True)
class CaseComparison:
    kind: str
    key: str
    kernel: str
    comparison: Comparison


def compare_runs(base_ref: str, new_ref: str, *, history: Path | None, threshold: float
                 ) -> tuple[Baseline, RunRecord, list[CaseComparison]]:
    """NEW (one run) against BASE (see history/baseline.py), case by case. Every case of NEW
    is known here, so a whole run that moved is judged as one move: each case against the
    median ratio of all the others (history/compare.py)."""
    new_run, new_cases = resolve_run(new_ref, history=history)
    baseline = resolve_baseline(base_ref, history=history, device=new_run.device or None,
                                before=new_run.started or None, exclude=(new_run.run_id,))
    if isinstance(baseline, RunBaseline) and baseline.run.run_id == new_run.run_id:
        baseline.close()
        raise NpuperfError(f"BASE and NEW are the same run ({new_run.run_id})")
    pairs: list[tuple[CaseRecord, CaseRecord | None]] = []
    try:
        for case in new_cases:
            if case.measured:
                pairs.append((case, baseline.case(case.kind, case.key)))
    finally:
        baseline.close()

    def judged(case: CaseRecord, base: CaseRecord | None,
               shift: tuple[float, int] | None) -> Comparison:
        if base is None or not base.samples:
            return Comparison("NEW", reason="not in the baseline" if base is None
                              else "the baseline kept no samples",
                              new_samples=len(case.samples), threshold=threshold)
        same_stack = not (case.stack and base.stack and case.stack != base.stack)
        return compare_samples(
            base.samples, case.samples, threshold=threshold, base_status=base.status,
            new_status=case.status, base_run=base.run_id,
            spread=Spread.from_extra(base.extra),
            probes=probes_of(base, case.extra.get("reference_us"),
                             case.extra.get("reference_memory_us"), case.bound_by),
            run_shift=shift if same_stack else None,
            co_tenant=co_tenant_share(case.extra.get("preempted"), case.samples_count))

    shift = RunShift()
    for case, base in pairs:
        shift.add(judged(case, base, None), case.kernel)
    found = [CaseComparison(case.kind, case.key, case.kernel,
                            judged(case, base, shift.now(case.kernel)))
             for case, base in pairs]
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
