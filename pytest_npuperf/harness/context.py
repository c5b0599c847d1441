"""What both roles of a replay run share in one process: the run's identity and settings, the
measuring device, the database the cases come from and the one they go to, the cases.

An `Owner` and a `Measurer` (owner.py, measurer.py) each hold the process's one context; in a
serial run it is the same object for both. Nothing here writes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..db.errors import NpuperfError
from ..devices import BackendError, check_workers, select_backend
from ..kernels.implementation_options import ALL, AUTO, BEST
from ..measure.clock import inherited_run
from ..measure.host import available_cores, default_threads, host_load, worker_cores
from ..measure.policy import auto_method
from ..measure.result import METHOD_GRAPH, METHOD_PROFILER
from ..replay.cases import CaseCatalog, CaseRef, with_implementations
from ..replay.outcome import SessionInfo
from ..replay.shard import in_shard
from .destination import Destination, destination_for
from .options import Settings, read_settings
from .stash import started_at, wall_origin

if TYPE_CHECKING:  # torch: imported when the first case runs, not when cases are collected
    from ..devices import Backend
    from ..history.keeper import HistoryKeeper
    from ..profiling.session_profiler import SessionProfiler


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


class RunContext:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.identity = inherited_run(started_at(config))
        self.wall_origin, self.wall_from = wall_origin(config)
        self.cores = len(available_cores())
        self.load_at_start = host_load()
        self.notes: list[str] = []  # said at the end of the run, and in its reports
        self.parts: dict[str, float] = {}  # the session's own overhead (measure/overhead.py)
        self.collection_error: str | None = None  # raised as a UsageError after collection
        self._settings: Settings | None = None
        self._backend: Backend | None = None
        self._destination: Destination | None = None
        self._catalog: CaseCatalog | None = None
        self._refs: list[CaseRef] | None = None
        self._keeper: HistoryKeeper | None = None
        self._profiler: SessionProfiler | None = None

    @property
    def run_id(self) -> str:
        return self.identity.run_id

    @property
    def started(self) -> float:
        return self.identity.started

    # -- configuration ------------------------------------------------------------------------
    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = read_settings(self.config)
        return self._settings

    @property
    def destination(self) -> Destination:
        """Where the cases come from and the results go (a database, or grid points)."""
        if self._destination is None:
            self._destination = destination_for(self)
        return self._destination

    @property
    def profiler(self) -> SessionProfiler:
        """The session's device profiler (--npuperf-profiler): see session_profiler.py."""
        if self._profiler is None:
            from ..profiling.session_profiler import SessionProfiler

            settings = self.settings
            self._profiler = SessionProfiler(
                settings.profiler, settings.device, settings.out, self.run_id,
                graph_timing=settings.method in ("auto", METHOD_GRAPH)
                and not settings.policy.flush_l2)
            self.notes += self._profiler.notes
        return self._profiler

    def stop_profiler(self) -> None:
        if self._profiler is not None:
            self._profiler.stop()

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
            source_device = self.destination.source_device
            if (backend.kind == "npu" and not self.settings.device_name
                    and same_family(backend.device_name(), source_device)):
                # An NPU measuring a database of its own product family: the SoC name cannot
                # tell which Atlas product it is (e.g. 752T and 560T A3 dies); the database's
                # own name can. Another family's database is never taken for ours.
                backend.database_device_name = source_device
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
    def method(self) -> str:
        method = self.settings.method
        flush = self.settings.policy.flush_l2
        if method == "auto":
            kind = self.backend.kind
            return auto_method(kind, flush=flush, graphs=self.backend.graphs() is not None,
                               profiled=kind == "npu" and self.profiler.profiled)
        if method == METHOD_PROFILER and self.backend.kind == "npu":
            # torch.profiler records no NPU kernels; on an NPU device time comes from msprof.
            raise pytest.UsageError("--npuperf-method profiler is for cpu and cuda; on an NPU "
                                    "use events (or run the session under msprof)")
        if method == METHOD_GRAPH and self.backend.graphs() is None:
            raise pytest.UsageError(f"--npuperf-method graph needs device graphs (cuda, npu); on "
                                    f"{self.backend.kind} use events (or auto)")
        if method == METHOD_GRAPH and flush:
            raise pytest.UsageError("--npuperf-method graph cannot time an L2 flush apart from "
                                    "the kernel; with --npuperf-flush-l2 use profiler (auto "
                                    "picks it on cuda)")
        return method

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

    # -- the cases ----------------------------------------------------------------------------
    @property
    def catalog(self) -> CaseCatalog:
        if self._catalog is None:
            self._register_user_kernels()
            self._catalog = self.destination.catalog()
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

    def case_refs(self) -> list[CaseRef]:
        if self._refs is None:
            skip = (self.destination.measured(self.catalog)
                    if self.settings.update_mode == "missing-only" else None)
            shard = self.settings.shard
            refs = [ref for ref in self.catalog.cases(skip=skip)
                    if in_shard(ref.case_id, shard)]
            # A named implementation is checked here, before any case runs (auto and best
            # need no device at collection).
            if self.settings.impl not in (AUTO, BEST) and self.impl == ALL:
                refs = with_implementations(refs, self._implementations_of)
            self._refs = refs
        return self._refs

    @property
    def impl(self) -> str:
        """--npuperf-impl for this device (auto resolved); a name that cannot run here at all
        is a usage error."""
        from ..kernels.implementation_options import known_names, resolve_mode

        mode = resolve_mode(self.settings.impl, self.backend.kind)
        if mode in known_names():
            from ..kernels.implementation_options import absent_everywhere

            why = absent_everywhere(mode, self.backend.kind)
            if why:
                raise pytest.UsageError(f"--npuperf-impl {mode}: {why}")
        return mode

    def _implementations_of(self, kernel_type: str) -> list[str]:
        from ..kernels.registry import spec_for
        from ..replay.choice import available

        spec = spec_for(kernel_type)
        return [] if spec is None else available(kernel_type, self.backend.kind,
                                                 portable=spec.has_portable_path())

    @property
    def cases_known(self) -> bool:
        return self._refs is not None

    def row(self, ref: CaseRef) -> dict[str, str]:
        return self.catalog.row(ref)

    def session_info(self) -> SessionInfo:
        """The session so far."""
        return SessionInfo(run_id=self.run_id, started=self.identity.started_iso,
                           wall_s=time.time() - self.wall_origin,
                           device=self.backend.describe(), options=self.settings.as_dict(),
                           workers=self.workers, wall_from=self.wall_from, cores=self.cores,
                           load_at_start=self.load_at_start,
                           threads=self.threads if self.backend.kind == "cpu" else None,
                           parts=dict(self.parts))

    @property
    def rootpath(self) -> Path:
        return Path(self.config.rootpath)

    def release(self) -> None:
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None
