"""Bounds that hold (issue 21): the bytes a kernel actually touches, inputs read cold at main
memory's bandwidth, a measured latency floor, `suspect` only against a bound known to hold,
and every bound saying how it was made."""

from __future__ import annotations

import pytest

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.devices.base import MemoryLevel, Peak
from pytest_npuperf.devices.peaks import cuda_peak
from pytest_npuperf.measure.floor import latency_floor
from pytest_npuperf.measure.policy import SamplingPolicy
from pytest_npuperf.measure.result import STATUS_NOISY, STATUS_OK, STATUS_SUSPECT
from pytest_npuperf.measure.roofline import roofline
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from tests.kernel_rows import prepare
from tests.replay_project import cells
from tests.test_kernels_moe import F32, I64, gmm_row

MB = 1 << 20
H200 = cuda_peak("NVIDIA H200", 60 * MB)


def test_a_grouped_gemm_reads_only_the_experts_that_got_tokens():
    # 2 tokens over 64 experts: at most 2 experts have rows; the others' weights are not read.
    row = gmm_row(((2, 16), F32), ((64, 16, 8), F32), ((2, 8), F32), group_list=((64,), I64))
    case, prepared = prepare("GroupedMatmul", row)
    sizes = prepared.tensors["group_list"].tolist()
    active = sum(1 for s in sizes if s)
    assert 1 <= active <= 2
    weight = 64 * 16 * 8 * 4
    assert prepared.bytes == pytest.approx(case.io_bytes - weight * (64 - active) / 64)
    # Every expert busy: every weight read.
    full = gmm_row(((4096, 16), F32), ((4, 16, 8), F32), ((4096, 8), F32), group_list=((4,), I64))
    case, prepared = prepare("GroupedMatmul", full)
    assert prepared.bytes == case.io_bytes


def test_suspect_only_against_a_bound_known_to_hold():
    gemm_bytes = 400 * MB  # from HBM, a GEMM's own slots
    exact = roofline(H200, 0.0, gemm_bytes, 10.0, bytes_exact=True)
    assert exact.exact_bound_us == pytest.approx(gemm_bytes / 4.8e12 * 1e6)
    # The same bytes counted from slots the kernel may skip (an attention mask): for reading.
    estimate = roofline(H200, 0.0, gemm_bytes, 10.0)
    assert estimate.bound_us == exact.bound_us and estimate.exact_bound_us is None
    assert "an estimate of its traffic" in estimate.derivation
    # An L2 whose bandwidth no vendor publishes bounds nothing either.
    cached = roofline(H200, 0.0, 10 * MB, 0.1, bytes_exact=True)
    assert cached.memory_level == "L2" and cached.exact_bound_us is None
    assert "(estimated)" in cached.derivation
    # The FLOP count at the data sheet's peak always holds.
    flops = roofline(H200, 1e12, 1.0, 1.0)
    assert flops.exact_bound_us == pytest.approx(1e12 / 989e12 * 1e6)
    assert "TFLOP/s (NVIDIA H200 data sheet)" in flops.derivation


def test_inputs_read_cold_are_bounded_by_main_memory_even_when_the_set_fits_a_cache():
    # 16 MB of weights rotated through copies: each call reads them from HBM, whatever L2 holds.
    line = roofline(H200, 0.0, 20 * MB, 100.0, cold_bytes=16 * MB, bytes_exact=True)
    assert line.memory_level == "HBM"
    assert line.memory_bound_us == pytest.approx(16 * MB / 4.8e12 * 1e6)
    assert line.exact_bound_us == line.memory_bound_us
    assert "1.678e+07 B of them read cold) at HBM 4800 GB/s" in line.derivation


def test_a_few_microsecond_kernel_is_bounded_by_the_latency_floor():
    line = roofline(H200, 2e3, 4e3, 3.0, floor_us=2.2, floor_how="fill, graph")
    assert line.bound_by == "latency" and line.bound_us == 2.2
    assert line.exact_bound_us < 0.01  # the floor flags nothing: measured, not exact
    assert line.derivation.endswith("latency floor 2.2 us (fill, graph)")


