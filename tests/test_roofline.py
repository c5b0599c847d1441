"""The roofline of a case: which memory bounds it (never "cached bytes are free"), the peaks
of known devices, a CPU's measured peaks, and the shard split."""

from __future__ import annotations

import json

import pytest
import torch

from pytest_npuperf.devices import cpu_peak as cpu_peak_module
from pytest_npuperf.devices.base import MemoryLevel, Peak
from pytest_npuperf.devices.peaks import ascend_peak, cuda_peak
from pytest_npuperf.measure.roofline import DATASHEET_SLACK, MEASURED_SLACK, roofline
from pytest_npuperf.replay.shard import in_shard, shard_of

MB = 1 << 20


def test_a_small_gemm_on_a_gpu_is_bounded_by_its_l2_not_free():
    h100 = cuda_peak("NVIDIA H100 80GB HBM3", 50 * MB)
    m = n = k = 512  # bf16: 1.5 MB, fits the 50 MB L2
    flops, nbytes = 2.0 * m * n * k, 2.0 * (m * k + n * k + m * n)
    line = roofline(h100, flops, nbytes, median_us=20.0)
    assert line.memory_level == "L2" and line.memory_bound_us == pytest.approx(nbytes / 12e12 * 1e6)
    assert line.memory_bound_us > 0.1  # was 0.001 us when cached bytes counted as free
    assert line.hbm_bound_us == pytest.approx(nbytes / 3.35e12 * 1e6)
    assert line.compute_bound_us == pytest.approx(flops / 989e12 * 1e6)
    assert line.bound_us == max(line.compute_bound_us, line.memory_bound_us)
    assert line.bound_by == "compute"
    assert line.achieved_tflops == pytest.approx(flops / 20e-6 / 1e12)
    assert line.mfu == pytest.approx(flops / 20e-6 / 989e12)
    assert line.mbu == pytest.approx(nbytes / 20e-6 / 12e12)
    assert line.slack == DATASHEET_SLACK
    # Flushed before every sample, or larger than the L2: HBM bounds it.
    assert roofline(h100, flops, nbytes, 20.0, flushed=True).memory_level == "HBM"
    big = roofline(h100, 0.0, 400 * MB, 200.0)
    assert big.memory_level == "HBM" and big.bound_by == "memory"


def test_eight_bit_operands_use_the_eight_bit_peak():
    a2 = ascend_peak("ATLAS_800_A2_376T_64G")
    assert roofline(a2, 1e12, 1.0, None, operand_dtype="DT_INT8").compute_bound_us == \
        pytest.approx(1e12 / 752e12 * 1e6)
    assert roofline(a2, 1e12, 1.0, None, operand_dtype="DT_BF16").compute_bound_us == \
        pytest.approx(1e12 / 376e12 * 1e6)


def test_device_tables():
    assert ascend_peak("ATLAS_800_A3_752T_128G_DIE").flops == pytest.approx(376e12)  # a die
    assert ascend_peak("ATLAS_800_A2_280T_64G_PCIE").flops == pytest.approx(280e12)
    assert ascend_peak("CPU_SOMETHING") is None
    assert cuda_peak("NVIDIA H200").bytes_per_s == pytest.approx(4.8e12)
    assert cuda_peak("NVIDIA B200").flops == pytest.approx(2250e12)
    assert cuda_peak("NVIDIA A100-SXM4-40GB").bytes_per_s == pytest.approx(1.555e12)
    assert cuda_peak("NVIDIA A100-SXM4-80GB").bytes_per_s == pytest.approx(2.039e12)
    assert cuda_peak("NVIDIA H100 PCIe").flops == pytest.approx(756e12)
    assert cuda_peak("Tesla T4") is None
    assert cuda_peak("NVIDIA H100 80GB HBM3", 60 * MB).levels[0].capacity == 60 * MB


def test_unknown_caches_give_no_memory_bound_and_measured_peaks_a_wide_slack():
    bare = Peak(1e12, 1e9)
    assert roofline(bare, 1e6, 1e6, 10.0).memory_bound_us is None  # nothing known: no claim
    assert roofline(bare, 1e6, 1e6, 10.0, cache_bytes=100).memory_level == "HBM"
    cpu = Peak(1e11, 2e10, (MemoryLevel("L2", MB, 5e10), MemoryLevel("LLC", 32 * MB, 4e10)),
               memory="DRAM", measured=True)
    assert roofline(cpu, 0.0, 4 * MB, 100.0).memory_level == "LLC"
    assert roofline(cpu, 0.0, 512 * 1024, 100.0).memory_level == "L2"
    assert roofline(cpu, 0.0, 64 * MB, 100.0).memory_level == "DRAM"
    assert roofline(cpu, 1.0, 1.0, 1.0).slack == MEASURED_SLACK


