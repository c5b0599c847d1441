"""A process that runs cases (the serial process, or an xdist worker): the device, the runner,
the verdict of each case against the baseline where it ran, and each case's pytest outcome."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

from ..history.compare import RunShift
from ..history.plateau import QuietHistory, plateau
from ..measure.result import (
    FAILING_STATUSES,
    NO_VALUE,
    STATUS_ERROR,
    STATUS_NOISY,
    STATUS_OK,
    STATUS_SKIPPED,
)
from ..replay.cases import result_for
from .context import RunContext
from .fresh import FRESH_LIMIT, measure_fresh
from .route import keep

if TYPE_CHECKING:
    from ..history.compare import Comparison
    from ..measure.result import CaseResult
    from ..replay.cases import CaseRef
    from ..replay.runner import CaseRunner


class Measurer:
    def __init__(self, context: RunContext) -> None:
        self.context = context
        self._runner: CaseRunner | None = None
        self._quiet: QuietHistory | None = None
        self.run_shift = RunShift()  # how the cases this process judged moved
        self._fresh_left = FRESH_LIMIT

    @property
    def runner(self) -> CaseRunner:
        if self._runner is None:
            from ..replay.runner import CaseRunner, RunnerOptions

            context = self.context
            settings = context.settings
            profiler = context.profiler
            self._runner = CaseRunner(context.backend, RunnerOptions(
                policy=settings.policy, method=context.method,
                case_timeout_s=settings.case_timeout_s, verify=settings.verify,
                profiled=profiler.profiled, cache=settings.cache, impl=context.impl))
            profiler.start(context.backend)  # before the first case: markers, profiler session
            # What the session has built so far (torch, pandas, the cases) lives until it
            # ends: out of the collector's reach, a collection pays only for what the cases
            # make (with torch loaded a full one took 0.1-0.3 s, several times a session, and
            # pytest collects several times more at its end).
            gc.freeze()
        return self._runner

    def run_case(self, ref: CaseRef, nodeid: str) -> CaseResult:
        """Measure a case; a value far above its quiet history (history/plateau.py) is
        measured again, and flagged noisy if it stays there."""
        result = self._measure(ref, nodeid)
        quiet = self.quiet_history.quiet(result) if result.status == STATUS_OK else None
        first = plateau(result, quiet)
        if first is None:
            return result
        again = self._measure(ref, nodeid)
        again.wall_s += result.wall_s
        again.time_in_calls_s += result.time_in_calls_s
        still = plateau(again, quiet)
        seen = f"re-measured: the first measurement, {result.value:.4g} us, was " \
               f"{result.value / quiet.median_us:.1f}x the case's quiet history"
        if still is None:
            again.note = f"{again.note}; {seen}" if again.note else seen
        elif again.status == STATUS_OK:
            again.status, again.error = STATUS_NOISY, f"{still}; {seen}"
        return again

    def _measure(self, ref: CaseRef, nodeid: str) -> CaseResult:
        context = self.context
        result = self.runner.run(ref, context.row(ref), nodeid,
                                 str(context.destination.source / ref.file))
        context.profiler.tag(result)
        return result

    @property
    def quiet_history(self) -> QuietHistory:
        if self._quiet is None:
            context = self.context
            self._quiet = QuietHistory(context.settings.history,
                                       context.backend.database_device())
        return self._quiet

    def judge(self, result: CaseResult) -> Comparison | None:
        """The case against the baseline, where it ran (see history/keeper.py), and how the
        session's cases judged before it moved."""
        if not self.context.settings.baseline:
            return None
        return self.context.keeper.judge(result, self.run_shift.now(result.kernel_type))

    def judge_case(self, ref: CaseRef, nodeid: str, result: CaseResult
                   ) -> tuple[CaseResult, Comparison | None]:
        """The verdict of a case just measured. A SLOWER verdict is confirmed before it fails
        the case: the case is measured again in `--npuperf-confirm` fresh processes
        (harness/fresh.py; in this process once FRESH_LIMIT cases were), and the fastest of
        all its measurements (noise only ever slows one down) is judged and kept."""
        comparison = self.judge(result)
        processes = self.context.settings.confirm
        if comparison is not None and comparison.verdict == "SLOWER" and processes > 0:
            result, comparison = self._confirm(ref, nodeid, result, processes)
        self.run_shift.add(comparison, result.kernel_type)
        return result, comparison

    def _confirm(self, ref: CaseRef, nodeid: str, first: CaseResult, processes: int
                 ) -> tuple[CaseResult, Comparison | None]:
        problem = ""
        if self._fresh_left > 0:
            self._fresh_left -= 1
            again, problem = measure_fresh(self.context, ref, nodeid, processes)
            where = f"in {len(again)} fresh process(es)"
        else:
            again = []
        if not again:  # beyond FRESH_LIMIT, or no fresh process could measure it
            again = [self.run_case(ref, nodeid) for _ in range(processes)]
            where = f"{processes} more time(s) in this process" + (
                f" ({problem})" if problem else
                f" (the first {FRESH_LIMIT} cases were confirmed in fresh processes)")
        measured = [r for r in (first, *again) if r.measured and r.stats is not None]
        kept = min(measured, key=lambda r: (r.status != STATUS_OK, r.stats.median))
        for other in (first, *again):
            if other is not kept:
                kept.wall_s += other.wall_s
                kept.time_in_calls_s += other.time_in_calls_s
        medians = ", ".join(f"{r.stats.median:.4g}" for r in again if r.stats is not None)
        note = (f"SLOWER at first ({first.stats.median:.4g} us): measured again {where}, "
                f"median(s) {medians or '-'} us; the fastest judged")
        kept.note = f"{kept.note}; {note}" if kept.note else note
        return kept, self.judge(kept)

    def replayer(self, request: pytest.FixtureRequest) -> Callable[[CaseRef], CaseResult]:
        """The `npuperf_replay` fixture's function: measure a test's case; fail, skip or pass
        the test as the result says."""
        node = request.node

        def replay(ref: CaseRef) -> CaseResult:
            if ref.problem:  # the row's file could not be read: this case stands for the file
                keep(node, result_for(ref, node.nodeid, STATUS_ERROR, ref.problem))
                pytest.fail(f"{ref.file}: {ref.problem}", pytrace=False)
            result = self.run_case(ref, node.nodeid)
            keep(node, result)
            if result.status == STATUS_SKIPPED:  # a ReplaySkipped/NpuOnly row, or no replay yet
                pytest.skip(result.error)
            if result.status in FAILING_STATUSES:
                message = f"{result.status}: {result.error}"
                if result.detail:
                    message += "\n" + result.detail
                pytest.fail(message, pytrace=False)
            # Against --npuperf-baseline, here where it ran (a SLOWER case is measured again).
            result, comparison = self.judge_case(ref, node.nodeid, result)
            keep(node, result)
            if comparison is not None and comparison.verdict == "SLOWER":
                pytest.fail(comparison.describe(), pytrace=False)
            if result.without_value:
                # Not a green PASSED: pytest's skip carries the reason to every report (the
                # terminal counts it as `no value`, progress.teststatus), or it fails.
                why = f"{NO_VALUE}: {result.status_text}"
                if self.context.settings.no_value_fails:
                    pytest.fail(f"{why} (--npuperf-no-value fail)", pytrace=False)
                pytest.skip(why)
            return result
        return replay

    def close(self) -> None:
        if self._quiet is not None:
            self._quiet.close()
            self._quiet = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self.context.stop_profiler()
