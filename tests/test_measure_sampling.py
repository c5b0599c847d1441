"""Statistics, confidence intervals and the adaptive sampling rule."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from pytest_npuperf.devices.base import HostClockTimer, Timer
from pytest_npuperf.measure.sampler import CaseTimeout, SamplingPolicy, sample, warm_up
from pytest_npuperf.measure.stats import (
    mean_ci_halfwidth,
    median_ci_halfwidth,
    relative_precision,
    sorted_median_precision,
    summarize,
)


class ScriptedTimer(Timer):
    """Returns prescribed durations instead of timing: makes the stopping rule testable."""

    def __init__(self, values):
        self.values = iter(values)
        self.calls = 0

    def time_calls(self, call, n, before_each=None):
        out = []
        for _ in range(n):
            if before_each:
                before_each()
            call()
            self.calls += 1
            out.append(next(self.values))
        return out


def test_summarize_matches_numpy():
    samples = [5.0, 1.0, 3.0, 2.0, 4.0, 10.0]
    stats = summarize(samples)
    assert stats.samples == 6
    assert stats.mean == pytest.approx(np.mean(samples))
    assert stats.median == pytest.approx(3.5)
    assert stats.std == pytest.approx(np.std(samples, ddof=1))
    assert (stats.min, stats.max) == (1.0, 10.0)
    assert stats.p90 == pytest.approx(np.percentile(samples, 90))


def test_summarize_one_sample_has_zero_spread():
    stats = summarize([7.5])
    assert stats.std == 0.0 and stats.median == 7.5 and stats.p90 == 7.5


def test_summarize_rejects_no_samples():
    with pytest.raises(ValueError):
        summarize([])


def test_median_ci_covers_true_median_about_95_percent():
    rng = np.random.default_rng(1)
    hits = 0
    trials = 400
    for _ in range(trials):
        x = rng.lognormal(mean=3.0, sigma=0.5, size=60)  # skewed, like latencies
        half = median_ci_halfwidth(x)
        hits += abs(np.median(x) - math.exp(3.0)) <= half
    assert 0.85 <= hits / trials <= 1.0


def test_ci_shrinks_with_more_samples_and_is_inf_when_unknown():
    rng = np.random.default_rng(2)
    small, large = rng.normal(100, 5, 20), rng.normal(100, 5, 2000)
    assert median_ci_halfwidth(large) < median_ci_halfwidth(small)
    assert mean_ci_halfwidth(large) < mean_ci_halfwidth(small)
    assert median_ci_halfwidth([1.0, 2.0]) == math.inf
    assert relative_precision([]) == math.inf


def test_constant_samples_reach_precision_at_min_samples():
    timer = ScriptedTimer([10.0] * 1000)
    policy = SamplingPolicy(warmup=2, min_samples=8, max_samples=1000, budget_s=10,
                            min_time_s=0, precision=0.01)
    run = sample(lambda: None, timer, policy)
    assert run.stop_reason == "precision reached"
    assert run.warmup == 2
    assert 8 <= len(run.samples) <= 300
    assert run.precision == 0.0


@pytest.mark.parametrize(("call_us", "expected"), [
    (5.0, 3),         # fast: all the asked-for warmup calls
    (10_000.0, 3),    # 10 ms: 30 ms only after the third
    (20_000.0, 2),    # 20 ms: the cap (25 ms) is passed by the second
    (60_000.0, 1),    # a slow GEMM is warm after its first call
])
def test_warmup_stops_once_its_time_is_spent(call_us, expected):
    timer = ScriptedTimer([call_us] * 1000)
    policy = SamplingPolicy(warmup=3, warmup_time_s=0.025, min_samples=3, max_samples=3,
                            budget_s=10, min_time_s=0)
    run = sample(lambda: None, timer, policy)
    assert run.warmup == expected
    assert timer.calls == expected + 3  # the samples are not cut


def test_warmup_without_time_cap_and_at_least():
    timer = ScriptedTimer([60_000.0] * 100)
    uncapped = SamplingPolicy(warmup=3, warmup_time_s=0)
    assert len(warm_up(lambda: None, timer, uncapped)) == 3
    none = SamplingPolicy(warmup=0)
    assert warm_up(lambda: None, timer, none) == []
    assert len(warm_up(lambda: None, timer, none, at_least=1)) == 1  # graph path: one eager call
    with pytest.raises(ValueError, match="warmup"):
        SamplingPolicy(warmup_time_s=-1)


def test_noisy_samples_stop_at_max_samples():
    rng = np.random.default_rng(3)
    timer = ScriptedTimer(list(rng.uniform(1, 100, 5000)))
    policy = SamplingPolicy(warmup=0, min_samples=5, max_samples=40, budget_s=100,
                            min_time_s=0, precision=1e-6)
    run = sample(lambda: None, timer, policy)
    assert run.stop_reason == "max samples"
    assert len(run.samples) >= 40


@pytest.mark.slow
def test_time_budget_stops_sampling():
    policy = SamplingPolicy(warmup=0, min_samples=1, max_samples=10**6, budget_s=0.05,
                            min_time_s=0, precision=1e-9)

    def slow():
        time.sleep(0.01)

    run = sample(slow, HostClockTimer(lambda: None), policy)
    assert run.stop_reason == "time budget"
    assert run.time_in_calls_s >= 0.05
    assert all(s >= 9_000 for s in run.samples)  # each sample is ~10 ms, in microseconds


def test_min_time_keeps_sampling_a_precise_fast_kernel():
    policy = SamplingPolicy(warmup=0, min_samples=3, max_samples=10**6, budget_s=10,
                            min_time_s=0.03, precision=0.5)
    run = sample(lambda: time.sleep(0.001), HostClockTimer(lambda: None), policy)
    assert run.time_in_calls_s >= 0.03
    assert run.stop_reason == "precision reached"


def test_flush_runs_before_every_sample_and_outside_the_timing():
    flushes = []
    timer = ScriptedTimer([5.0] * 100)
    policy = SamplingPolicy(warmup=1, min_samples=4, max_samples=4, budget_s=10, min_time_s=0,
                            precision=1e-9, flush_l2=True)
    run = sample(lambda: None, timer, policy, flush=lambda: flushes.append(1))
    assert len(flushes) == timer.calls == run.warmup + len(run.samples)


def test_deadline_raises_case_timeout():
    policy = SamplingPolicy(warmup=0, min_samples=10**5, max_samples=10**6, budget_s=100,
                            min_time_s=0)
    with pytest.raises(CaseTimeout):
        sample(lambda: time.sleep(0.001), HostClockTimer(lambda: None), policy,
               deadline=time.monotonic() + 0.05)


@pytest.mark.parametrize("kwargs", [
    {"statistic": "mode"}, {"min_samples": 0}, {"min_samples": 10, "max_samples": 5},
    {"budget_s": 0}, {"precision": 0}, {"warmup": -1},
])
def test_policy_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        SamplingPolicy(**kwargs)


def test_wrap_decorates_only_timed_calls():
    wrapped = []

    def wrap(call):
        def inner():
            wrapped.append(1)
            return call()
        return inner

    timer = ScriptedTimer([3.0] * 100)
    policy = SamplingPolicy(warmup=3, min_samples=5, max_samples=5, budget_s=10, min_time_s=0,
                            precision=1e-9)
    run = sample(lambda: None, timer, policy, wrap=wrap)
    assert len(wrapped) == len(run.samples)


def test_mean_ci_uses_student_t_for_few_samples():
    from pytest_npuperf.measure.stats import Z95, t95

    samples = [10.0, 12.0, 11.0, 13.0, 9.0]
    expected = 2.776 * np.std(samples, ddof=1) / math.sqrt(5)
    assert mean_ci_halfwidth(samples) == pytest.approx(expected, rel=1e-6)
    assert t95(1) == 12.706 and t95(1000) == Z95 and t95(0) == math.inf


def test_a_result_keeps_all_statistics_and_a_spread_of_samples():
    from pytest_npuperf.measure.result import MAX_KEPT_SAMPLES, CaseResult

    result = CaseResult("c", "n", "MatMulV2", "MatMulV2.csv", "sig")
    samples = [float(i) for i in range(1, 1001)]
    result.set_samples(samples)
    assert result.stats.samples == 1000 and result.stats.mean == pytest.approx(500.5)
    assert len(result.samples) <= MAX_KEPT_SAMPLES
    assert result.samples[0] == 1.0 and result.samples[-1] > 900  # spread over the run
    assert CaseResult.from_dict(result.to_dict()) == result


def test_a_sample_of_a_batch_sizes_batches_by_its_calls_and_counts_device_time():
    batches = []

    class Replays(ScriptedTimer):
        def time_calls(self, call, n, before_each=None):
            batches.append(n)
            return super().time_calls(call, n, before_each)

    # 2 us per call, 500 calls per sample: a sample costs 1 ms, so about 20 per 20 ms batch.
    timer = Replays([2.0] * 1000)
    policy = SamplingPolicy(warmup=1, min_samples=30, max_samples=1000, budget_s=10,
                            min_time_s=0, precision=0.01)
    run = sample(lambda: None, timer, policy, calls_per_sample=500, device_time=True)
    assert batches[0] == 1 and 10 <= batches[1] <= 30
    assert run.time_in_calls_s == pytest.approx(len(run.samples) * 500 * 2.0 / 1e6)


def test_stop_reasons_are_recorded():
    from pytest_npuperf.measure.sampler import STOP_BUDGET, STOP_MAX_SAMPLES, STOP_PRECISION

    assert {STOP_PRECISION, STOP_BUDGET, STOP_MAX_SAMPLES} == {
        "precision reached", "time budget", "max samples"}
    run = sample(lambda: None, ScriptedTimer([10.0] * 1000),
                 SamplingPolicy(warmup=0, min_samples=5, max_samples=1000, budget_s=10,
                                min_time_s=0, precision=0.5))
    assert run.stop_reason == STOP_PRECISION and run.precision == 0.0


@pytest.mark.parametrize("statistic", ["median", "mean"])
@pytest.mark.parametrize("max_samples, precision", [(300, 1e-9), (10**6, 0.2)])
def test_the_precision_a_run_reports_is_that_of_all_its_samples(statistic, max_samples,
                                                                  precision):
    """The sampler keeps a sorted copy of the samples for its checks; what it reports is
    still the precision of every sample taken, in any order, whichever rule stopped it."""
    rng = np.random.default_rng(11)
    timer = ScriptedTimer(list(rng.lognormal(3, 0.5, 5000)))
    policy = SamplingPolicy(warmup=0, min_samples=10, max_samples=max_samples, budget_s=100,
                            min_time_s=0, precision=precision, statistic=statistic)
    run = sample(lambda: None, timer, policy)
    assert run.stop_reason == ("max samples" if max_samples == 300 else "precision reached")
    assert run.samples != sorted(run.samples)  # kept in the order they were taken
    assert run.precision == relative_precision(run.samples, statistic)
    assert math.isfinite(run.precision)


def test_tukey_outliers_are_counted_and_kept():
    stats = summarize([10.0, 10.5, 11.0, 10.2, 10.8, 10.4, 50.0, 1.0])
    assert (stats.q1, stats.q3) == (pytest.approx(10.15), pytest.approx(10.85))
    assert stats.outliers == 2  # 50 above, 1 below the fences
    assert stats.samples == 8 and stats.max == 50.0  # counted, not dropped


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 9, 10, 51, 200])
def test_the_samplers_median_precision_is_relative_precisions_to_the_last_bit(n):
    rng = np.random.default_rng(n)
    values = np.round(rng.lognormal(3, 0.2, n), 3).tolist()  # ties, as a timer's ticks make
    assert sorted_median_precision(sorted(values)) == relative_precision(values, "median")
