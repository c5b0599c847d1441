"""One pytest session of collective cases (bench/test_collectives.py), on one rank of a job.

Every rank collects the same cases in the same order (the sweep depends on options and the
job's size only) and runs them in lockstep. Before the first collective the ranks compare a
hash of the case ids they selected: a rank with another `-k` fails the session with a usage
error on every rank. Only rank 0 keeps results, prints the summary and writes the hcom tables
and the reports, at the end of the session (or, when the watchdog finds it stuck, from the
watchdog; comm/guard.py). After a fault (a rank died or hung) the remaining cases fail at once
and the session ends; what was measured is written.

Where tables go: `<root>/<DEVICE>/hccl/<version>/`, root being the database root of
--npuperf-db when that database belongs to the measuring device, else --npuperf-out, as for
kernel replays: another device's tables are never touched.

Light until a case runs: the options and the sweep need no torch; `start` (after collection,
under torchrun) imports it and joins the job.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ..comm.collective_result import FAILING, STATUS_FAULT, STATUS_SKIPPED, CommResult
from ..comm.launch import rank_env
from ..comm.ops import OPS
from ..comm.sweep import CommPoint, build_points
from ..db.errors import NpuperfError
from ..db.layout import database_dir, detect_cann_version, device_of, hccl_dir
from ..measure.clock import mint_run
from .comm_options import read_comm_settings
from .options import read_settings

if TYPE_CHECKING:
    from ..comm.guard import Guard
    from ..comm.runtime import TorchFabric
    from ..devices import Backend
    from ..run.finish import RunEnd, RunFacts

PARAM = "npuperf_comm_case"
NEEDS_RANKS = ("collective cases run across ranks: torchrun --nproc-per-node N -m pytest ..., "
               "or --npuperf-nproc N")
_STALL_GRACE_S = 30.0


def case_point(item: pytest.Item) -> CommPoint | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get(PARAM) if callspec else None
    return value if isinstance(value, CommPoint) else None


class CommSession:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        try:
            self.env = rank_env()
        except ValueError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None
        self.settings = read_comm_settings(config, self.env)
        self.base = read_settings(config)  # device, names, out, db, dry run, sampling policy
        self.points, self.notes = build_points(self.settings.spec, self.env.world)
        self.identity = mint_run()
        self.end: RunEnd | None = None
        self.results: list[CommResult] = []
        self.selected: list[CommPoint] = []
        self.broken: str | None = None  # why the groups are unusable
        self.device: Backend | None = None
        self.fabric: TorchFabric | None = None
        self.guard: Guard | None = None
        self.table_dir: Path | None = None
        self.version_dir: Path | None = None
        self.written: list[Path] = []
        self._first: float | None = None
        self._last: float | None = None
        self._write_lock = threading.Lock()
        self._done = False
        self._baseline = None  # the opened --npuperf-baseline; False: it could not be opened

    # -- collection -----------------------------------------------------------------------------
    def parametrize(self, metafunc: pytest.Metafunc) -> None:
        all_ops = [getattr(pytest.mark, op) for op in OPS]
        if not self.env.launched or not self.points:
            reason = NEEDS_RANKS if not self.env.launched else (
                "no sweep point fits this job: " + "; ".join(self.notes))
            metafunc.parametrize(PARAM, [pytest.param(
                None, id="collectives-need-ranks" if not self.env.launched else "no-points",
                marks=[*all_ops, pytest.mark.skip(reason=reason)])])
            return
        metafunc.parametrize(PARAM, [pytest.param(p, id=p.case_id, marks=getattr(pytest.mark, p.op))
                                     for p in self.points])

    def check_selection(self, items: list[pytest.Item]) -> None:
        """Under torchrun: join the job and check that every rank selected the same cases."""
        self.selected = [p for p in map(case_point, items) if p is not None]
        if not self.env.launched or self.config.option.collectonly:
            return
        self.start()
        from ..comm.lockstep import compare_selection
        from ..comm.runtime import CommFault

        try:
            self.guard.arm("comparing the selected cases", self._stall_limit())
            mismatch = compare_selection(self.fabric.control, [p.case_id for p in self.selected])
        except (CommFault, RuntimeError) as exc:
            self.broken = str(exc)
            raise pytest.UsageError(f"npuperf: the ranks could not compare their cases: "
                                    f"{' '.join(str(exc).split())}") from None
        finally:
            self.guard.disarm()
        if mismatch:
            self.broken = "the ranks selected different cases"
            raise pytest.UsageError(
                f"npuperf: the ranks selected different collective cases ({mismatch}); every "
                f"rank must run the same pytest command (files, -k, -m and options)")

    # -- joining the job ------------------------------------------------------------------------
    def start(self) -> None:
        if self.fabric is not None:
            return
        from ..comm.guard import Guard
        from ..comm.runtime import TorchFabric
        from ..devices import BackendError, select_backend
        from ..measure.host import available_cores, default_threads

        env, base = self.env, self.base
        try:
            device = select_backend(base.device, env.local_rank, base.device_name)
        except BackendError as exc:
            raise pytest.UsageError(str(exc)) from None
        if device.kind == "npu" and not base.device_name:
            from ..devices.npu import same_family

            source = device_of(base.db)
            if same_family(device.device_name(), source):
                device.database_device_name = source  # see RunContext.backend
        if device.kind == "cpu":
            # Threads split between the node's ranks, but no core pinning: gloo's transport
            # threads pinned beside the rank's own on one core made a 1 KiB all_reduce 5x
            # slower (4.2 ms instead of 0.8 ms, 2 ranks on this 2-core machine).
            cores = len(available_cores())
            device.share(base.threads or default_threads(cores, max(1, env.local_world)))
        device.activate()
        self.device = device
        self.table_dir = self._table_dir()
        try:
            self.fabric = TorchFabric(device, env.rank, env.world,
                                      self.settings.timeout_s).start()
        except Exception as exc:
            raise pytest.UsageError(f"npuperf: rank {env.rank} could not join the job within "
                                    f"{self.settings.timeout_s:g} s: "
                                    f"{' '.join(str(exc).split())[:400]}") from None
        self.guard = Guard(env.rank, self._write_when_stuck)
        self.guard.install()

    def _table_dir(self) -> Path:
        device = self.device.database_device()
        native = device_of(self.base.db) == device
        root = Path(self.base.db).resolve().parents[2] if native else self.base.out
        try:
            # The kernel database of this session (where its kernel cases write) names these
            # tables in its op_mapping.yaml, so that the simulator finds them.
            self.version_dir = Path(self.base.db).resolve() if native else \
                database_dir(root, device, Path(self.base.db).name)
            return hccl_dir(root, device, self._version())
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None

    def _version(self) -> str:
        if self.settings.version:
            return self.settings.version
        import torch

        if self.device.kind == "npu":
            stack = self.device.stack()
            cann = detect_cann_version()
            return cann or f"torch_npu{stack.get('torch_npu', 'unknown')}"
        if self.device.kind == "cuda":
            version = torch.cuda.nccl.version()
            return "nccl" + (".".join(map(str, version)) if isinstance(version, tuple)
                             else str(version))
        return f"gloo-torch{torch.__version__.split('+')[0]}"

    def _stall_limit(self) -> float:
        timeout = self.settings.timeout_s
        return timeout + max(_STALL_GRACE_S, 0.25 * timeout)

    def _interrupted(self) -> str | None:
        if self.guard is not None and self.guard.terminated:
            return "terminated by the launcher (SIGTERM: another rank exited?)"
        return None

    # -- cases ----------------------------------------------------------------------------------
    def run_case(self, point: CommPoint, nodeid: str) -> CommResult:
        from ..comm.runtime import CommFault
        from ..comm.timing import CaseMeasurement

        if self.fabric is None:
            raise pytest.UsageError("npuperf: collective case outside a job (no torchrun)")
        self._first = self._first or time.perf_counter()
        limit = self._stall_limit()
        reason = self.broken or self._interrupted()
        if reason:
            self.broken = reason
            result = CommResult(point, status=STATUS_FAULT, backend=self.fabric.backend_name,
                                error=f"not run: {reason}")
        else:
            def beat() -> None:
                self.guard.arm(point.case_id, limit)

            beat()
            try:
                result = CaseMeasurement(self.fabric, self.device, point, self.base.policy,
                                         beat=beat, interrupted=self._interrupted).run()
            except CommFault as exc:
                self.broken = f"{point.case_id}: {exc}"
                result = CommResult(point, status=STATUS_FAULT,
                                    backend=self.fabric.backend_name,
                                    error=f"{exc} (--npuperf-comm-timeout "
                                          f"{self.settings.timeout_s:g} s); the collective "
                                          f"cases after it are not run")
            finally:
                self.guard.disarm()
        result.nodeid = nodeid
        result.device = self.device.database_device()
        result.stack = ", ".join(f"{k} {v}" for k, v in self.device.stack().items())
        self._last = time.perf_counter()
        if self.env.is_root:
            self._judge(result)
            self.results.append(result)
        return result

    def _judge(self, result: CommResult) -> None:
        """Rank 0: the case against --npuperf-baseline (the straggler's samples)."""
        ref = self.base.baseline
        if not ref or not result.measured or not result.samples or self._baseline is False:
            return
        from ..history.baseline import judge_samples, resolve_baseline
        from ..history.records import KIND_COLLECTIVE, collective_key

        if self._baseline is None:
            try:
                self._baseline = resolve_baseline(
                    ref, history=self.base.history, device=self.device.database_device(),
                    before=self.identity.started, exclude=(self.identity.run_id,))
            except NpuperfError as exc:
                self._baseline = False
                self.notes.append(f"baseline {ref} not opened: {exc}")
                return
        point = result.point
        key = collective_key(point.op, point.message_bytes, point.num_devices, point.dtype,
                             point.topology_tier)
        result.regression = judge_samples(
            KIND_COLLECTIVE, key, result.samples, self._baseline,
            self.base.regression_threshold, status=result.status,
            median=result.duration_us).to_dict()

    def runner(self, request: pytest.FixtureRequest) -> Callable[[CommPoint], CommResult]:
        """The `npuperf_collective` fixture's function: measure a point on every rank and
        give the test its outcome."""
        def run(point: CommPoint) -> CommResult:
            result = self.run_case(point, request.node.nodeid)
            self.outcome(result, request.session)
            return result
        return run

    def outcome(self, result: CommResult, session: pytest.Session) -> None:
        """The pytest outcome of a case: skip, fail, or pass (and end the session after a
        fault: the groups are unusable)."""
        if result.status == STATUS_SKIPPED:
            pytest.skip(result.error)
        if result.status == STATUS_FAULT:
            session.shouldfail = ("npuperf: a collective failed (a rank died or hung); the "
                                  "session ends")
        if result.status in FAILING:
            pytest.fail(f"{result.status}: {result.error}", pytrace=False)
        if result.regression is not None:
            from ..history.compare import SLOWER, Comparison

            if result.regression.get("verdict") == SLOWER:
                pytest.fail(Comparison.from_dict(result.regression).describe(), pytrace=False)

    # -- the end --------------------------------------------------------------------------------
    def join_run(self, run_id: str) -> None:
        """The kernel run of the same session: its id names the hcom rows too."""
        self.identity = dataclasses.replace(self.identity, run_id=run_id)

    def finish(self, *, record: bool, exit_status: int | None) -> bool:
        """Rank 0 ends its run (finish.py: the tables, and the history unless `record` is
        off: a kernel run of the same session records these cases); then every rank meets
        the others once more (so that none exits while rank 0 writes: torchrun would stop
        it), and leaves the job. True when rank 0 failed to write or record."""
        failed = False
        if self.env.is_root and self.results and not self.base.dry_run:
            from ..run.finish import finish_run

            facts = self._facts(record=record and self.device is not None,
                                reports=False, exit_status=exit_status)
            self.end = finish_run(facts, self.results, _Tables(self), info=self._info,
                                  notes=self.notes)
            failed = not self.end.ok
        if self.fabric is not None:
            healthy = self.broken is None
            if healthy:
                try:
                    self.guard.arm("the end of the session", self._stall_limit())
                    self.fabric.control.barrier()
                except RuntimeError:
                    healthy = False
                finally:
                    self.guard.disarm()
            self.fabric.close(healthy)
        return failed

    def _facts(self, **ending) -> RunFacts:
        """`ending`: how the run ends (run/finish.py's RunFacts)."""
        from ..run.finish import RunFacts

        base = self.base
        return RunFacts.of(self.identity, source=str(base.db), options={
            "spec": vars(self.settings.spec), "world": self.env.world,
            "backend": self.fabric.backend_name if self.fabric else ""},
            root=Path(self.config.rootpath), history=base.history, **ending)

    def _info(self):
        from ..replay.outcome import SessionInfo

        identity = self.identity
        return SessionInfo(run_id=identity.run_id, started=identity.started_iso,
                           wall_s=time.time() - identity.started,
                           device=self.device.describe() if self.device is not None else {},
                           options={})

    def _write_when_stuck(self, reason: str) -> None:
        """The watchdog's last act on rank 0: write what was measured."""
        if self.env.is_root and self.results and not self.base.dry_run:
            self.notes.append(f"written by the watchdog: {reason}")
            self._write_once(reason)
            print(f"npuperf: wrote {', '.join(map(str, self.written))}", flush=True)

    def _write_once(self, reason: str | None) -> None:
        if not self._write_lock.acquire(timeout=20):
            return
        try:
            if not self._done:
                self._done = True
                self._write()
        finally:
            self._write_lock.release()

    def _write(self) -> None:
        from ..run.target import CollectiveTables

        tables = CollectiveTables(self.table_dir, [self.version_dir], self._run_info)
        self.written = tables.write(self.results, self._facts()).files

    def _run_info(self, stamp: str):
        """What the reports say about this run, written under `stamp`."""
        from ..report.collectives import RunInfo

        identity = self.identity
        return RunInfo(run_id=identity.run_id, stamp=stamp, started=identity.started_iso,
                       device=self.device.database_device(), device_desc=self.device.describe(),
                       backend=self.fabric.backend_name, world=self.env.world,
                       grid=self.settings.spec.grid,
                       options={"spec": vars(self.settings.spec),
                                "timeout_s": self.settings.timeout_s,
                                "policy": vars(self.base.policy)},
                       table_dir=str(self.table_dir), sweep_wall_s=self.sweep_wall_s,
                       notes=list(self.notes))

    # -- history --------------------------------------------------------------------------------
    def root_results(self) -> list[CommResult]:
        """Rank 0's results, for the history of the session's kernel run (none elsewhere or
        in a dry run)."""
        return list(self.results) if self.env.is_root and not self.base.dry_run else []

    @property
    def sweep_wall_s(self) -> float:
        if self._first is None or self._last is None:
            return 0.0
        return self._last - self._first

    def summary_lines(self) -> list[str]:
        """Rank 0's terminal summary of a run under torchrun ([] elsewhere)."""
        if not (self.env.launched and self.env.is_root and (self.results or self.notes)):
            return []
        from ..report.collectives import terminal_lines

        lines = [f"note: {n}" for n in self.notes]
        lines += terminal_lines(self.results)
        if self.written:
            lines.append(f"written: {', '.join(map(str, self.written))}")
        history = self.end.history_line() if self.end is not None and self.end.recorded else ""
        if history:
            lines.append(history)
        elif self.results and self.base.dry_run:
            lines.append("dry run: nothing written")
        return lines

    def release(self) -> None:
        if self._baseline:
            self._baseline.close()
            self._baseline = None
        if self.guard is not None:
            self.guard.uninstall()
            self.guard = None


class _Tables:
    """The target of the run's finish: the session's collective tables (run/target.py),
    written once, whether by the finish or by the watchdog first."""

    reports_dir = None  # the reports are written with the tables, in one transaction
    inside = None
    demo = None

    def __init__(self, session: CommSession) -> None:
        from ..run.target import CollectiveTables

        self.session = session
        self.failed, self.interrupted = CollectiveTables.failed, CollectiveTables.interrupted

    def write(self, results: list, facts: RunFacts):
        from ..run.target import Written

        self.session._write_once(None)
        return Written(self.session.table_dir)
