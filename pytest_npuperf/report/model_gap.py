"""Replay vs the model: how far each replayed kernel is from the same kernel inside a profiled
model on this device, per kernel type and per row, weighted by how much of the model's device
time it holds. This is what says whether a simulator can trust the database: a 2x gap on
0.1 % of the model matters less than a 10 % gap on 40 % of it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from html import escape

from ..replay.outcome import GapRow, WriteOutcome
from . import summary as S
from .tables import md_table

ROWS_SHOWN = 20
EXPLAINED = ("ratio = replay / in-model device time of the same row (its Profiling columns, "
             "profiled inside a model on this device); share = its part of the model's profiled "
             "device time; impact = |ratio - 1| x share, what the gap costs a model prediction; "
             "spread = the profiled calls' coefficient of variation")


@dataclass(frozen=True)
class TypeGap:
    kernel_type: str
    rows: int
    median: float
    low: float
    high: float
    share: float  # of the model's profiled device time, every profiled row of the type


def type_gaps(outcome: WriteOutcome) -> list[TypeGap]:
    """Per kernel type with compared rows, the largest share of the model first."""
    total = outcome.model_total_us
    by_type: dict[str, list[float]] = {}
    for gap in outcome.gaps:
        by_type.setdefault(gap.operator, []).append(gap.ratio)
    found = [TypeGap(kind, len(r), statistics.median(r), min(r), max(r),
                     outcome.model_us.get(kind, 0.0) / total if total > 0 else float("nan"))
             for kind, r in by_type.items()]
    return sorted(found, key=lambda t: (-(t.share if t.share == t.share else 0.0), t.kernel_type))


def _range(t: TypeGap) -> str:
    return f"{S.fmt_ratio(t.low)}..{S.fmt_ratio(t.high)}"


def _share(value: float) -> str:
    return S.fmt_pct(value) if value == value else "-"


def prediction_lines(outcome: WriteOutcome) -> list[str]:
    return [line for prediction in outcome.predictions for line in prediction.lines()]


def terminal_lines(outcome: WriteOutcome) -> list[str]:
    return _gap_lines(outcome) + prediction_lines(outcome)


def _gap_lines(outcome: WriteOutcome) -> list[str]:
    types = type_gaps(outcome)
    if not types:
        return []
    covered = sum(t.share for t in types if t.share == t.share)
    head = f"replay vs in-model: {len(outcome.gaps)} row(s) of {len(types)} kernel type(s)"
    if outcome.model_total_us > 0:
        head += f", {S.fmt_pct(covered)} of the model's profiled device time"
    width = max(len(t.kernel_type) for t in types)
    lines = [head] + [f"  {t.kernel_type:<{width}}  {t.rows:>3} row(s)  median "
                      f"{S.fmt_ratio(t.median)} [{_range(t)}]"
                      + (f"  {_share(t.share)} of model time" if t.share == t.share else "")
                      for t in types]
    return lines


def _row_cells(gap: GapRow, total: float) -> list[object]:
    return [gap.operator, gap.shape, S.fmt_us(gap.microbench_us), S.fmt_us(gap.profiling_us),
            S.fmt_ratio(gap.ratio), gap.calls or "-",
            f"{gap.spread:.2f}" if gap.spread == gap.spread else "-",
            _share(gap.share(total)), _share(gap.impact(total))]


_ROW_HEADER = ["Operator", "Shape", "Replay(us)", "In-model(us)", "Ratio", "Calls", "Spread",
               "Share", "Impact"]
_TYPE_HEADER = ["Operator", "Rows", "Median ratio", "Range", "Share of model time"]


def markdown_section(outcome: WriteOutcome) -> str:
    predicted = "".join(f"\n\nModel prediction: {p.markdown()}" for p in outcome.predictions)
    return _gap_markdown(outcome) + predicted


def _gap_markdown(outcome: WriteOutcome) -> str:
    types = type_gaps(outcome)
    if not types:
        return ("No row has both a replay and an in-model time on this device: profile the model "
                "here (`npuperf profile --db <this device's database> -- python "
                "model.py`); the embedded database's demo model is profiled once per device.")
    total = outcome.model_total_us
    rows = outcome.by_impact()
    table = md_table(_ROW_HEADER, [_row_cells(g, total) for g in rows[:ROWS_SHOWN]],
                     right=(2, 3, 4, 5, 6, 7, 8))
    more = f"\n\nShowing {ROWS_SHOWN} of {len(rows)} rows." if len(rows) > ROWS_SHOWN else ""
    return "\n\n".join([
        EXPLAINED[:1].upper() + EXPLAINED[1:] + ".",
        md_table(_TYPE_HEADER, [[t.kernel_type, t.rows, S.fmt_ratio(t.median), _range(t),
                                 _share(t.share)] for t in types], right=(1, 2, 4)),
        "Rows, the costliest gap first:", table + more])


def _html_table(header: list[str], rows: list[list[object]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table class="npuperf-gaps"><tr>{head}</tr>{body}</table>'


def html_section(outcome: WriteOutcome) -> str:
    predicted = "".join(f"<h3>Model prediction</h3><pre>{escape(chr(10).join(p.lines()))}</pre>"
                        for p in outcome.predictions)
    return _gap_html(outcome) + predicted


def _gap_html(outcome: WriteOutcome) -> str:
    types = type_gaps(outcome)
    title = "<h3>Replay vs the model</h3>"
    if not types:
        return title + "<p>No row has both a replay and an in-model time on this device.</p>"
    total = outcome.model_total_us
    return (title + f"<p>{escape(EXPLAINED)}.</p>"
            + _html_table(_TYPE_HEADER, [[t.kernel_type, t.rows, S.fmt_ratio(t.median),
                                          _range(t), _share(t.share)] for t in types])
            + _html_table(_ROW_HEADER, [_row_cells(g, total)
                                        for g in outcome.by_impact()[:ROWS_SHOWN]]))
