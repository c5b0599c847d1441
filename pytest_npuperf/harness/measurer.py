"""A process that runs cases (the serial process, or an xdist worker): the device, the runner,
the verdict of each case against the baseline where it ran, and each case's pytest outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

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
from .stash import RESULT_KEY

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
        """The case against the baseline, where it ran (see history/keeper.py)."""
        return self.context.keeper.judge(result) if self.context.settings.baseline else None

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

    def replayer(self, request: pytest.FixtureRequest) -> Callable[[CaseRef], CaseResult]:
        """The `npuperf_replay` fixture's function: measure a test's case; fail, skip or pass
        the test as the result says."""
        node = request.node

        def replay(ref: CaseRef) -> CaseResult:
            if ref.problem:  # the row's file could not be read: this case stands for the file
                node.stash[RESULT_KEY] = result_for(ref, node.nodeid, STATUS_ERROR, ref.problem)
                pytest.fail(f"{ref.file}: {ref.problem}", pytrace=False)
            result = self.run_case(ref, node.nodeid)
            node.stash[RESULT_KEY] = result
            if result.status == STATUS_SKIPPED:  # a ReplaySkipped/NpuOnly row, or no replay yet
                pytest.skip(result.error)
            if result.status in FAILING_STATUSES:
                message = f"{result.status}: {result.error}"
                if result.detail:
                    message += "\n" + result.detail
                pytest.fail(message, pytrace=False)
            # Against --npuperf-baseline, here where it ran (a SLOWER case is measured again).
            result, comparison = self.judge_case(ref, node.nodeid, result)
            node.stash[RESULT_KEY] = result
            if comparison is not None and comparison.verdict == "SLOWER":
                pytest.fail(comparison.describe(), pytrace=False)
            if result.without_value:
                # Not a green PASSED: pytest's skip carries the reason to every report (the
                # terminal counts it as `no value`, stash.teststatus), or it fails.
                why = f"{NO_VALUE}: {result.status_text}"
                if self.context.settings.no_value_fails:
                    pytest.fail(f"{why} (--npuperf-no-value fail)", pytrace=False)
                pytest.skip(why)
            return result
        return replay

    def skipped(self, ref: CaseRef, nodeid: str, reason: str) -> CaseResult:
        """The result of a case pytest skipped before it ran (a skip mark, -m filters)."""
        return result_for(ref, nodeid, STATUS_SKIPPED, reason)

    def close(self) -> None:
        if self._quiet is not None:
            self._quiet.close()
            self._quiet = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self.context.stop_profiler()
