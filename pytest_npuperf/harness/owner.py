"""The process that owns a replay run (the serial process, or the xdist controller): it checks
and locks what the run will write before the first case, receives every case's result (and
journals it at once, harness/journal.py), and ends the run.

How the run ends is chosen once: an msprof child hands its results to its parent (which
attributes the kernels and ends the run, harness/wrap.py); every other run ends here through
`run.finish.finish_run` (a result's route to the write: route.py). A run stopped early
(SIGTERM, SIGHUP, Ctrl-C, `-x`) ends the same way: every finished case is written, and the
run is recorded as partial, with why.
"""

from __future__ import annotations

import dataclasses
import signal
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..db.errors import NpuperfError
from ..db.progress import Progress
from ..db.table import check_writable_dir
from ..db.transaction import check_inside
from ..measure.overhead import AFTER, BETWEEN, STARTUP
from ..measure.result import STATUS_CRASHED
from ..replay.cases import result_for
from .bench_bridge import add_result, benchmark_session
from .context import RunContext
from .journal import (
    Journal,
    check_journal_dir,
    forget,
    journal_path,
    lineage,
    load_resume,
    successor_header,
    supersede,
)
from .nodeids import case_id_of_nodeid
from .progress import LOG_INTERVAL_S, TTY_INTERVAL_S, case_progress
from .route import hand_over

# What a CI timeout or a closed terminal sends: the run ends as after Ctrl-C (its finished
# cases written), not killed with nothing saved. A second one ends the process at once.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP")
                     if hasattr(signal, name))

if TYPE_CHECKING:
    from ..db.lock import DatabaseLock
    from ..measure.result import CaseResult
    from ..run.finish import RunEnd


