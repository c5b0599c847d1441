"""The end-of-session summary printed in pytest's terminal: short enough to read at a glance,
with the paths needed to find everything else."""

from __future__ import annotations

from ..measure.result import CaseResult
from ..replay.outcome import SessionInfo, WriteOutcome
from . import model_gap
from . import summary as S
from .names import ReportPaths
from .regression import terminal_lines as regression_lines

WORST_GAPS = 5
SLOWEST = 3
SHAPE_WIDTH = 60


def terminal_lines(outcome: WriteOutcome, results: list[CaseResult], session: SessionInfo,
                   paths: ReportPaths | None, *, baseline: str = "", history: str = ""
                   ) -> list[str]:
    lines = [f"npuperf run {outcome.run_id}: {S.status_phrase(S.status_counts(results))}"]
    lines += regression_lines(results, baseline)
    duty = S.duty_line(results, session)
    if duty is not None:
        lines.append(duty)
    spent = S.overhead_line(results, session)
    if spent is not None:
        lines.append(spent)
    lines += [f"warning: {w}" for w in S.host_warnings(results, session)]
    hotspots = outcome.hotspots
    if hotspots:
        lines.append(f"worst gaps ({len(hotspots)} hotspot(s), {S.GAP_THRESHOLD_TEXT}):")
        width = max(len(g.operator) for g in hotspots[:WORST_GAPS])
        lines += [f"  {S.fmt_ratio(g.ratio):>8}  {g.operator:<{width}}  {_cut(g.shape)}"
                  for g in hotspots[:WORST_GAPS]]
    else:
        lines.append(f"no duration gap hotspots ({len(outcome.gaps)} row(s) compared)")
    lines += model_gap.terminal_lines(outcome)
    slow = S.slowest(results, SLOWEST)
    if slow:
        lines.append("slowest cases:")
        lines += [f"  {S.fmt_s(r.wall_s):>9}  {r.nodeid or r.case_id}" for r in slow]
    if outcome.dry_run:
        lines.append("dry run: nothing written")
    elif outcome.target is None:
        lines.append("no database written")
    else:
        lines.append(f"database written: {outcome.target}")
    lines += [f"note: {n}" for n in outcome.notes]
    if history:
        lines.append(f"history: {history}")
    if paths is not None:
        lines.append(f"reports: {paths.markdown}")
        lines += [f"         {p}" for p in paths.all()[1:]]
    note = S.non_native_note(outcome)
    if note:
        lines.append(f"note: {note}")
    return lines


def _cut(text: str) -> str:
    return text if len(text) <= SHAPE_WIDTH else text[:SHAPE_WIDTH - 3] + "..."
