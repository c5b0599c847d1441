"""How every run ends, whoever started it: `finish_run`, called by the pytest session's owner,
the msprof parent, `npuperf backfill` and the collective sessions alike.

1. the demo model is profiled into the target database, when the target carries a
   `DemoProfile` (run/model_profile.py: a pytest run of the embedded database on a CPU or a
   GPU); Ctrl-C there ends the run with nothing else written;
2. cases that have no verdict yet are judged against the baseline (`judge`: the msprof parent
   and `npuperf backfill` learn the durations only now);
3. the results are written to the run's target (a database, nothing for grid cases, the
   collective tables), all or nothing;
4. the run and its cases are recorded in the history, whole or not at all;
5. the figures are drawn (a plotting failure costs the figures, never the reports);
6. the reports are written: markdown, gap CSV, run JSON and the standalone html page.

These are all the writes of a run's end, in this order. A failing step becomes a note
(nothing half written) and the run fails; Ctrl-C during a step is noted the same way and
leaves `interrupted` set. Notes made before the write go into the reports; `summary_lines` is
the one terminal summary of a finished run.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..db.errors import NpuperfError
from ..db.layout import HCCL_DIR
from ..db.transaction import check_inside
from ..history.compare import DEFAULT_THRESHOLD, SLOWER
from ..measure.clock import RunIdentity
from ..measure.overhead import DEMO, FIGURES, HISTORY, REPORTS, VERDICTS, WRITE, PartClock
from ..replay.outcome import SessionInfo

if TYPE_CHECKING:
    from ..history.keeper import HistoryKeeper
    from ..history.recorder import Recording
    from ..report.names import ReportPaths
    from .model_profile import DemoProfile


@dataclass
class RunFacts:
    """What a run is and how it is to end, in one object from every caller: the history and
    the reports state the first half, `finish_run` does what the second says."""

    run_id: str
    stamp: str  # YYYYmmdd_HHMMSS: report file names
    started: float  # epoch seconds
    started_iso: str
    source: str
    options: dict = field(default_factory=dict)  # recorded with the run, as the run gave them
    history: Path | None = None  # None: no history kept
    baseline: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    figures: bool = True
    root: Path | None = None  # the suite's checkout: the git commit of the run
    # How the run ends. judge: cases without a verdict are judged now (their durations came
    # after they ran); record / reports: the run goes into the history / its reports (neither
    # in a dry run); good: False for a run that is never a `last-good` baseline, whatever its
    # exit status (partial, or measured on a preempted host); device: the device a baseline
    # is looked for on when finish_run opens the history itself; write_errors: "note" makes a
    # failed write a note and a failed run, "raise" lets the error out (a command's one-line
    # error).
    judge: bool = False
    record: bool = True
    reports: bool = True
    exit_status: int | None = None
    good: bool = True
    device: str = ""
    write_errors: str = "note"

    @classmethod
    def of(cls, identity: RunIdentity, *, source: str, **facts) -> RunFacts:
        """The facts of the run `identity` names; `facts`: the other fields."""
        return cls(run_id=identity.run_id, stamp=identity.stamp, started=identity.started,
                   started_iso=identity.started_iso, source=source, **facts)

    @classmethod
    def from_handoff(cls, session: dict, info: SessionInfo) -> RunFacts:
        """The facts of the run a wrapped child measured (its hand-off header, a JSON file:
        the child's options as a session records them)."""
        try:
            started = _dt.datetime.fromisoformat(info.started).timestamp()
        except (TypeError, ValueError):
            started = 0.0
        identity = RunIdentity(str(session.get("run_id")), str(session.get("stamp")), started,
                               info.started)
        options = info.options or {}
        history = options.get("history")
        return cls.of(identity, source=str(session["source"]), options=dict(options),
                      history=Path(history) if history else None,
                      baseline=options.get("baseline") or None,
                      threshold=float(options.get("regression_threshold") or DEFAULT_THRESHOLD),
                      figures=bool(options.get("figures", True)),
                      root=Path(session["root"]) if session.get("root") else None)


def history_path(text: str | None) -> Path | None:
    """A `--history` value: `none` (any case) or empty keeps no history."""
    return None if not text or text.lower() == "none" else Path(text)


class Outcome(Protocol):
    """What a target's write did, as far as the end of a run needs it."""

    target: Path | None  # what was written (None: nothing)
    notes: list[str]


class Target(Protocol):
    """Where a run's results are written: `write` does it all or nothing (an NpuperfError
    leaves the target as it was)."""

    reports_dir: Path | None  # None: the target writes its own reports
    inside: Path | None  # the directory no symlink may lead the reports out of
    failed: str  # the note of a failed write, before the error
    interrupted: str  # the note of a write interrupted by Ctrl-C
    demo: DemoProfile | None  # the demo model to profile into it first (None: none)

    def write(self, results: list, facts: RunFacts) -> Outcome: ...


@dataclass
class RunEnd:
    """A finished run: what was written, recorded and reported, and what went wrong."""

    facts: RunFacts
    results: list
    info: SessionInfo | None
    notes: list[str]  # every note of the run, in order
    outcome: Outcome | None = None  # None: the write failed (or was not reached)
    reported: int = 0  # notes[:reported] are in the reports; the rest came after them
    paths: ReportPaths | None = None
    figures: dict[str, str] = field(default_factory=dict)
    recorded: int = 0  # cases recorded in the history
    history: Path | None = None
    baseline: str = ""  # what the baseline is, for the reports
    slower: list = field(default_factory=list)  # cases judged SLOWER here
    ok: bool = True  # written, recorded and reported as asked
    interrupted: bool = False

    @property
    def code(self) -> int:
        """0, or 1 when the run must fail: a step failed or a case was judged SLOWER here."""
        return 0 if self.ok and not self.slower else 1

    def history_line(self) -> str:
        if self.history is None:
            return ""
        return f"run {self.facts.run_id} recorded in {self.history} ({self.recorded} case(s))" \
            if self.recorded else f"run not recorded in {self.history}"


class _Steps:
    """The steps of `finish_run` on one `RunEnd`."""

    def __init__(self, end: RunEnd, keeper: HistoryKeeper) -> None:
        self.end = end
        self.keeper = keeper
        self.recording: Recording | None = None  # the history being recorded
        self.recorded = True  # False: the history was to be recorded and is not
        self.history_wait_s = 0.0  # waited for a child recording the history

    def attempt(self, step: Callable[[], object], failed: str, interrupted: str) -> bool:
        """Run a writing step; a failure or Ctrl-C becomes a note (nothing half written)."""
        try:
            step()
        except NpuperfError as exc:
            self.end.notes.append(f"{failed}: {exc}")
            return False
        except KeyboardInterrupt:
            self.end.interrupted = True
            self.end.notes.append(interrupted)
            return False
        return True

    def profile_demo(self, demo: DemoProfile) -> bool:
        """The demo model's profile parsed into the database the run writes; False when
        Ctrl-C stopped it (the run ends there: nothing else is written)."""
        from .model_profile import profile_demo

        end = self.end
        if profile_demo(demo, run_id=end.facts.run_id, stamp=end.facts.stamp, notes=end.notes):
            return True
        end.interrupted, end.ok = True, False
        return False

    def judge(self) -> None:
        """Cases without a verdict judged now (the durations came after the cases ran); the
        SLOWER ones are named in a note (the run must fail)."""
        end, keeper = self.end, self.keeper
        if end.facts.baseline:
            keeper.judge_many([r for r in end.results if r.regression is None])
        for result in end.results:
            if (result.regression or {}).get("verdict") == SLOWER:
                end.slower.append(result)
        if keeper.baseline_error:
            end.notes.append(f"baseline not opened: {keeper.baseline_error}")
        if end.slower:
            end.notes.append(f"{len(end.slower)} case(s) SLOWER than the baseline: "
                             + ", ".join(r.case_id for r in end.slower[:10]))

    def record_history(self, exit_status: int | None, extra: Iterable, good: bool) -> None:
        """The run, whole, in the history (nothing on failure: a note says why); a large one
        goes on being recorded by a child process until `history_done`."""
        end, keeper = self.end, self.keeper
        if keeper.history is None:
            return
        from ..history.convert import history_record, run_record

        facts = end.facts
        extra = list(extra)
        # Made as they are written (history/store.py records a batch at a time): 10^5
        # records at once were hundreds of MB at a large run's end.
        cases = map(history_record, itertools.chain(end.results, extra))
        run = run_record(run_id=facts.run_id, started=facts.started,
                         started_iso=facts.started_iso, device=end.info.device,
                         options=facts.options, source=facts.source,
                         target="" if end.outcome.target is None else str(end.outcome.target),
                         cases=len(end.results) + len(extra), exit_status=exit_status,
                         baseline=facts.baseline or "", root=facts.root, good=good)

        def record() -> None:
            self.recording = keeper.record(run, cases, len(end.results) + len(extra))
        self.recorded = self.attempt(record, "history not recorded", "interrupted while "
                                     "recording the history: nothing was recorded")

    def history_done(self) -> bool:
        """The history's outcome, once a child process that records it has finished (a large
        run: the figures and the reports are made meanwhile); False when the run was to be
        recorded and was not."""
        recording, self.recording = self.recording, None
        if recording is None:
            return self.recorded

        def wait() -> None:
            try:
                recording.result()
            finally:
                self.history_wait_s += recording.waited_s
                self.end.recorded = recording.written  # (interrupted after its commit: kept)
            if recording.child_peak_mib is not None:
                self.end.notes.append(f"history recorded by a child process (its peak memory "
                                      f"{recording.child_peak_mib:.0f} MiB)")
        self.recorded = self.attempt(wait, "history not recorded", "interrupted while a child "
                                     "process recorded the history (the summary says whether "
                                     "it had finished)")
        return self.recorded

    def draw_figures(self) -> None:
        """The report's figures (SVG text, report/figures.py, imported here only; none
        without matplotlib: the pages say so)."""
        from ..report.figures import draw_figures

        end = self.end
        hccl = None  # the collective tables of the written database's device
        if end.outcome.target is not None:
            hccl = Path(end.outcome.target).parent.parent / HCCL_DIR
        try:
            end.figures = draw_figures(end.results, end.outcome, hccl,
                                       min_effect=end.facts.threshold)
        except Exception as exc:  # a bug in a figure: say so, keep the reports
            end.notes.append(f"figures not drawn: {type(exc).__name__}: {exc}")
            end.figures = {}

    def write_reports(self, reports_dir: Path, inside: Path | None,
                      info: Callable[[], SessionInfo], history: Callable[[], str]) -> bool:
        """`info`: the session as the reports state it, asked for once their bulk is
        rendered (and kept in `end.info`: the terminal summary says the same); `history`:
        the line saying where the run was recorded, asked for before it."""
        from ..report.writer import write_reports

        end = self.end

        def session() -> SessionInfo:
            end.info = info()
            return end.info

        def write() -> None:
            if inside is not None:
                check_inside(inside, Path(reports_dir) / "report")
            end.paths = write_reports(end.outcome, end.results, session, Path(reports_dir),
                                      figures=end.figures, baseline=end.baseline,
                                      history=history)
        return self.attempt(write, "reports not written", "interrupted while writing the "
                                                          "reports: none was written")


def finish_run(facts: RunFacts, results: list, target: Target, *,
               info: Callable[[], SessionInfo], keeper: HistoryKeeper | None = None,
               notes: list[str] | None = None, extra_cases: Iterable = ()) -> RunEnd:
    """End a run: profile the demo model (if the target asks), judge (if its facts ask),
    write, record, draw, report.

    `info` is called once the target is written (the wall time runs to it); `keeper`: the
    run's history keeper when it has one open (the session's), else one is opened here and
    closed at the end; `notes`: the run's notes so far (appended to, in place);
    `extra_cases`: results of other kinds recorded with the run (collectives of a kernel
    session)."""
    from ..history.keeper import HistoryKeeper

    own_keeper = keeper is None
    if keeper is None:
        keeper = HistoryKeeper(facts.history if facts.record else None, facts.baseline,
                               facts.threshold, run_id=facts.run_id, started=facts.started,
                               device=lambda: facts.device)
    record, reports = facts.record, facts.reports
    end = RunEnd(facts, results, None, notes if notes is not None else [],
                 history=keeper.history if record else None)
    steps = _Steps(end, keeper)
    clock = PartClock()  # where the end of the run went (measure/overhead.py)
    try:
        if target.demo is not None:
            with clock.part(DEMO):
                if not steps.profile_demo(target.demo):
                    return end
        if facts.judge:
            with clock.part(VERDICTS):
                steps.judge()

        def write() -> None:
            end.outcome = target.write(results, facts)
        with clock.part(WRITE):
            if facts.write_errors == "raise":
                write()
            elif not steps.attempt(write, target.failed, target.interrupted):
                end.ok = False
                return end
        end.outcome.notes[:0] = end.notes
        end.reported = len(end.notes)
        end.info = _with_parts(info(), clock)
        if not (record or reports):
            return end
        entered = time.perf_counter()
        status = 1 if end.slower else facts.exit_status  # the run fails on a case judged here
        # A large run's history is written by a child process while the figures and the
        # reports are made here (history/recorder.py); the reports wait for it last.
        with clock.part(HISTORY):
            if record:
                steps.record_history(status, extra_cases, facts.good)
        if reports and target.reports_dir is not None and facts.figures:
            with clock.part(FIGURES):
                steps.draw_figures()
        end.baseline = keeper.label
        if reports and target.reports_dir is not None:
            rendering = time.perf_counter()

            def history_line() -> str:
                steps.history_done()
                return end.history_line()

            # The wall time runs to the reports (measure/overhead.py: one definition): the
            # history, the figures and the bulk of the reports count; what is left is
            # rendering their summaries and writing the files. The wait for the history's
            # child is the history's.
            def reported() -> SessionInfo:
                clock.add(HISTORY, steps.history_wait_s)
                clock.add(REPORTS, time.perf_counter() - rendering - steps.history_wait_s)
                return _with_parts(dataclasses.replace(
                    end.info, wall_s=end.info.wall_s + time.perf_counter() - entered), clock)
            written = steps.write_reports(target.reports_dir, target.inside, reported,
                                          history_line)
        else:
            written = True
        with clock.part(HISTORY):
            recorded = steps.history_done()
        if not (reports and target.reports_dir is not None):
            end.info = _with_parts(dataclasses.replace(
                end.info, wall_s=end.info.wall_s + time.perf_counter() - entered), clock)
        end.ok = recorded and written
        return end
    finally:
        end.baseline = keeper.label
        steps.history_done()  # a step's error on its way out: the history's outcome known first
        if own_keeper:
            keeper.close()


def _with_parts(info: SessionInfo, clock: PartClock) -> SessionInfo:
    """The session with the end of the run's parts so far."""
    return dataclasses.replace(info, parts={**info.parts, **clock.parts})


def summary_lines(end: RunEnd) -> list[str]:
    """The terminal summary of a finished run: the notes the reports do not hold (those
    made after them, or all of them when nothing was written), then the summary."""
    lines = list(end.notes[end.reported:])
    if end.outcome is not None and end.info is not None:
        from ..report.terminal import terminal_lines

        lines += terminal_lines(end.outcome, end.results, end.info, end.paths,
                                baseline=end.baseline, history=end.history_line())
    return lines
