"""The replay report (`replay_report_<stamp>.md`), laid out like the reference's
profile update report (CONTRACT.md §8) plus what this project adds: case statuses with
reasons, suspect measurements, where the session's time went."""

from __future__ import annotations

from collections import Counter

from ..measure.result import STATUS_SKIPPED, CaseResult
from ..replay.outcome import FileOutcome, GapRow, SessionInfo, WriteOutcome
from . import model_gap
from . import summary as S
from .attribution_section import attribution_section, profiled
from .names import gap_csv_name, html_name, run_json_name
from .regression import markdown_section
from .tables import md_table

HOTSPOT_ROWS = 20
LISTED_PROBLEMS = 50  # beyond this the JSON report has them all
SLOWEST_CASES = 10
EXAMPLES_PER_CELL = 3

# FileOutcome.examples categories this report shows (what the write records under them).
EXAMPLE_DUPLICATES = "duplicates"
EXAMPLE_MISSING = "missing"
EXAMPLE_DELETED = "deleted"

STATUS_LABELS = {"ok": "OK", "failed": "Failed", "error": "Error", "timeout": "Timed out",
                 "skipped": "Skipped", "suspect": "Suspect", "noisy": "Noisy",
                 "crashed": "Crashed (worker died)",
                 "unattributed": "Unattributed (profiler kernels not found)"}


def render_markdown(outcome: WriteOutcome, results: list[CaseResult],
                    session: SessionInfo, *, baseline: str = "", history: str = "") -> str:
    hotspots = outcome.hotspots  # a sort of every gap row: once per report
    sections = [
        _header(outcome, results, session) + (f"\n- History: {history}" if history else ""),
        _execution_status(results),
        *filter(None, [markdown_section(results, baseline)]),
        "## Overview\n\n" + _overview(outcome, len(hotspots)),
        "## Update Summary\n\n" + _update_summary(outcome.files),
        "## Duplicate Signatures\n\n" + _examples(outcome.files, EXAMPLE_DUPLICATES, "duplicates"),
        "## Rows With No Measurement\n\n" + _examples(outcome.files, EXAMPLE_MISSING, "missing"),
        "## Deleted Rows\n\n" + _examples(outcome.files, EXAMPLE_DELETED, "deleted"),
        "## Duration Gap Hotspots\n\n" + _hotspots(hotspots),
        "## Replay vs the Model\n\n" + model_gap.markdown_section(outcome),
        *(["## Profiler Attribution\n\n" + attribution_section(results)]
          if profiled(results) else []),
        "## Slowest Cases\n\n" + _slowest(results),
        "## Notes\n\n" + _notes(outcome, results),
    ]
    return "\n\n".join(sections) + "\n"


def _header(outcome: WriteOutcome, results: list[CaseResult], session: SessionInfo) -> str:
    target = f"`{outcome.target}`" if outcome.target is not None else "none (nothing written)"
    native = "yes" if outcome.native else f"no ({S.non_native_note(outcome)})"
    time_line = S.duty_line(results, session) or "-"
    lines = [
        "# Replay Report", "",
        f"- Run id: `{outcome.run_id}`",
        f"- Started: {session.started}",
        f"- Device: {S.device_line(session)}",
        f"- Workers: {session.workers}",
        f"- Source database: `{outcome.source}`",
        f"- Target database: {target}",
        f"- Native: {native}",
        f"- Dry run: {'yes' if outcome.dry_run else 'no'}",
        f"- Time: {time_line}",
        f"- Overhead: {S.overhead_line(results, session) or '-'}",
        *(f"- Warning: {w}" for w in S.host_warnings(results, session)),
    ]
    return "\n".join(lines)


def _execution_status(results: list[CaseResult]) -> str:
    counts = S.status_counts(results)
    parts = ["## Execution Status", "",
             *(f"- {STATUS_LABELS.get(status, status)}: {n}" for status, n in counts.items())]
    failing = S.problems(results)
    if failing:
        parts += ["", "> [!WARNING]", f"> {len(failing)} case(s) failed, errored or timed out; "
                  "their rows keep their data and carry the status.", "",
                  md_table(["Case", "Operator", "Status", "Reason"],
                           [[r.case_id, r.kernel_type, r.status, r.error or "-"]
                            for r in failing[:LISTED_PROBLEMS]], whole=(3,))]
        if len(failing) > LISTED_PROBLEMS:
            parts.append(f"\n... and {len(failing) - LISTED_PROBLEMS} more "
                         f"(all cases are in the run JSON).")
    flagged = S.suspects(results)
    if flagged:
        parts += ["", "Suspect (faster than the device's physical bound, not trusted):", "",
                  md_table(["Case", "Operator", "Median(us)", "Bound(us)"],
                           [[r.case_id, r.kernel_type,
                             S.fmt_us(r.stats.median if r.stats else None), S.fmt_us(r.bound_us)]
                            for r in flagged[:LISTED_PROBLEMS]],
                           right=(2, 3))]
    noisy = S.noisy(results)
    if noisy:
        parts += ["", "Noisy (samples inconsistent with a quiet machine, kept out of "
                  "`Average Duration(us)`):", "",
                  md_table(["Case", "Operator", "Median(us)", "Min(us)", "Reason"],
                           [[r.case_id, r.kernel_type,
                             S.fmt_us(r.stats.median if r.stats else None),
                             S.fmt_us(r.stats.min if r.stats else None), r.error]
                            for r in noisy[:LISTED_PROBLEMS]],
                           right=(2, 3), whole=(4,))]
    skipped = Counter((r.kernel_type, r.error or "skipped")
                      for r in results if r.status == STATUS_SKIPPED)
    if skipped:
        # Unreplayable kernel types can be most of a database: one line per reason.
        parts += ["", "Skipped:", "",
                  md_table(["Operator", "Cases", "Reason"],
                           [[kind, n, reason] for (kind, reason), n in sorted(skipped.items())],
                           right=(1,), whole=(2,))]
    return "\n".join(parts)


