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

import pytest

from .db.database import Database
from .db.errors import NpuperfError
from .db.layout import REPORTS_DIR, check_component, database_dir, device_of
from .db.lock import DatabaseLock
from .db.table import check_writable_dir
from .db.transaction import check_inside
from .devices import Backend, BackendError, select_backend
from .devices.npu import same_family
from .measure.backfill import backfill
from .measure.cases import CaseCatalog, CaseRef, marker_name
from .measure.outcome import BackfillOutcome, SessionInfo
from .measure.result import (
    METHOD_EVENTS,
    METHOD_PROFILER,
    STATUS_CRASHED,
    STATUS_ERROR,
    STATUS_SKIPPED,
    CaseResult,
)
from .measure.runner import CaseRunner, RunnerOptions
from .options import Settings, check_db_dir, read_settings
from .report.writer import ReportPaths, write_reports

RESULT_PROPERTY = "npuperf_result"
SESSION_KEY = pytest.StashKey["ReplaySession"]()


def replay_session(config: pytest.Config) -> ReplaySession:
    """The replay session of a pytest run (created in pytest_configure)."""
    return config.stash[SESSION_KEY]


def _worker_index(config: pytest.Config) -> int | None:
    workerinput = getattr(config, "workerinput", None)
    if not workerinput:
        return None
    worker_id = str(workerinput.get("workerid", "gw0"))
    digits = "".join(ch for ch in worker_id if ch.isdigit())
    return int(digits) if digits else 0


class ReplaySession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.time()
        self.started_iso = _dt.datetime.now().isoformat(timespec="seconds")
        self.stamp = _dt.datetime.now().strftime("%Y%m%d_%H%M%S")
        self.run_id = f"{self.stamp}-{uuid.uuid4().hex[:8]}"
        self.is_worker = hasattr(config, "workerinput")
        self._settings: Settings | None = None
        self._backend: Backend | None = None
        self._catalog: CaseCatalog | None = None
        self._refs: list[CaseRef] | None = None
        self._runner: CaseRunner | None = None
        self._lock: DatabaseLock | None = None
        self._own: Database | None = None  # this device's database, when not the source
        self.collection_error: str | None = None  # raised as a UsageError after collection
        self.interrupted = False
        self.writes_ready = False  # checked writable (and locked) before the first case
        self.active = False  # any replay case collected (or reported) in this session
        self.results: list[CaseResult] = []
        self.outcome: BackfillOutcome | None = None
        self.paths: ReportPaths | None = None
        self.notes: list[str] = []

    # -- configuration ------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = read_settings(self.config)
        return self._settings

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            try:
                backend = select_backend(self.settings.device, _worker_index(self.config),
                                         self.settings.device_name)
            except BackendError as exc:
                raise pytest.UsageError(str(exc)) from None
            if (backend.kind == "npu" and not self.settings.device_name
                    and same_family(backend.device_name(), self.source_device)):
                # An NPU measuring a database of its own product family: the SoC name cannot
                # tell which Atlas product it is (e.g. 752T and 560T A3 dies); the database's
                # own name can. Another family's database is never taken for ours.
                backend.database_device_name = self.source_device
            self._backend = backend
        return self._backend

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
        if method == "auto":
            return METHOD_PROFILER if self.backend.kind == "cuda" else METHOD_EVENTS
        if method == METHOD_PROFILER and self.backend.kind == "npu":
            # torch.profiler records no NPU kernels; on an NPU device time comes from msprof.
            raise pytest.UsageError("--npuperf-method profiler is for cpu and cuda; on an NPU "
                                    "use events (or run the session under msprof)")
        return method

    @property
    def catalog(self) -> CaseCatalog:
        if self._catalog is None:
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

    def _grid_catalog(self) -> CaseCatalog:
        from .grid import generate_rows

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
            self._refs = list(self.catalog.cases(skip=skip))
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
        """Check the database this session will write and take its lock (owner process only)."""
        if (self.is_worker or self.writes_ready or self.settings.dry_run
                or self.config.option.collectonly):
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

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- cases ----------------------------------------------------------------------------------
    @property
    def runner(self) -> CaseRunner:
        if self._runner is None:
            self._runner = CaseRunner(self.backend, RunnerOptions(
                policy=self.settings.policy, method=self.method,
                case_timeout_s=self.settings.case_timeout_s))
        return self._runner

    def run_case(self, ref: CaseRef, nodeid: str) -> CaseResult:
        row = self.catalog.row(ref)
        return self.runner.run(ref, row, nodeid, str(self.source / ref.file))

    def close_runner(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None

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
        workers = int(getattr(self.config.option, "numprocesses", 0) or 0) or 1
        return SessionInfo(run_id=self.run_id, started=self.started_iso,
                           wall_s=time.time() - self.started, device=self.backend.describe(),
                           options=self.settings.as_dict(), workers=workers)

    def _attempt(self, step, failed: str, interrupted: str) -> bool:
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

    def finish(self, interrupted: bool) -> bool:
        """Backfill and write reports (owner process). False when the backfill failed."""
        if not self.active or self.is_worker or self.config.option.collectonly:
            return True
        settings = self.settings
        if not self.writes_ready and not (settings.dry_run and self.results):
            return True  # no case ran (all deselected, or a usage error): nothing to write
        if interrupted:
            self.notes.append("session interrupted: the database was left as it was")
            return True
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
        if not settings.dry_run:
            def write() -> None:
                check_inside(self.source if self.native and not settings.grid else settings.out,
                             self.reports_dir / "report")
                self.paths = write_reports(self.outcome, self.results, self.session_info(),
                                           self.reports_dir)
            if not self._attempt(write, "reports not written", "interrupted while writing the "
                                                              "reports: none was written"):
                return False
        return True