def test_cpu_peaks_are_measured_once_per_host_and_the_best_is_kept(tmp_path, monkeypatch):
    figures = iter([Peak(50e9, 10e9, (MemoryLevel("L2", MB, 30e9),), memory="DRAM",
                         measured=True, source="busy"),
                    Peak(90e9, 8e9, (MemoryLevel("L2", MB, 40e9),), memory="DRAM",
                         measured=True, source="quiet")])
    monkeypatch.setattr(cpu_peak_module, "measure_cpu_peak", lambda: next(figures))
    first = cpu_peak_module.cpu_peak("Test CPU", tmp_path)
    assert first.flops == 50e9
    # A later session reads the cache: no probe (the second figures are still unused).
    assert cpu_peak_module.cpu_peak("Test CPU", tmp_path) == first
    # Probed again (a case beat the cached peak): figure by figure, the best is kept.
    second = cpu_peak_module.cpu_peak("Test CPU", tmp_path, again=True)
    assert (second.flops, second.bytes_per_s, second.levels[0].bytes_per_s) == (90e9, 10e9, 40e9)
    assert cpu_peak_module.cpu_peak("Test CPU", tmp_path) == second
    cached = json.loads(cpu_peak_module.cache_file(tmp_path).read_text())
    assert cached["schema"] == "npuperf-cpu-peaks/1"
    (entry,) = cached["peaks"].values()
    assert entry["flops"] == 90e9 and entry["bytes_per_s"] == 10e9


def test_cpu_peak_measurement_is_real_and_quick():
    threads = torch.get_num_threads()
    peak = cpu_peak_module.measure_cpu_peak({"L2": 512 * 1024, "L3": 8 * MB})
    assert peak.measured and peak.flops > 1e8 and peak.bytes_per_s > 1e8
    assert [lv.name for lv in peak.levels] == ["L2", "LLC"]
    assert torch.get_num_threads() == threads  # the single-threaded probe gave them back


@pytest.fixture
def session_threads():
    """Sets torch's intra-op threads as a session would, and puts them back afterwards."""
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _probes(monkeypatch, gemm, copy):
    """Probes whose rate depends on torch's threads when they run: {threads: rate}."""
    ran = []

    def probe(rates):
        def rate(*args):
            ran.append(torch.get_num_threads())
            return rates[torch.get_num_threads()]
        return rate

    monkeypatch.setattr(cpu_peak_module, "_gemm_flops", probe(gemm))
    monkeypatch.setattr(cpu_peak_module, "_copy_rate", probe(copy))
    return ran


def test_each_cpu_peak_figure_is_the_better_of_one_thread_and_the_sessions(monkeypatch,
                                                                          session_threads):
    """Measured on a 16-core host running other work: the threaded copies waited for a
    preempted thread (the L2 read 0.04 GB/s) and a float32 MatMul of 8x128x64 that torch ran on
    one thread in 6 us was judged 150x faster than the CPU allows. A GEMM gains from threads;
    a small copy, whose parallel region waits for its slowest thread, need not."""
    ran = _probes(monkeypatch, gemm={1: 50e9, 16: 400e9}, copy={1: 60e9, 16: 0.04e9})
    session_threads(16)
    peak = cpu_peak_module.measure_cpu_peak({"L2": 2 * MB, "L3": 32 * MB})
    assert sorted(set(ran)) == [1, 16] and torch.get_num_threads() == 16
    assert peak.flops == 400e9 and peak.bytes_per_s == 60e9
    assert [(lv.name, lv.bytes_per_s) for lv in peak.levels] == [("L2", 60e9), ("LLC", 60e9)]
    assert "with 1 and 16 threads" in peak.source
    held_up = Peak(400e9, 0.04e9, (MemoryLevel("L2", 2 * MB, 0.04e9),), memory="DRAM",
                   measured=True)  # the threaded figures alone
    for figures, suspect in ((held_up, True), (peak, False)):
        line = roofline(figures, 2 * 8 * 128 * 64, 4 * (8 * 128 + 128 * 64 + 8 * 64), 6.0)
        assert line.memory_level == "L2" and (line.slack * line.bound_us > 6.0) is suspect


def test_a_one_thread_session_probes_once_and_a_failed_probe_gives_the_threads_back(
        monkeypatch, session_threads):
    ran = _probes(monkeypatch, gemm={1: 50e9}, copy={1: 60e9})
    session_threads(1)
    assert "with 1 thread " in cpu_peak_module.measure_cpu_peak({"L2": 2 * MB}).source
    assert ran == [1, 1, 1]  # L2, DRAM, GEMM: once each
    _probes(monkeypatch, gemm={4: 50e9}, copy={4: 60e9})  # no rate for one thread: it raises
    session_threads(4)
    with pytest.raises(KeyError):
        cpu_peak_module.measure_cpu_peak({"L2": 2 * MB})
    assert torch.get_num_threads() == 4


def test_shards_split_every_case_once_and_stably():
    ids = [f"MatMulV2-{m}x64x32-BF16-{m:08x}" for m in range(200)]
    shards = [[i for i in ids if in_shard(i, (k, 4))] for k in range(1, 5)]
    assert sorted(i for shard in shards for i in shard) == sorted(ids)
    assert all(20 < len(s) < 80 for s in shards)
    assert shard_of(ids[0], 4) == shard_of(ids[0], 4)  # the same in every process
    assert in_shard(ids[0], None)