class Owner:
    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.notes = context.notes  # one list: said at the end of the run, and in its reports
        self.active = False  # any replay case collected (or reported) in this run
        self.writes_ready = False  # checked writable (and locked) before the first case
        self.results: list[CaseResult] = []
        self.extra_results: list = []  # results of other kinds to record with the run
        self.end: RunEnd | None = None
        self.interrupted = False
        self.stopped_by = ""  # the signal that ended the run early
        self.selected: int | None = None  # replay cases selected (after -k, -m, resume)
        self._lock: DatabaseLock | None = None
        self._journal: Journal | None = None
        self.resumed_from = ""
        self._resumed: list[CaseResult] = []
        self._resumed_journal: Path | None = None
        self._resumed_header: dict = {}
        self._journal_failed = False
        self._handlers: dict[int, object] = {}
        self._progress: Progress | bool | None = None  # False: no progress lines
        self._benchmarks: object = None  # pytest-benchmark's session (False: not asked for)
        # The cases' span on this clock (epoch s: the first began, the last ended) and their
        # wall times: what is not in a case between them is pytest's (measure/overhead.py).
        self._span: list[float] = []
        self._cases_wall_s = 0.0
        self._catch_stop_signals()

    # -- a run stopped from outside ends as any run ends ------------------------------------------
    def _catch_stop_signals(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for number in STOP_SIGNALS:
            self._handlers[number] = signal.signal(number, self._stop)

    def _stop(self, number: int, frame) -> None:
        self.stopped_by = signal.Signals(number).name
        signal.signal(number, signal.SIG_DFL)
        raise KeyboardInterrupt(f"stopped by {self.stopped_by}")

    def _restore_signals(self) -> None:
        for number, handler in self._handlers.items():
            if signal.getsignal(number) == self._stop:
                signal.signal(number, handler)
        self._handlers.clear()

    @property
    def hands_off(self) -> bool:
        """An msprof child: its parent attributes the kernels and writes."""
        return self.context.profiler.hands_off

    # -- before the first case: fail early, and only one writer -------------------------------
    def prepare_writes(self) -> None:
        """Check what this run will write and take its lock; under xdist, first that every
        worker has a device of its own."""
        context = self.context
        if context.config.option.collectonly:
            return
        settings = context.settings
        if context.workers > 1:
            _ = context.backend  # refuses more workers than devices before any case runs
        context.profiler.check(context.backend.kind)
        self._preflight()
        if not self.writes_ready:
            try:
                context.keeper.check(write=not settings.dry_run)
            except NpuperfError as exc:
                self.active = False
                raise pytest.UsageError(f"npuperf: {exc}") from None
        if self.writes_ready or settings.dry_run:
            return
        destination = context.destination
        try:
            check_inside(destination.inside, destination.reports_dir / "report")
            for directory in destination.writable_dirs():
                check_writable_dir(directory)
            if not self.hands_off:
                check_journal_dir(settings.out)
            self._lock = destination.lock(f"pytest run {context.run_id}", self.notes)
            self.writes_ready = True
        except NpuperfError as exc:
            self.active = False  # nothing will be measured, so nothing must be written
            raise pytest.UsageError(f"npuperf: {exc}") from None

    def _preflight(self) -> None:
        """NPU sessions: the database's software stack against the running one (a warning,
        an error with --npuperf-strict-stack) and the custom-operator environment of the
        selected kernel types, said before the first case."""
        context = self.context
        if context.settings.grid or context.backend.kind != "npu":
            return
        from ..replay.preflight import custom_op_problems, stack_mismatches

        mismatches = stack_mismatches(context.destination.source.name)
        if mismatches and context.settings.strict_stack:
            raise pytest.UsageError(f"npuperf: --npuperf-strict-stack: {'; '.join(mismatches)}")
        lines = [f"warning: {m} (--npuperf-strict-stack makes this an error)" for m in mismatches]
        lines += [f"warning: {p} (these cases will fail)"
                  for p in custom_op_problems({r.kernel_type for r in context.case_refs()})]
        reporter = context.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            self.notes.append(line.removeprefix("warning: "))
            if reporter is not None:
                reporter.write_line(f"npuperf: {line}")

    def on_worker_cases(self, node_ids: list[str]) -> None:
        """xdist: a worker collected these; if they are this run's replay cases, the run is
        checked and locked before any of them is scheduled."""
        if self.active:
            return
        case_ids = {ref.case_id for ref in self.context.case_refs()}
        selected = sum(case_id_of_nodeid(nodeid) in case_ids for nodeid in node_ids)
        if selected or self.resume():
            self.active = True
            self.selected = selected
            self.prepare_writes()

    @property
    def has_resumed(self) -> bool:
        return bool(self._resumed)

    # -- results --------------------------------------------------------------------------------
    def record(self, result: CaseResult) -> None:
        self.active = True
        self.results.append(result)
        now = time.time()
        if not self._span:
            self._span = [now - result.wall_s, now]
        self._span[1] = now
        self._cases_wall_s += result.wall_s
        journal = self._journal_for_write()
        if journal is not None:
            journal.append(result)
            self._journal_lost(journal.failure)
        if self._benchmarks is None:
            self._benchmarks = benchmark_session(self.context.config) or False
        if self._benchmarks:
            problem = add_result(self._benchmarks, result)
            if problem and problem not in self.notes:
                self.notes.append(problem)

    def progress_tick(self) -> None:
        """After a case's line: the progress line, when one is due."""
        progress = self._progress_line()
        if progress:
            progress.update(len(self.results))

    def _progress_line(self) -> Progress | None:
        """--npuperf-progress: created with the first result, on pytest's terminal."""
        if self._progress is None:
            interval = self.context.settings.progress
            config = self.context.config
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if interval == 0 or reporter is None or config.option.verbose < -1:
                self._progress = False
            else:
                tty = bool(getattr(reporter, "isatty", False))
                interval = interval or (TTY_INTERVAL_S if tty else LOG_INTERVAL_S)
                self._progress = case_progress(self.selected, partial(_own_line, reporter, tty),
                                               interval_s=interval)
        return self._progress or None

    def _journal_for_write(self) -> Journal | None:
        settings = self.context.settings
        if self._journal is None and not self._journal_failed and not settings.dry_run \
                and not self.hands_off:
            context = self.context
            journal = Journal(journal_path(settings.out, context.run_id), {
                "run_id": context.run_id, "started": context.identity.started_iso,
                "source": str(context.destination.source), "resumed_from": self.resumed_from,
                "selected": self.selected, "device": context.backend.database_device(),
                **successor_header(self._resumed_header, run_id=context.run_id,
                                   started=context.started)})
            for result in self._resumed:  # a run resumed again finds them here too
                journal.append(result)
            if self._journal_lost(journal.failure):
                return None
            self._journal = journal
            if self._resumed_journal is not None:
                supersede(self._resumed_journal, context.run_id)
        return self._journal

    def _journal_lost(self, failure: str) -> bool:
        """A journal that cannot be written is said once; the run goes on without it."""
        if not failure or self._journal_failed:
            return bool(failure)
        self._journal_failed = True
        self._journal = None
        self.notes.append(f"the run journal could not be written ({failure}): a run killed "
                          f"from now on loses its results")
        return True

    def resume(self) -> set[str]:
        """--npuperf-resume: the journaled results of the run named, kept for the finish; the
        ids of their cases, which this run does not measure again."""
        settings = self.context.settings
        if not settings.resume or self.resumed_from:
            return {r.case_id for r in self._resumed}
        context = self.context
        try:
            path, header, self._resumed, notes = load_resume(
                settings.out, settings.resume, source=str(context.destination.source),
                device=context.backend.database_device(), history=settings.history)
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None
        self._resumed_journal, self._resumed_header = path, header
        self.notes += notes
        self.resumed_from = str(header.get("run_id") or path.stem)
        self.notes.append(f"resumed run {self.resumed_from}: {len(self._resumed)} case(s) taken "
                          f"from its journal, the others measured now")
        return {r.case_id for r in self._resumed}

    def judge_late(self, report: pytest.TestReport, result: CaseResult) -> None:
        """A result that arrives without a verdict (its worker could not open the baseline)
        is judged here, and a SLOWER case's passed report becomes a failure before pytest
        counts it (this runs first among the report hooks)."""
        context = self.context
        if not context.settings.baseline or result.regression is not None \
                or report.when != "call":
            return
        comparison = context.keeper.judge(result)
        if comparison is not None and comparison.verdict == "SLOWER" and report.passed:
            report.outcome = "failed"
            report.longrepr = f"{comparison.describe()} [judged by the controller]"

    def record_crash(self, nodeid: str, message: str) -> None:
        """A case whose xdist worker died: no result came back, so the owner makes one
        (status `crashed`, written to its row), and the run fails."""
        case_id = case_id_of_nodeid(nodeid)
        ref = next((r for r in self.context.case_refs() if r.case_id == case_id), None) \
            if case_id and self.context.cases_known else None
        if ref is None:
            return
        self.record(result_for(ref, nodeid, STATUS_CRASHED, " ".join(message.split())))

    @property
    def records_run(self) -> bool:
        """Whether `finish` will record a run in the history here: kernel cases ran in this
        process's run and are written by it (not handed to an msprof parent)."""
        settings = self.context.settings
        return (self.active and self.writes_ready and bool(self.results)
                and not settings.dry_run and settings.history is not None
                and not self.hands_off)

    # -- the end --------------------------------------------------------------------------------
    def finish(self, interrupted: bool, exitstatus: int | None = None) -> bool:
        """End the run: hand off (an msprof child), or write, record and report. False when
        the results were measured but not saved."""
        context = self.context
        if not self.active or context.config.option.collectonly:
            return True
        if self.hands_off:
            return self._hand_off(interrupted)
        settings = context.settings
        if not self.writes_ready and not (settings.dry_run and self.results):
            return True  # no case ran (all deselected, or a usage error): nothing to write
        from ..run.finish import RunFacts

        partial = self._partial(interrupted)
        results = [*self._resumed, *self.results]
        if partial and not results:
            self.notes.append(f"session {partial.split(' after')[0]} before any case finished: "
                              f"the database was left as it was")
            return True
        if partial:
            self.notes.append(f"partial run: {partial}; its finished cases are written "
                              f"(--npuperf-resume {context.run_id} measures the rest)")
        self._time_cases()
        self.notes += context.profiler.complete(self.results, settings.keep_prof)
        context.parts[AFTER] = time.time() - self._span[1] if self._span else 0.0
        kept = sum(1 for r in results if r.preempted_kept)
        if kept:
            self.notes.append(f"{kept} case(s) keep samples the host preempted (--npuperf-"
                              f"preempted keep): this run is never a last-good baseline")
        options = {**settings.as_dict(), "partial": partial, "resumed_from": self.resumed_from}
        facts = RunFacts.of(
            context.identity, source=str(context.destination.source), options=options,
            root=context.rootpath, history=settings.history, baseline=settings.baseline,
            threshold=settings.regression_threshold, figures=settings.figures,
            record=not settings.dry_run, reports=not settings.dry_run, exit_status=exitstatus,
            good=not partial and not kept)
        self.end = hand_over(facts, results, context.destination, self._lock,
                             info=context.session_info, keeper=context.keeper,
                             notes=self.notes, extra_cases=self.extra_results)
        self.interrupted = self.interrupted or self.end.interrupted
        written = self.end.outcome is not None and not partial
        if self._journal is not None:
            self._journal.end(written, partial or ("" if self.end.ok else "not all written"))
        if written and self._resumed_journal is not None and not settings.dry_run:
            for run_id in lineage(self._resumed_header):  # the runs it continued are complete
                forget(journal_path(settings.out, run_id))
            forget(self._resumed_journal)
        return self.end.ok

    def _time_cases(self) -> None:
        """The session's parts before and between its cases (measure/overhead.py)."""
        if not self._span:
            return
        context = self.context
        began, ended = self._span
        context.parts[STARTUP] = began - context.wall_origin
        context.parts[BETWEEN] = ended - began - self._cases_wall_s / max(1, context.workers)

    def _partial(self, interrupted: bool) -> str:
        """Why the run measured fewer cases than it selected ("" when it did not)."""
        measured = len(self.results)
        total = f" after {measured} of {self.selected} case(s)" if self.selected else \
            f" after {measured} case(s)"
        if self.stopped_by:
            return f"stopped by {self.stopped_by}{total}"
        if interrupted:
            return f"interrupted (Ctrl-C){total}"
        if self.selected is not None and measured < self.selected:
            return f"the session stopped early{total}"
        return ""

    def _hand_off(self, interrupted: bool) -> bool:
        """The msprof child: what was measured goes to the parent, which writes."""
        context = self.context
        partial = self._partial(interrupted)
        if partial and not self.results:
            self.notes.append("session interrupted before any case finished: no hand-off written")
            return True
        if partial:
            self.notes.append(f"partial run: {partial}; its finished cases are handed over")
        self._time_cases()
        settings = context.settings
        destination = context.destination
        header = {
            "source": str(destination.source),
            "target": None if destination.target is None else str(destination.target),
            "native": destination.native, "grid": bool(settings.grid),
            "reports_dir": str(destination.reports_dir), "run_id": context.run_id,
            "stamp": context.identity.stamp, "dry_run": settings.dry_run,
            "prune_empty": settings.prune_empty, "keep_prof": settings.keep_prof,
            "writes_ready": self.writes_ready, "root": str(context.rootpath),
            "partial": partial,
            "info": dataclasses.asdict(context.session_info()), "notes": list(self.notes)}
        self.release()  # the parent takes the lock for its write-back
        try:
            context.profiler.write_handoff(header, self.results)
        except NpuperfError as exc:
            self.notes.append(f"the hand-off to the msprof parent was not written: {exc}")
        except KeyboardInterrupt:
            self.interrupted = True
            self.notes.append("interrupted while writing the hand-off")
        self.notes.append(f"measured {len(self.results)} case(s) under msprof; the parent "
                          f"process attributes the kernels and writes the database")
        return True

    # -- what the run's reports and terminal show -------------------------------------------------
    def summary_lines(self) -> list[str]:
        """The terminal summary ([] when no kernel case ran, e.g. only collectives)."""
        if self.end is not None:
            from ..run.finish import summary_lines

            return summary_lines(self.end)
        return list(self.notes)

    def results_lines(self) -> list[str]:
        """The results table of every case of the run (--npuperf-table)."""
        from ..report.results_table import results_table

        results = self.end.results if self.end is not None else [*self._resumed, *self.results]
        return results_table(results, self.context.settings.table)

    def html_summary(self) -> str | None:
        end = self.end
        if end is None or end.outcome is None:
            return None
        from ..report.html import html_summary

        return html_summary(end.outcome, end.results, end.info, end.paths,
                            figures=end.figures, baseline=end.baseline)

    def release(self) -> None:
        self._restore_signals()
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _own_line(reporter, tty: bool, text: str) -> None:
    """A line of its own on pytest's terminal, also after a row of dots (xdist's have no file
    name heading them, so pytest would not start a new line)."""
    if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
        reporter.write("\n")
    reporter.write_line(text, cyan=tty)
