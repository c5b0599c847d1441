"""One pytest session of replays: which database, which device, where results go.

The plugin's hooks call into this object; it holds no pytest hook of its own. Every process
that runs cases (the serial process, or each xdist worker) measures; only the process that
owns the session (the serial process, or the xdist controller) writes, at the end.
"""

from __future__ import annotations

import datetime as _dt
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..db.database import Database
from ..db.errors import NpuperfError
from ..db.layout import REPORTS_DIR, check_component, database_dir, device_of
from ..db.lock import DatabaseLock
from ..db.table import check_writable_dir
from ..db.transaction import check_inside
from ..devices import BackendError, check_workers, select_backend
from ..measure.clock import process_start
from ..measure.host import available_cores, default_threads, host_load, worker_cores
from ..measure.result import (
    METHOD_EVENTS,
    METHOD_GRAPH,
    METHOD_PROFILER,
    STATUS_CRASHED,
    STATUS_ERROR,
    STATUS_SKIPPED,
    CaseResult,
)
from ..replay.cases import CaseCatalog, CaseRef, marker_name
from ..replay.outcome import BackfillOutcome, SessionInfo
from ..replay.shard import in_shard
from ..replay.writeback import backfill
from ..report.writer import ReportPaths
from ..run.finish import Publisher, RunFacts
from .options import Settings, check_db_dir, read_settings
from .stash import RESULT_PROPERTY as RESULT_PROPERTY
from .stash import SESSION_KEY as SESSION_KEY
from .stash import replay_session as replay_session
from .stash import started_at

if TYPE_CHECKING:  # torch: imported when the first case runs, not when cases are collected
    from ..devices import Backend
    from ..history.compare import Comparison
    from ..history.keeper import HistoryKeeper
    from ..profiling.session_profiler import SessionProfiler
    from ..replay.runner import CaseRunner


def _worker_index(config: pytest.Config) -> int | None:
    workerinput = getattr(config, "workerinput", None)
    if not workerinput:
        return None
    worker_id = str(workerinput.get("workerid", "gw0"))
    digits = "".join(ch for ch in worker_id if ch.isdigit())
    return int(digits) if digits else 0


