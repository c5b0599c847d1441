"""Writes a run's reports together: all are staged complete, then put in place, so a failure
leaves none of them (and never a half-written one). The write takes the reports directory's
own lock (`db.table.write_texts`): a second process writing there at that moment is refused."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..db.table import write_texts
from ..measure.result import CaseResult
from ..replay.outcome import SessionInfo, WriteOutcome
from .gaps import gap_rows_csv
from .markdown import render_markdown
from .names import ReportPaths, free_stamp, report_paths
from .page import render_page
from .runjson import run_json, spool_cases, spooled_run_json


def write_reports(outcome: WriteOutcome, results: list[CaseResult],
                  session: SessionInfo | Callable[[], SessionInfo], reports_dir: Path, *,
                  figures: dict[str, str] | None = None, baseline: str = "",
                  history: str | Callable[[], str] = "") -> ReportPaths:
    """Write the markdown report, the gap CSV, the run JSON and the html page under
    `reports_dir`. `figures`: report/figures.py's SVGs; `baseline`: what the cases were
    compared with; `history`: where the run was recorded. `session` (and `history`), a
    function: called once the reports' bulk (the run JSON's cases, the gap CSV) is rendered,
    so that the session's wall time and overhead the reports state count it
    (measure/overhead.py), and the history written meanwhile is known.

    Writes whatever it is given: a dry run that must leave the disk alone does not call it.
    """
    reports_dir = Path(reports_dir)
    stamp = free_stamp(reports_dir, outcome.stamp)
    if stamp != outcome.stamp:
        # The markdown names its sibling files: render it with the stamp actually used.
        outcome = dataclasses.replace(outcome, stamp=stamp)
    paths = report_paths(reports_dir, stamp)
    # Render everything before touching the disk: a rendering bug must not leave a staged file.
    # The run JSON's case lines wait in a temporary file (10^5 cases: hundreds of MB).
    with tempfile.TemporaryFile(prefix="npuperf_run_json_") as spool:
        cases = spool_cases(results, spool)
        gaps = gap_rows_csv(outcome)
        if callable(history):  # first: waiting for it is in the session's wall time
            history = history()
        if callable(session):
            session = session()
        texts = {paths.markdown: render_markdown(outcome, results, session, baseline=baseline,
                                                 history=history),
                 paths.gap_csv: gaps,
                 paths.run_json: spooled_run_json(run_json(outcome, results, session,
                                                           baseline=baseline, cases=False),
                                                  spool, cases),
                 paths.html: render_page(outcome, results, session, figures=figures,
                                         baseline=baseline, history=history)}
        write_texts(reports_dir, texts, purpose=f"reports {stamp}")
    return paths