def test_the_floor_is_measured_with_the_cases_timer_and_under_every_sample():
    backend = CpuBackend()
    floor = latency_floor(backend.device, backend.timer(), None, "events")
    assert 0 < floor.us < 1000  # a dispatch and a fill of one element
    assert floor.how.startswith("fastest of ") and "one-element fill, events" in floor.how
    tiny = cells("4;4", "DT_FLOAT;DT_FLOAT", "ND;ND", "4", "DT_FLOAT")
    runner = CaseRunner(backend, RunnerOptions(policy=SamplingPolicy(
        warmup=1, min_samples=5, max_samples=20, budget_s=0.05, min_time_s=0,
        reject_preempted=False)))
    result = runner.run(CaseRef("Add-4", "Add", "Add.csv", 0, "s", True), tiny, "n", "Add.csv")
    assert result.status in (STATUS_OK, STATUS_NOISY)  # this busy host may make it noisy
    assert result.bound_by == "latency" and result.bound_us == pytest.approx(runner.latency_floor().us)
    assert "latency floor" in result.bound_derivation and "compute " in result.bound_derivation


class DataSheetCpu(CpuBackend):
    """A CPU with a data sheet: known peaks, so that the bounds' rules apply as on a GPU."""

    def __init__(self, peak: Peak) -> None:
        super().__init__(0, "CPU_TEST")
        self._peak = peak

    def peak(self):
        return self._peak

    def l2_cache_bytes(self):
        return None

    def remeasure_peak(self):
        return False


def _gemm(backend) -> object:
    row = cells("16,64;32,64", "DT_FLOAT;DT_FLOAT", "ND;ND", "16,32", "DT_FLOAT")
    runner = CaseRunner(backend, RunnerOptions(policy=SamplingPolicy(
        warmup=1, min_samples=3, max_samples=5, budget_s=0.05, min_time_s=0,
        reject_preempted=False), cache="warm"))
    ref = CaseRef("MatMulV2-16x64x32", "MatMulV2", "MatMulV2.csv", 0, "s", True)
    return runner.run(ref, row, "n", "MatMulV2.csv")


def test_a_measurement_beating_an_estimated_bandwidth_is_not_suspect():
    slow_estimate = Peak(1e20, 1e20, (MemoryLevel("L2", MB, 1.0, estimated=True),))
    assert _gemm(DataSheetCpu(slow_estimate)).status == STATUS_OK
    slow_published = Peak(1e20, 1e20, (MemoryLevel("L2", MB, 1.0),))
    result = _gemm(DataSheetCpu(slow_published))
    assert result.status == STATUS_SUSPECT and "faster than the device allows" in result.error


def test_back_to_back_cases_share_the_hosts_probes_between_them(monkeypatch):
    """A case that starts right after another takes its closing probes as its opening ones,
    and a case that closes within MEMORY_PROBE_EVERY_S of the newest memory copy takes that
    copy's time (1 memory copy for 2 quick cases, not 4); one that starts PROBES_REUSED_S
    later probes anew, and with copies due at every probe each case copies twice. The loop
    probe runs right before and right after every case."""
    from pytest_npuperf.replay import runner as runner_module

    copies, loops = [], []
    monkeypatch.setattr(runner_module, "memory_sample",
                        lambda: copies.append(1) or 5000.0 + len(copies))
    monkeypatch.setattr(runner_module, "reference_samples", lambda: loops.append(1) or [9.0])
    backend = CpuBackend()
    tiny = cells("4;4", "DT_FLOAT;DT_FLOAT", "ND;ND", "4", "DT_FLOAT")
    runner = CaseRunner(backend, RunnerOptions(policy=SamplingPolicy(
        warmup=1, min_samples=5, max_samples=10, budget_s=0.05, min_time_s=0,
        reject_preempted=False)))
    ref = CaseRef("Add-4", "Add", "Add.csv", 0, "s", True)
    first = runner.run(ref, tiny, "n", "Add.csv")
    second = runner.run(ref, tiny, "n", "Add.csv")
    assert len(copies) == 1 and len(loops) == 3
    assert first.reference_memory_us == second.reference_memory_us == 5001.0
    monkeypatch.setattr(runner_module, "PROBES_REUSED_S", 0.0)
    monkeypatch.setattr(runner_module, "MEMORY_PROBE_EVERY_S", 0.0)
    third = runner.run(ref, tiny, "n", "Add.csv")
    assert len(copies) == 3 and len(loops) == 5
    assert third.reference_memory_us == (5002.0 + 5003.0) / 2