def _worker_count(config: pytest.Config) -> int:
    """Processes measuring in this run: xdist's workers, or this one process."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput:
        return int(workerinput.get("workercount", 1))
    tx = getattr(config.option, "tx", None) or []
    return len(tx) if tx and getattr(config.option, "dist", "no") != "no" else 1


class ReplaySession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = started_at(config)
        start = _dt.datetime.fromtimestamp(self.started)
        self.started_iso = start.isoformat(timespec="seconds")
        self.stamp = start.strftime("%Y%m%d_%H%M%S")
        self.process_started, self.wall_from = process_start()
        self.cores = len(available_cores())
        self.load_at_start = host_load()
        self._final_info: SessionInfo | None = None  # taken once, after backfill
        self.run_id = f"{self.stamp}-{uuid.uuid4().hex[:8]}"
        self.is_worker = hasattr(config, "workerinput")
        self._settings: Settings | None = None
        self._backend: Backend | None = None
        self._catalog: CaseCatalog | None = None
        self._refs: list[CaseRef] | None = None
        self._runner: CaseRunner | None = None
        self._lock: DatabaseLock | None = None
        self._own: Database | None = None  # this device's database, when not the source
        self._profiler: SessionProfiler | None = None
        self.collection_error: str | None = None  # raised as a UsageError after collection
        self.interrupted = False
        self.writes_ready = False  # checked writable (and locked) before the first case
        self.active = False  # any replay case collected (or reported) in this session
        self.results: list[CaseResult] = []
        self.outcome: BackfillOutcome | None = None
        self.paths: ReportPaths | None = None
        self.notes: list[str] = []
        self._keeper: HistoryKeeper | None = None
        self.figures: dict[str, str] = {}  # report figures (SVG), drawn once after backfill
        self.recorded = 0  # cases recorded in the history
        # History records of other kinds of cases (collectives) to record with the run.
        self.extra_history_cases: list = []
        self._publisher: Publisher | None = None

    # -- configuration ------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = read_settings(self.config)
        return self._settings

    @property
    def profiler(self) -> SessionProfiler:
        """The session's device profiler (--npuperf-profiler): see session_profiler.py."""
        if self._profiler is None:
            from ..profiling.session_profiler import SessionProfiler

            self._profiler = SessionProfiler(self.settings.profiler, self.settings.device,
                                             self.settings.out, self.run_id)
            self.notes += self._profiler.notes
        return self._profiler

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            try:
                backend = select_backend(self.settings.device, _worker_index(self.config),
                                         self.settings.device_name)
            except BackendError as exc:
                raise pytest.UsageError(str(exc)) from None
            from ..devices.npu import same_family

            self._share_host(backend)
            if not self.settings.dry_run:  # a CPU measures its peaks once per host
                backend.peak_cache_dir = self.settings.out
            if (backend.kind == "npu" and not self.settings.device_name
                    and same_family(backend.device_name(), self.source_device)):
                # An NPU measuring a database of its own product family: the SoC name cannot
                # tell which Atlas product it is (e.g. 752T and 560T A3 dies); the database's
                # own name can. Another family's database is never taken for ours.
                backend.database_device_name = self.source_device
            self._backend = backend
        return self._backend

    @property
    def workers(self) -> int:
        return _worker_count(self.config)

    @property
    def threads(self) -> int:
        """Intra-op threads of each measuring process of a CPU session."""
        return self.settings.threads or default_threads(self.cores, self.workers)

    def _share_host(self, backend: Backend) -> None:
        """CPU: pin this process's threads (and, under xdist, its own cores). GPU and NPU:
        worker K measures on device K, so never more workers than devices."""
        if backend.kind == "cpu" and hasattr(backend, "share"):
            index = _worker_index(self.config)
            cores = (worker_cores(available_cores(), self.workers, index)
                     if index is not None and self.workers > 1 else None)
            backend.share(self.threads, cores)
        try:
            check_workers(backend.kind, self.workers)
        except BackendError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None

    @property
    def source(self) -> Path:
        return self.settings.db

    @property
    def source_device(self) -> str | None:
        return device_of(self.source)

    @property
    def native(self) -> bool:
        """Whether the source database belongs to the measuring device."""
        if self.settings.grid:
            return False
        return self.backend.database_device() == self.source_device

    @property
    def target(self) -> Path:
        """The database this session writes: the source if it is ours, else our own copy."""
        if self.native:
            return self.source
        try:
            return database_dir(self.settings.out, self.backend.database_device(),
                                self.source.name)
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None

    @property
    def reports_dir(self) -> Path:
        return (self.source if self.native else self.settings.out) / REPORTS_DIR

    def check_source(self) -> None:
        check_db_dir(self.source)

    @property
    def method(self) -> str:
        method = self.settings.method
        flush = self.settings.policy.flush_l2
        if method == "auto":
            if self.backend.kind == "cuda":
                # A flush between calls cannot be separated from a graph replay's time; the
                # profiler times the kernels alone (see measure/graph.py).
                return METHOD_PROFILER if flush else METHOD_GRAPH
            return METHOD_EVENTS
        if method == METHOD_PROFILER and self.backend.kind == "npu":
            # torch.profiler records no NPU kernels; on an NPU device time comes from msprof.
            raise pytest.UsageError("--npuperf-method profiler is for cpu and cuda; on an NPU "
                                    "use events (or run the session under msprof)")
        if method == METHOD_GRAPH and self.backend.graphs() is None:
            raise pytest.UsageError(f"--npuperf-method graph needs device graphs (cuda); on "
                                    f"{self.backend.kind} use events (or auto)")
        if method == METHOD_GRAPH and flush:
            raise pytest.UsageError("--npuperf-method graph cannot time an L2 flush apart from "
                                    "the kernel; with --npuperf-flush-l2 use profiler (auto "
                                    "picks it on cuda)")
        return method

    @property
    def catalog(self) -> CaseCatalog:
        if self._catalog is None:
            self._register_user_kernels()
            if self.settings.grid:
                self._catalog = self._grid_catalog()
            else:
                self.check_source()
                try:
                    check_component(self.source.name, "database directory name")
                    self._catalog = CaseCatalog(self.source)
                except NpuperfError as exc:
                    raise pytest.UsageError(f"--npuperf-db: {exc}") from None
                self.notes += self._catalog.database.notes
                for name, error in self._catalog.failed.items():
                    self.notes.append(f"{name} could not be read; its case errors with the "
                                      f"reason: {error}")
        return self._catalog

    def _register_user_kernels(self) -> None:
        """Kernels of installed entry points, then of `pytest_npuperf_register_kernels` hooks:
        known before any row becomes a case."""
        from ..kernels.extensions import load_entry_points, register

        try:
            load_entry_points()
            self.config.hook.pytest_npuperf_register_kernels(register=register)
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None

    def _grid_catalog(self) -> CaseCatalog:
        from ..grid import generate_rows

        config = None if self.settings.grid == "default" else self.settings.grid
        try:
            return CaseCatalog.from_rows(self.source, generate_rows(None, config_path=config))
        except NpuperfError as exc:
            raise pytest.UsageError(f"--npuperf-grid: {exc}") from None

    # -- collection ---------------------------------------------------------------------------
    def case_refs(self) -> list[CaseRef]:
        if self._refs is None:
            skip = None
            if self.settings.update_mode == "missing-only" and not self.settings.grid:
                skip = self._measured_in_target()
            shard = self.settings.shard
            self._refs = [ref for ref in self.catalog.cases(skip=skip)
                          if in_shard(ref.case_id, shard)]
        return self._refs

    def _measured_in_target(self) -> set[tuple[str, object]]:
        if self.native:
            return self.catalog.measured()
        target = self.target
        if not target.is_dir():
            return set()
        try:
            own = CaseCatalog(target)
        except NpuperfError as exc:
            raise pytest.UsageError(f"cannot read this device's database {target}: {exc}") from None
        self._own = own.database  # backfill updates this read, not a new one
        return own.measured()

    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        self.active = True
        try:
            refs = self.case_refs()
        except pytest.UsageError as exc:
            # Raised from pytest_collection_finish: pytest prints a UsageError as one line
            # there, while from here it would be a collection traceback.
            self.collection_error = str(exc)
            self.active = False
            metafunc.parametrize("npuperf_case", [])
            return
        marks: dict[str, tuple] = {}
        params = []
        for ref in refs:
            if ref.kernel_type not in marks:
                name = marker_name(ref.kernel_type)
                self.config.addinivalue_line("markers", f"{name}: replay cases of {ref.kernel_type}")
                mark = getattr(pytest.mark, name)
                skip = pytest.mark.skip(reason=f"no replay for {ref.kernel_type} yet; the row is kept")
                marks[ref.kernel_type] = (mark,) if ref.replayable else (mark, skip)
            # A case standing for an unreadable file errors (not skips) with the file's problem.
            case_marks = marks[ref.kernel_type][:1] if ref.problem else marks[ref.kernel_type]
            params.append(pytest.param(ref, id=ref.case_id, marks=case_marks))
        metafunc.parametrize("npuperf_case", params)

    # -- before the first case: fail early, and only one writer -------------------------------
    def prepare_writes(self) -> None:
        """Check the database this session will write and take its lock (owner process only);
        under xdist, first that every worker has a device of its own."""
        if self.is_worker or self.config.option.collectonly:
            return
        if self.workers > 1:
            _ = self.backend  # refuses more workers than devices before any case runs
        self.profiler.check(self.backend.kind)
        self._preflight()
        if not self.writes_ready:
            try:
                self.keeper.check(write=not self.settings.dry_run)
            except NpuperfError as exc:
                self.active = False
                raise pytest.UsageError(f"npuperf: {exc}") from None
        if self.writes_ready or self.settings.dry_run:
            return
        if self.settings.grid:
            targets = [self.reports_dir]
        else:
            targets = [self.target, self.reports_dir]
        try:
            base = self.source if self.native and not self.settings.grid else self.settings.out
            check_inside(base, self.reports_dir / "report")  # no symlink leads out of it
            for directory in targets:
                check_writable_dir(directory)
            if not self.settings.grid:
                target = Database(self.target)
                self._lock = target.lock(f"pytest run {self.run_id}")
                self.notes += target.notes
            self.writes_ready = True
        except NpuperfError as exc:
            self.active = False  # nothing will be measured, so nothing must be written
            raise pytest.UsageError(f"npuperf: {exc}") from None

    def _preflight(self) -> None:
        """NPU sessions: the database's software stack against the running one (a warning,
        an error with --npuperf-strict-stack) and the custom-operator environment of the
        selected kernel types, said before the first case."""
        if self.settings.grid or self.backend.kind != "npu":
            return
        from ..replay.preflight import custom_op_problems, stack_mismatches

        mismatches = stack_mismatches(self.source.name)
        if mismatches and self.settings.strict_stack:
            raise pytest.UsageError(f"npuperf: --npuperf-strict-stack: {'; '.join(mismatches)}")
        lines = [f"warning: {m} (--npuperf-strict-stack makes this an error)" for m in mismatches]
        lines += [f"warning: {p} (these cases will fail)"
                  for p in custom_op_problems({r.kernel_type for r in self.case_refs()})]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            self.notes.append(line.removeprefix("warning: "))
            if reporter is not None:
                reporter.write_line(f"npuperf: {line}")

    def release(self) -> None:
        if self._keeper is not None:
            self._keeper.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- cases ----------------------------------------------------------------------------------
    @property
    def runner(self) -> CaseRunner:
        if self._runner is None:
            from ..replay.runner import CaseRunner, RunnerOptions

            profiler = self.profiler
            self._runner = CaseRunner(self.backend, RunnerOptions(
                policy=self.settings.policy, method=self.method,
                case_timeout_s=self.settings.case_timeout_s, verify=self.settings.verify,
                profiled=profiler.profiled))
            profiler.start(self.backend)  # before the first case: markers, profiler session
        return self._runner

    @property
    def keeper(self) -> HistoryKeeper:
        if self._keeper is None:
            from ..history.keeper import HistoryKeeper

            settings = self.settings
            self._keeper = HistoryKeeper(
                None if settings.dry_run else settings.history, settings.baseline,
                settings.regression_threshold, run_id=self.run_id, started=self.started,
                device=lambda: self.backend.database_device())
        return self._keeper

    def judge(self, result: CaseResult) -> Comparison | None:
        """The case against the baseline, where it ran (see history/keeper.py)."""
        return self.keeper.judge(result) if self.settings.baseline else None

    def judge_case(self, ref: CaseRef, nodeid: str, result: CaseResult
                   ) -> tuple[CaseResult, Comparison | None]:
        """The verdict of a case just measured. A SLOWER verdict is confirmed before it fails
        the case: the case is measured once more and the faster of the two measurements (noise
        only ever slows one down) is judged, so that a stretch of interference from other work
        on the machine does not fail a nightly job."""
        comparison = self.judge(result)
        if comparison is None or comparison.verdict != "SLOWER":
            return result, comparison
        again = self.run_case(ref, nodeid)
        note = "re-measured to confirm a SLOWER verdict"
        if again.measured and again.stats is not None and result.stats is not None \
                and again.stats.median < result.stats.median:
            again.wall_s += result.wall_s
            again.time_in_calls_s += result.time_in_calls_s
            result = again
            note += ", the second measurement kept (faster)"
        result.note = f"{result.note}; {note}" if result.note else note
        return result, self.judge(result)

    def judge_late(self, report: pytest.TestReport, data: dict) -> None:
        """Owner process: a result that arrives without a verdict (its worker could not open
        the baseline) is judged here, and a SLOWER case's passed report becomes a failure
        before pytest counts it (this runs first among the report hooks)."""
        if self.is_worker or not self.settings.baseline or data.get("regression") is not None \
                or report.when != "call":
            return
        result = CaseResult.from_dict(data)
        comparison = self.judge(result)
        if comparison is None:
            return
        data["regression"] = result.regression
        if comparison.verdict == "SLOWER" and report.passed:
            report.outcome = "failed"
            report.longrepr = f"{comparison.describe()} [judged by the controller]"

    def run_case(self, ref: CaseRef, nodeid: str) -> CaseResult:
        row = self.catalog.row(ref)
        result = self.runner.run(ref, row, nodeid, str(self.source / ref.file))
        self.profiler.tag(result)
        return result

    def close_runner(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._profiler is not None:
            self._profiler.stop()

    # -- results and the end of the session ------------------------------------------------------
    def record(self, data: dict) -> None:
        self.active = True
        self.results.append(CaseResult.from_dict(data))

    def record_crash(self, nodeid: str, message: str) -> None:
        """A case whose xdist worker died: no result came back, so the controller makes one
        (status `crashed`, written to its row), and the session fails."""
        case_id = nodeid.rsplit("[", 1)[-1].rstrip("]") if nodeid.endswith("]") else ""
        ref = next((r for r in self.case_refs() if r.case_id == case_id), None) \
            if case_id and self._refs is not None else None
        if ref is None:
            return
        self.active = True
        self.results.append(CaseResult(
            case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type, file=ref.file,
            signature=ref.signature, row=ref.row_number, status=STATUS_CRASHED,
            error=" ".join(message.split()), method=""))

    def problem_result(self, ref: CaseRef, nodeid: str) -> CaseResult:
        """The result of a case whose file could not be read."""
        return CaseResult(case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type,
                          file=ref.file, signature="", row=None, status=STATUS_ERROR,
                          error=ref.problem, method="")

    def skipped_result(self, ref: CaseRef, nodeid: str, reason: str) -> CaseResult:
        return CaseResult(case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type,
                          file=ref.file, signature=ref.signature, row=ref.row_number,
                          status=STATUS_SKIPPED, error=reason, method="")

    def session_info(self) -> SessionInfo:
        """The session so far; after backfill, the figures the reports were written with (so
        that the terminal prints the duty cycle the run JSON holds)."""
        if self._final_info is not None:
            return self._final_info
        return SessionInfo(run_id=self.run_id, started=self.started_iso,
                           wall_s=time.time() - self.process_started,
                           device=self.backend.describe(), options=self.settings.as_dict(),
                           workers=self.workers, wall_from=self.wall_from, cores=self.cores,
                           load_at_start=self.load_at_start,
                           threads=self.threads if self.backend.kind == "cpu" else None)

    def _attempt(self, step, failed: str, interrupted: str) -> bool:
        """Run a writing step; a failure or Ctrl-C becomes a note (nothing half written)."""
        publisher = self.publisher()
        done = publisher.attempt(step, failed, interrupted)
        self.interrupted = self.interrupted or publisher.interrupted
        return done

    def finish(self, interrupted: bool, exitstatus: int | None = None) -> bool:
        """Backfill, record the run in the history, write reports (owner process). False
        when the backfill failed."""
        if not self.active or self.is_worker or self.config.option.collectonly:
            return True
        settings = self.settings
        if self.profiler.mode == "child":
            return self._hand_off(interrupted)
        if not self.writes_ready and not (settings.dry_run and self.results):
            return True  # no case ran (all deselected, or a usage error): nothing to write
        if interrupted:
            self.notes.append("session interrupted: the database was left as it was")
            return True
        self.notes += self.profiler.complete(self.results, settings.keep_prof)
        if settings.grid:
            self.outcome = BackfillOutcome(source=self.source, target=None, native=False,
                                           dry_run=settings.dry_run, run_id=self.run_id,
                                           stamp=self.stamp)
            self.outcome.notes.append("grid cases: measured, not written to any database")
        else:
            def write_database() -> None:
                self.outcome = backfill(
                    self.source, self.target, self.results, native=self.native,
                    prune_empty=settings.prune_empty, dry_run=settings.dry_run,
                    run_id=self.run_id, stamp=self.stamp, snapshot=self.catalog.database,
                    own=self._own, lock=self._lock or True,
                    purpose=f"pytest run {self.run_id}")
            if not self._attempt(write_database, "backfill failed, the database was left as it "
                                                 "was", "interrupted during backfill: the "
                                                        "database was left as it was"):
                return False
        self._final_info = self.session_info()
        if settings.dry_run:
            return True
        publisher = self.publisher()
        done = publisher.finish(
            self.outcome, self.results, self._final_info, self.reports_dir,
            exit_status=exitstatus, extra_cases=self.extra_history_cases,
            inside=self.source if self.native and not settings.grid else settings.out)
        self.interrupted = self.interrupted or publisher.interrupted
        self.recorded, self.figures, self.paths = (publisher.recorded, publisher.figures,
                                                   publisher.paths)
        self._final_info = publisher.info or self._final_info  # the duty cycle the JSON holds
        return done

    # -- history, figures and reports (after the backfill) ---------------------------------------
    def publisher(self) -> Publisher:
        """The end of the run shared with the msprof parent and `npuperf backfill`."""
        if self._publisher is None:
            settings = self.settings
            facts = RunFacts(run_id=self.run_id, started=self.started,
                             started_iso=self.started_iso, source=str(self.source),
                             options=settings.as_dict(), history=settings.history,
                             baseline=settings.baseline,
                             threshold=settings.regression_threshold, figures=settings.figures,
                             root=Path(self.config.rootpath))
            self._publisher = Publisher(facts, device=lambda: self.backend.database_device(),
                                        keeper=self.keeper, notes=self.notes)
        return self._publisher

    def history_line(self) -> str:
        return self.publisher().history_line()

    @property
    def records_run(self) -> bool:
        """Whether `finish` will record a run in the history here: kernel cases ran in this
        (owner) process and are written by it (not handed to an msprof parent)."""
        return (self.active and not self.is_worker and self.writes_ready and bool(self.results)
                and not self.settings.dry_run and self.settings.history is not None
                and (self._profiler is None or self._profiler.mode != "child"))

    def _hand_off(self, interrupted: bool) -> bool:
        """The msprof child: what was measured goes to the parent, which writes."""
        import dataclasses

        if interrupted:
            self.notes.append("session interrupted: no hand-off written")
            return True
        grid = bool(self.settings.grid)
        header = {
            "source": str(self.source), "target": None if grid else str(self.target),
            "native": False if grid else self.native, "grid": grid,
            "reports_dir": str(self.reports_dir), "run_id": self.run_id, "stamp": self.stamp,
            "dry_run": self.settings.dry_run, "prune_empty": self.settings.prune_empty,
            "keep_prof": self.settings.keep_prof, "writes_ready": self.writes_ready,
            "root": str(self.config.rootpath),
            "info": dataclasses.asdict(self.session_info()), "notes": list(self.notes)}
        self.release()  # the parent takes the lock for its backfill
        self._attempt(lambda: self.profiler.write_handoff(header, self.results),
                      "the hand-off to the msprof parent was not written",
                      "interrupted while writing the hand-off")
        self.notes.append(f"measured {len(self.results)} case(s) under msprof; the parent "
                          f"process attributes the kernels and writes the database")
        return True
