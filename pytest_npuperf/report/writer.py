"""Writes a run's reports together: all are staged complete, then put in place, so a failure
leaves none of them (and never a half-written one). The write takes the reports directory's
own lock (`db.table.write_texts`): a second process writing there at that moment is refused."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from ..db.table import write_texts
from ..measure.result import CaseResult
from ..replay.outcome import BackfillOutcome, SessionInfo
from .gaps import gap_rows_csv
from .markdown import render_markdown
from .names import check_stamp, gap_csv_name, html_name, markdown_name, run_json_name
from .page import render_page
from .runjson import dumps_run_json, run_json


@dataclass(frozen=True)
class ReportPaths:
    markdown: Path
    gap_csv: Path
    run_json: Path
    html: Path | None = None  # report_<stamp>.html, the run on one page with its figures

    def all(self) -> tuple[Path, ...]:
        return tuple(p for p in (self.markdown, self.gap_csv, self.run_json, self.html) if p)


def report_paths(reports_dir: Path, stamp: str) -> ReportPaths:
    return ReportPaths(reports_dir / markdown_name(stamp), reports_dir / gap_csv_name(stamp),
                       reports_dir / run_json_name(stamp), reports_dir / html_name(stamp))


def free_stamp(reports_dir: Path, stamp: str) -> str:
    """`stamp`, or `stamp_2`, `stamp_3`...: two runs finishing in the same second must not
    overwrite each other's reports."""
    check_stamp(stamp)
    candidate, n = stamp, 1
    while any(p.exists() for p in report_paths(reports_dir, candidate).all()):
        n += 1
        candidate = f"{stamp}_{n}"
    return candidate


def write_reports(outcome: BackfillOutcome, results: list[CaseResult], session: SessionInfo,
                  reports_dir: Path, *, figures: dict[str, str] | None = None,
                  baseline: str = "", history: str = "") -> ReportPaths:
    """Write the markdown report, the gap CSV, the run JSON and the html page under
    `reports_dir`. `figures`: report/figures.py's SVGs; `baseline`: what the cases were
    compared with; `history`: where the run was recorded.

    Writes whatever it is given: a dry run that must leave the disk alone does not call it.
    """
    reports_dir = Path(reports_dir)
    stamp = free_stamp(reports_dir, outcome.stamp)
    if stamp != outcome.stamp:
        # The markdown names its sibling files: render it with the stamp actually used.
        outcome = dataclasses.replace(outcome, stamp=stamp)
    paths = report_paths(reports_dir, stamp)
    # Render everything before touching the disk: a rendering bug must not leave a staged file.
    texts = {paths.markdown: render_markdown(outcome, results, session, baseline=baseline,
                                             history=history),
             paths.gap_csv: gap_rows_csv(outcome),
             paths.run_json: dumps_run_json(run_json(outcome, results, session,
                                                     baseline=baseline)),
             paths.html: render_page(outcome, results, session, figures=figures,
                                     baseline=baseline, history=history)}
    write_texts(reports_dir, texts, purpose=f"reports {stamp}")
    return paths
