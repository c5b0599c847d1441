"""The `noisy` rule on synthetic sample sets shaped like real ones, and what a noisy case
stores: its statistics and the reason, never a latency that looks precise."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_npuperf.measure.noise import noise_reason
from pytest_npuperf.measure.result import STATUS_NOISY, STATUS_OK, CaseResult
from pytest_npuperf.replay.runner import CaseRunner
from pytest_npuperf.replay.write import _values

RNG = np.random.default_rng(7)


def quiet(center: float, n: int, cv: float = 0.02) -> np.ndarray:
    """A quiet machine: a tight cluster just above the fastest run, a thin upper tail."""
    return center * (1 + np.abs(RNG.normal(0, cv, n)))


@pytest.mark.parametrize("samples", [
    quiet(3.0, 500, cv=0.005),  # GPU graph replays
    quiet(250.0, 300, cv=0.05),  # a CPU GEMM on a quiet core
    RNG.lognormal(np.log(100.0), 0.08, 2000),  # skewed latencies
    np.concatenate([quiet(40.0, 196), quiet(120.0, 4)]),  # 2 % interrupted calls: a tail
    RNG.exponential(1.0, 1000) + 50.0,  # an exponential tail on a 50 us kernel
    [7975.0, 8000.0, 8100.0, 7990.0, 9000.0],  # too few samples to judge
])
def test_samples_a_quiet_machine_gives_are_not_noisy(samples):
    assert noise_reason(samples) is None


def test_a_median_far_above_the_minimum_is_noisy():
    # Most calls slowed down: a few ran at kernel speed, the rest waited for a core.
    samples = np.concatenate([quiet(128.0, 4), quiet(7975.0, 14)])
    assert noise_reason(samples).startswith("median 6")  # 62x, 7975 vs 128 us


def test_two_regimes_straddling_the_median_are_noisy():
    # Thread wake-ups on some calls and not on others (Add 16x5120 on 2 busy cores).
    samples = np.concatenate([quiet(27.0, 60), quiet(45.0, 60)])
    assert noise_reason(samples).startswith("interquartile range 5")  # about 50 %


def test_a_heavy_tail_is_noisy():
    # A median of 934 us stored as a 2,692 us mean: a tenth of the calls 18x slower.
    samples = np.concatenate([quiet(934.0, 180), quiet(17000.0, 20)])
    assert noise_reason(samples).startswith("heavy tail: mean 2.")


def _result(samples, status=STATUS_OK) -> CaseResult:
    result = CaseResult("c", "n", "MatMulV2", "MatMulV2.csv", "sig", status=status,
                        device="CPU_TEST", statistic="median")
    result.set_samples(list(samples))
    return result


def test_the_runner_flags_noise_and_a_noisy_case_keeps_its_statistics_not_a_latency():
    samples = list(np.concatenate([quiet(128.0, 4), quiet(7975.0, 14)]))
    result = _result(samples)
    CaseRunner._check_noise(result, samples)
    assert result.status == STATUS_NOISY and result.measured
    values = _values(result, "run-1")
    assert "Average Duration(us)" not in values
    assert values["MicroBench Status"].startswith("noisy: median 6")
    assert float(values["MicroBench Median Duration(us)"]) == pytest.approx(result.stats.median)
    quiet_result = _result(quiet(128.0, 50))
    CaseRunner._check_noise(quiet_result, list(quiet(128.0, 50)))
    assert quiet_result.status == STATUS_OK


def test_a_flag_never_overrides_a_worse_status():
    result = _result([1.0] * 5 + [100.0] * 10, status="suspect")
    CaseRunner._check_noise(result, [1.0] * 5 + [100.0] * 10)
    assert result.status == "suspect"