def _overview(outcome: WriteOutcome, hotspot_count: int) -> str:
    totals = outcome.totals()
    rows = [
        ["CSV files touched", len(outcome.files)],
        ["Rows updated", totals["updated"]],
        ["Rows added", totals["added"]],
        ["Rows deleted", totals["deleted"]],
        ["Rows unchanged", totals["unchanged"]],
        ["Rows with a failing case (failed, error, timeout, crashed)", totals["failed"]],
        ["Rows with a flagged or skipped case (noisy, suspect, unattributed, skipped)",
         totals["flagged"]],
        ["Duplicate signatures", totals["duplicates"]],
        ["Rows with no measurement", totals["missing"]],
        ["Rows compared with profiling", len(outcome.gaps)],
        ["Hotspots", hotspot_count],
        ["Gap threshold", S.GAP_THRESHOLD_TEXT],
    ]
    return md_table(["Metric", "Value"], rows)


def _update_summary(files: list[FileOutcome]) -> str:
    keys = ("updated", "added", "deleted", "unchanged", "failed", "flagged", "missing")
    rows: list[list[object]] = [[f.kernel_type, *(getattr(f, k) for k in keys)] for f in files]
    if len(files) > 1:
        rows.append(["**Total**", *(sum(getattr(f, k) for f in files) for k in keys)])
    return md_table(["Operator", "Updated", "Added", "Deleted", "Unchanged", "Failing", "Flagged",
                     "Missing"], rows, right=range(1, 8))


def _examples(files: list[FileOutcome], category: str, count_field: str) -> str:
    rows = [[f.kernel_type, getattr(f, count_field),
             "; ".join(f"`{e}`" for e in f.examples.get(category, [])[:EXAMPLES_PER_CELL]) or "-"]
            for f in files if getattr(f, count_field)]
    return md_table(["Operator", "Count", "Examples"], rows, right=(1,))


def _hotspots(hotspots: list[GapRow]) -> str:
    table = md_table(
        ["Operator", "MicroBench(us)", "Profiling(us)", "Abs Diff(us)", "MB/Profile", "Shape"],
        [[g.operator, S.fmt_us(g.microbench_us), S.fmt_us(g.profiling_us), S.fmt_us(g.abs_diff),
          S.fmt_ratio(g.ratio), g.shape] for g in hotspots[:HOTSPOT_ROWS]],
        right=(1, 2, 3, 4))
    if len(hotspots) > HOTSPOT_ROWS:
        table += f"\n\nShowing the worst {HOTSPOT_ROWS} of {len(hotspots)}."
    return table


def _slowest(results: list[CaseResult]) -> str:
    rows = [[r.case_id, r.status, S.fmt_s(r.wall_s), S.fmt_s(r.time_in_calls_s),
             r.stats.samples if r.stats else "-",
             S.fmt_us(r.stats.median if r.stats else None)]
            for r in S.slowest(results, SLOWEST_CASES)]
    return md_table(["Case", "Status", "Wall", "In calls", "Samples", "Median(us)"], rows,
                    right=(2, 3, 4, 5))


def _notes(outcome: WriteOutcome, results: list[CaseResult]) -> str:
    methods = sorted({r.method for r in results if r.measured})
    notes = list(outcome.notes)
    note = S.non_native_note(outcome)
    if note:
        notes.append(note[:1].upper() + note[1:])
    statistics = sorted({r.statistic for r in results if r.measured})
    if methods:
        notes.append(f"Measurement method(s): {', '.join(methods)}. `Average Duration(us)` "
                     f"holds the {' / '.join(statistics)} of the measured samples (column "
                     "`MicroBench Statistic`); noisy and suspect cases are kept out of it.")
    notes.append(f"Full hotspot CSV: `{gap_csv_name(outcome.stamp)}`; every case: "
                 f"`{run_json_name(outcome.stamp)}`; figures: `{html_name(outcome.stamp)}`.")
    return "\n".join(f"- {n}" for n in notes)
