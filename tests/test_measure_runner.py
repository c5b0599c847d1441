"""One case through the runner: the physical-bound flag, and results independent of faults."""

from __future__ import annotations

import pytest

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.devices.base import Peak
from pytest_npuperf.measure.result import STATUS_OK, STATUS_SKIPPED, STATUS_SUSPECT
from pytest_npuperf.measure.sampler import SamplingPolicy
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions

ROW = {"Input Shapes": "16,64;32,64", "Input Data Types": "DT_FLOAT;DT_FLOAT",
       "Input Formats": "ND;ND", "Output Shapes": "16,32", "Output Data Types": "DT_FLOAT"}
REF = CaseRef("MatMulV2-16x64x32-FLOAT-00000000", "MatMulV2", "MatMulV2.csv", 0, "sig", True)
# Preempted samples kept: what these tests judge must not depend on how busy the host is.
FAST = SamplingPolicy(warmup=1, min_samples=3, max_samples=5, budget_s=0.05, min_time_s=0,
                      reject_preempted=False)


class KnownLimits(CpuBackend):
    """A CPU that claims known peaks and cache size."""

    def __init__(self, peak: Peak, l2: int | None) -> None:
        super().__init__(0, "CPU_TEST")
        self._peak, self._l2 = peak, l2

    def peak(self):
        return self._peak

    def l2_cache_bytes(self):
        return self._l2

    def remeasure_peak(self):
        return False  # a data sheet: known once


def measure(backend, policy=FAST):
    return CaseRunner(backend, RunnerOptions(policy=policy)).run(REF, ROW, "node", "f.csv")


def test_a_result_faster_than_the_compute_bound_is_flagged():
    result = measure(KnownLimits(Peak(flops=1e3, bytes_per_s=1e15), l2=None))
    assert result.status == STATUS_SUSPECT
    assert "faster than the device allows" in result.error
    assert result.bound_us == pytest.approx(2 * 16 * 32 * 64 / 1e3 * 1e6)
    assert result.stats is not None  # kept, flagged


class BusyAtFirst(KnownLimits):
    """A CPU whose peak was first timed on a busy host; timed again, it is the real one."""

    def __init__(self, first: Peak, again: Peak) -> None:
        super().__init__(first, l2=None)
        self.again, self.remeasures = again, 0

    def remeasure_peak(self):
        self.remeasures += 1
        better = self.again.flops > self._peak.flops
        self._peak = self.again
        return better


def test_a_case_beating_a_peak_timed_on_a_busy_host_measures_the_peak_again():
    fast_enough = measure(BusyAtFirst(Peak(flops=1e3, bytes_per_s=1e15),
                                      Peak(flops=1e15, bytes_per_s=1e15)))
    assert fast_enough.status == STATUS_OK and fast_enough.bound_us < 1
    # Still faster than the peak measured again: suspect, on the second figure.
    backend = BusyAtFirst(Peak(flops=1e3, bytes_per_s=1e15), Peak(flops=2e3, bytes_per_s=1e15))
    result = measure(backend)
    assert result.status == STATUS_SUSPECT and backend.remeasures == 1
    assert result.bound_us == pytest.approx(2 * 16 * 32 * 64 / 2e3 * 1e6)


def test_the_cpu_measures_its_peak_again_a_bounded_number_of_times(monkeypatch):
    from pytest_npuperf.devices import cpu_peak as module

    figures = iter(Peak(flops=f, bytes_per_s=1e9) for f in (1e9, 2e9, 2e9, 3e9, 9e9))
    monkeypatch.setattr(module, "cpu_peak", lambda model, cache, again=False: next(figures))
    backend = CpuBackend(0, "CPU_TEST")
    assert backend.peak().flops == 1e9
    assert [backend.remeasure_peak() for _ in range(4)] == [True, False, True, False]
    assert backend.peak().flops == 3e9  # the fourth try was refused: no fifth measurement


def test_data_that_fits_in_the_cache_is_not_held_to_memory_bandwidth():
    slow_memory = Peak(flops=1e20, bytes_per_s=1.0)
    assert measure(KnownLimits(slow_memory, l2=None)).status == STATUS_OK
    assert measure(KnownLimits(slow_memory, l2=1 << 30)).status == STATUS_OK
    # Bigger than the cache, or the cache flushed before each sample: memory bounds it.
    assert measure(KnownLimits(slow_memory, l2=100)).status == STATUS_SUSPECT
    flushed = SamplingPolicy(warmup=1, min_samples=3, max_samples=3, budget_s=0.05,
                             min_time_s=0, flush_l2=True, reject_preempted=False)
    assert measure(KnownLimits(slow_memory, l2=1 << 20), flushed).status == STATUS_SUSPECT


class NoPeaks(CpuBackend):
    def peak(self):
        return None


def test_without_known_peaks_results_are_ok_and_carry_their_work():
    result = measure(NoPeaks())
    assert result.status == STATUS_OK and result.bound_us is None
    assert result.flops == 2 * 16 * 32 * 64
    assert result.bytes == (16 * 64 + 32 * 64 + 16 * 32) * 4
    assert result.time_in_calls_s > 0 and result.wall_s >= result.time_in_calls_s
    assert result.warmup == 1 and 3 <= result.stats.samples <= 5


def test_a_kernel_type_without_replay_is_a_skipped_result():
    ref = CaseRef("Foo-8-BF16-00000000", "Foo", "Foo.csv", 0, "sig", False)
    result = CaseRunner(CpuBackend(), RunnerOptions(policy=FAST)).run(ref, ROW, "n", "Foo.csv")
    assert result.status == STATUS_SKIPPED and "no replay for Foo" in result.error
