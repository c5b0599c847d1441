"""Warmup, then adaptive sampling until the estimate is precise enough or the budget is spent.

Samples are taken in batches sized so that checking the stopping rule costs little next to
the calls themselves; the rule is the 95 % confidence half-width of the median (or mean)
relative to it, against the target precision.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..devices.base import Timer
from .policy import STATISTICS as STATISTICS
from .policy import SamplingPolicy
from .stats import relative_precision, sorted_median_precision

STOP_PRECISION, STOP_BUDGET, STOP_MAX_SAMPLES = "precision reached", "time budget", "max samples"
# Aim for a stopping-rule check about this often (seconds of calls per batch).
_BATCH_SECONDS = 0.02
_MAX_BATCH = 256


class CaseTimeout(Exception):
    """The case ran past --npuperf-case-timeout."""


@dataclass
class SamplingRun:
    samples: list[float] = field(default_factory=list)  # microseconds per call
    preempted: int = 0  # samples left out: the host ran other work during them
    warmup: int = 0
    time_in_calls_s: float = 0.0  # wall time spent inside timed calls
    warmup_s: float = 0.0  # wall time of the warmup calls (overhead: measure/overhead.py)
    capture_s: float = 0.0  # graph method: capturing and sizing the replayed batch (overhead)
    precision: float = math.inf  # relative CI half-width reached
    stop_reason: str = ""


def _batch_size(per_call_us: float, remaining: int) -> int:
    if per_call_us <= 0:
        return min(_MAX_BATCH, remaining)
    return max(1, min(_MAX_BATCH, remaining, int(_BATCH_SECONDS * 1e6 / per_call_us)))


def _past(budget_end: float | None) -> bool:
    return budget_end is not None and time.perf_counter() >= budget_end


def warm_up(call: Callable[[], object], timer: Timer, policy: SamplingPolicy,
            before: Callable[[], object] | None = None, *, at_least: int = 0,
            budget_end: float | None = None) -> list[float]:
    """The warmup calls' times (us): `policy.warmup` calls (or `at_least`), fewer when
    `policy.warmup_time_s` went into them first or the case's budget ran out (`budget_end`,
    a perf_counter value), but never fewer than one or `at_least`."""
    count = max(policy.warmup, at_least)
    if not policy.warmup_time_s and budget_end is None:
        return timer.time_calls(call, count, before) if count else []
    times: list[float] = []
    while len(times) < count:
        times.extend(timer.time_calls(call, 1, before))
        if len(times) >= max(1, at_least) and (
                (policy.warmup_time_s and sum(times) >= policy.warmup_time_s * 1e6)
                or _past(budget_end)):
            break
    return times


def sample(call: Callable[[], object], timer: Timer, policy: SamplingPolicy, *,
           flush: Callable[[], object] | None = None, deadline: float | None = None,
           wrap: Callable[[Callable[[], object]], Callable[[], object]] | None = None,
           calls_per_sample: int = 1, device_time: bool = False,
           budget_end: float | None = None) -> SamplingRun:
    """Measure `call`. `wrap` decorates each timed call (e.g. a profiler range per sample);
    `deadline` is a time.monotonic() value past which CaseTimeout is raised.

    The budget: sampling stops (once it has the minimum of samples) when `policy.budget_s`
    of calls were timed, or at `budget_end` (a time.perf_counter() value: the end of the
    case's wall-time budget, inputs and warm-up included), whichever comes first.

    A sample is the time per call of `calls_per_sample` calls (a graph replay of a batch).
    Time inside calls is the host clock around the timed calls, or with `device_time` (and
    with a flush, whose own time must not count) the sum of the samples' device times.
    """
    run = SamplingRun()
    before = flush if policy.flush_l2 else None
    clock = time.perf_counter()
    warm = warm_up(call, timer, policy, before, budget_end=budget_end)
    run.warmup_s = time.perf_counter() - clock
    run.warmup = len(warm)
    estimate = min(warm) if warm else 0.0
    # The wall time a sample takes, preempted ones included: what a batch is sized by. The
    # samples' own estimate leaves preempted samples out, and on a busy host each call of a
    # 10 us kernel may take a 10 ms time slice: a batch of 256 sized by the estimate would run
    # seconds past the budget.
    paced = max(estimate, sum(warm) / len(warm)) * calls_per_sample if warm else 0.0
    timed = wrap(call) if wrap else call
    from_samples = device_time or before is not None
    # Kept sorted as batches arrive (timsort merges the sorted run with the new batch): the
    # batch-size estimate and the median's interval read it instead of sorting every sample
    # again after each batch, which cost fast kernels tens of ms per case.
    ordered: list[float] = []
    while True:
        if deadline is not None and time.monotonic() > deadline:
            raise CaseTimeout(f"case timeout after {len(run.samples)} samples")
        remaining = policy.max_samples - len(run.samples)
        batch = 1 if before else _batch_size(max(estimate * calls_per_sample, paced),
                                             remaining)
        clock = time.perf_counter()
        values = timer.time_calls(timed, batch, before)
        paced = (time.perf_counter() - clock) * 1e6 / batch
        if from_samples:
            run.time_in_calls_s += sum(values) * calls_per_sample / 1e6
        else:
            run.time_in_calls_s += time.perf_counter() - clock
        if timer.disturbed:  # not samples of the kernel: the host ran other work meanwhile
            kept = [v for v, lost in zip(values, timer.disturbed) if not lost]
            run.preempted += len(values) - len(kept)
            values = kept if policy.reject_preempted else values
        run.samples.extend(values)
        ordered.extend(values)
        ordered.sort()
        n = len(run.samples)
        spent = run.time_in_calls_s
        out_of_budget = spent >= policy.budget_s or _past(budget_end)
        if n < policy.min_samples:
            if policy.reject_preempted and run.preempted and out_of_budget:
                run.stop_reason = STOP_BUDGET  # too few undisturbed samples within the budget
                return run
            if n:
                estimate = ordered[n // 2]
            continue
        estimate = ordered[n // 2]
        # The precision only decides once the minimum time is spent (and is reported at the
        # stop): not computed for the batches before.
        if n >= policy.max_samples:
            run.stop_reason = STOP_MAX_SAMPLES
        elif out_of_budget:
            run.stop_reason = STOP_BUDGET
        elif spent >= policy.min_time_s and _precision(run, ordered, policy) <= policy.precision:
            run.stop_reason = STOP_PRECISION
        else:
            continue
        if run.stop_reason != STOP_PRECISION:
            _precision(run, ordered, policy)
        return run


def _precision(run: SamplingRun, ordered: list[float], policy: SamplingPolicy) -> float:
    """The relative precision of the samples so far, into `run.precision`; the median's
    does not depend on the order, so it reads the sorted copy."""
    run.precision = relative_precision(run.samples, "mean") if policy.statistic == "mean" \
        else sorted_median_precision(ordered)
    return run.precision
