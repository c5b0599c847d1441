"""The end of a run, after its backfill: one pipeline for a pytest session, the msprof parent
(wrap.py) and `npuperf backfill` (prof_backfill.py).

1. cases that have no verdict yet are judged against the baseline (the msprof parent and
   `npuperf backfill` learn the durations only now);
2. the run and its cases are recorded in the history, whole or not at all;
3. the figures are drawn (a plotting failure costs the figures, never the reports);
4. the reports are written: markdown, gap CSV, run JSON and the standalone html page.

A failing step becomes a note (nothing half written) and the run fails; Ctrl-C during a step
is noted the same way and leaves `interrupted` set.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..db.errors import NpuperfError
from ..db.layout import HCCL_DIR
from ..db.transaction import check_inside
from ..history.compare import DEFAULT_THRESHOLD, SLOWER

if TYPE_CHECKING:
    from ..history.keeper import HistoryKeeper
    from ..history.records import CaseRecord
    from ..measure.result import CaseResult
    from ..replay.outcome import BackfillOutcome, SessionInfo
    from ..report.writer import ReportPaths


@dataclass
class RunFacts:
    """What the history and the reports say about a run besides its results."""

    run_id: str
    started: float  # epoch seconds
    started_iso: str
    source: str
    options: dict = field(default_factory=dict)
    history: Path | None = None  # None: no history kept
    baseline: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    figures: bool = True
    root: Path | None = None  # the suite's checkout: the git commit of the run

    @classmethod
    def from_options(cls, options: dict, *, run_id: str, started_iso: str, source: str,
                     root: Path | None = None) -> RunFacts:
        """From a session's `Settings.as_dict()` (what a hand-off file carries)."""
        try:
            started = _dt.datetime.fromisoformat(started_iso).timestamp()
        except (TypeError, ValueError):
            started = 0.0
        history = options.get("history")
        return cls(run_id=run_id, started=started, started_iso=started_iso, source=source,
                   options=dict(options), history=Path(history) if history else None,
                   baseline=options.get("baseline") or None,
                   threshold=float(options.get("regression_threshold") or DEFAULT_THRESHOLD),
                   figures=bool(options.get("figures", True)), root=root)


def history_path(text: str | None) -> Path | None:
    """A `--history` value: `none` (any case) or empty keeps no history."""
    return None if not text or text.lower() == "none" else Path(text)


class Publisher:
    def __init__(self, facts: RunFacts, *, device: Callable[[], str],
                 keeper: HistoryKeeper | None = None, notes: list[str] | None = None,
                 dry_run: bool = False) -> None:
        from ..history.keeper import HistoryKeeper

        self.facts = facts
        self.keeper = keeper or HistoryKeeper(
            None if dry_run else facts.history, facts.baseline, facts.threshold,
            run_id=facts.run_id, started=facts.started, device=device)
        self.notes = notes if notes is not None else []
        self.interrupted = False
        self.recorded = 0
        self.figures: dict[str, str] = {}
        self.paths: ReportPaths | None = None
        self.info: SessionInfo | None = None  # as the reports were written (finish)

    def attempt(self, step: Callable[[], object], failed: str, interrupted: str) -> bool:
        """Run a writing step; a failure or Ctrl-C becomes a note (nothing half written)."""
        try:
            step()
        except NpuperfError as exc:
            self.notes.append(f"{failed}: {exc}")
            return False
        except KeyboardInterrupt:
            self.interrupted = True
            self.notes.append(interrupted)
            return False
        return True

    # -- the steps ------------------------------------------------------------------------------
    def judge(self, results: Iterable[CaseResult]) -> list[CaseResult]:
        """Cases without a verdict judged now (the durations came after the cases ran);
        returns the SLOWER ones, which a note names (the run must fail)."""
        slower = []
        for result in results:
            if self.facts.baseline and result.regression is None:
                self.keeper.judge(result)
            if (result.regression or {}).get("verdict") == SLOWER:
                slower.append(result)
        if self.keeper.baseline_error:
            self.notes.append(f"baseline not opened: {self.keeper.baseline_error}")
        if slower:
            self.notes.append(f"{len(slower)} case(s) SLOWER than the baseline: "
                              + ", ".join(r.case_id for r in slower[:10]))
        return slower

    def record_history(self, outcome: BackfillOutcome | None, results: list[CaseResult],
                       info: SessionInfo, exit_status: int | None,
                       extra_cases: Iterable[CaseRecord] = ()) -> bool:
        """The run, whole, in the history (nothing on failure: a note says why)."""
        keeper = self.keeper
        if keeper.history is None or outcome is None:
            return True
        from ..history.convert import case_record, run_record

        facts = self.facts
        cases = [case_record(r) for r in results] + list(extra_cases)
        run = run_record(run_id=facts.run_id, started=facts.started,
                         started_iso=facts.started_iso, device=info.device,
                         options=facts.options, source=facts.source,
                         target="" if outcome.target is None else str(outcome.target),
                         cases=len(cases), exit_status=exit_status,
                         baseline=facts.baseline or "", root=facts.root)

        def record() -> None:
            self.recorded = keeper.record(run, cases)
        return self.attempt(record, "history not recorded", "interrupted while recording the "
                                                            "history: nothing was recorded")

    def history_line(self) -> str:
        history = self.keeper.history
        if history is None:
            return ""
        return f"run {self.facts.run_id} recorded in {history} ({self.recorded} case(s))" \
            if self.recorded else f"run not recorded in {history}"

    def draw_figures(self, results: list[CaseResult], outcome: BackfillOutcome | None) -> None:
        """The report's figures (SVG text, report/figures.py, imported here only)."""
        from ..report.figures import draw_figures

        hccl = None  # the collective tables of the written database's device
        if outcome is not None and outcome.target is not None:
            hccl = Path(outcome.target).parent.parent / HCCL_DIR
        try:
            self.figures = draw_figures(results, outcome, hccl)
        except Exception as exc:  # a bug in a figure: say so, keep the reports
            self.notes.append(f"figures not drawn: {type(exc).__name__}: {exc}")
            self.figures = {}

    def write_reports(self, outcome: BackfillOutcome, results: list[CaseResult],
                      info: SessionInfo, reports_dir: Path, *, inside: Path | None = None
                      ) -> bool:
        """`inside`: the directory no symlink may lead the reports out of."""
        from ..report.writer import write_reports

        def write() -> None:
            if inside is not None:
                check_inside(inside, Path(reports_dir) / "report")
            self.paths = write_reports(outcome, results, info, Path(reports_dir),
                                       figures=self.figures, baseline=self.keeper.label,
                                       history=self.history_line())
        return self.attempt(write, "reports not written", "interrupted while writing the "
                                                          "reports: none was written")

    def finish(self, outcome: BackfillOutcome, results: list[CaseResult], info: SessionInfo,
               reports_dir: Path, *, exit_status: int | None,
               extra_cases: Iterable[CaseRecord] = (), inside: Path | None = None) -> bool:
        """History, figures, reports (after the backfill, not in a dry run). False when the
        history or the reports were not written."""
        entered = time.time()
        recorded = self.record_history(outcome, results, info, exit_status, extra_cases)
        if self.facts.figures:
            self.draw_figures(results, outcome)
        # The duty cycle's wall time runs to the reports (issue 7: one definition): history
        # and figures count, only the writing of the report files themselves is left out.
        self.info = dataclasses.replace(info, wall_s=info.wall_s + time.time() - entered)
        written = self.write_reports(outcome, results, self.info, reports_dir, inside=inside)
        return recorded and written

    def close(self) -> None:
        self.keeper.close()
