"""How a session shares its host: pinned CPU threads recorded with every result, xdist
workers splitting the cores, one device per worker on GPU/NPU hosts, a warning when the
machine is oversubscribed (the clock the duty cycle is measured against: test_wall_clock.py)."""

from __future__ import annotations

import pytest
import torch

import pytest_npuperf.devices as devices
import pytest_npuperf.harness.context as session_module
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.harness.context import RunContext
from pytest_npuperf.harness.owner import Owner
from pytest_npuperf.measure.host import available_cores, default_threads, worker_cores
from pytest_npuperf.measure.sampler import SamplingPolicy
from pytest_npuperf.replay import runner as runner_module
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.outcome import SessionInfo
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from pytest_npuperf.report.summary import host_warnings

ROW = {"Input Shapes": "16,64;32,64", "Input Data Types": "DT_FLOAT;DT_FLOAT",
       "Input Formats": "ND;ND", "Output Shapes": "16,32", "Output Data Types": "DT_FLOAT"}
REF = CaseRef("MatMulV2-16x64x32-FLOAT-00000000", "MatMulV2", "MatMulV2.csv", 0, "sig", True)
# Preempted samples kept: what these tests judge must not depend on how busy the host is.
FAST = SamplingPolicy(warmup=1, min_samples=3, max_samples=5, budget_s=0.05, min_time_s=0,
                      reject_preempted=False)


@pytest.fixture
def torch_threads():
    """The test process's own intra-op threads, restored after a session pinned them."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def session(pytester, *args, workerinput=None, workers=0) -> RunContext:
    # Without the plugin whose unconfigure collects garbage five times (a second per test).
    config = pytester.parseconfigure("-p", "no:unraisableexception", *args)
    if workerinput is not None:
        config.workerinput = workerinput
    if workers:  # what xdist's controller holds for `-n N`
        config.option.tx, config.option.dist = ["popen"] * workers, "load"
    return RunContext(config)


def test_the_default_share_is_the_available_cores_over_the_workers():
    assert default_threads(8, 1) == 8 and default_threads(8, 3) == 2
    assert default_threads(2, 4) == 1  # at least one
    cores = [0, 1, 4, 5]
    assert [worker_cores(cores, 2, k) for k in (0, 1)] == [[0, 1], [4, 5]]
    assert [worker_cores(cores, 4, k) for k in range(4)] == [[0], [1], [4], [5]]


def test_a_cpu_session_pins_its_threads_and_every_result_records_them(pytester, torch_threads):
    replay = session(pytester, "--npuperf-device", "cpu", "--npuperf-threads", "1")
    backend = replay.backend
    assert (backend.threads, backend.cores) == (1, None)  # a serial run keeps its cores
    result = CaseRunner(backend, RunnerOptions(policy=FAST)).run(REF, ROW, "n", "f.csv")
    assert torch.get_num_threads() == 1
    assert result.threads == 1 and "threads 1" in result.stack


def test_by_default_a_serial_cpu_session_uses_every_available_core(pytester):
    replay = session(pytester, "--npuperf-device", "cpu")
    assert replay.backend.threads == len(available_cores()) == replay.threads


def test_xdist_workers_on_a_cpu_split_the_cores(pytester):
    cores = available_cores()
    replay = session(pytester, "--npuperf-device", "cpu",
                     workerinput={"workerid": "gw1", "workercount": 2})
    share = max(1, len(cores) // 2)
    assert replay.backend.threads == share
    assert replay.backend.cores == worker_cores(cores, 2, 1)


@pytest.mark.parametrize("value", ["0", "-3", "two"])
def test_threads_that_are_not_a_count_are_a_usage_error(pytester, value):
    result = pytester.runpytest("--npuperf-threads", value, "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--npuperf-threads: '{value}' is not a count of at least 1*"])


def test_threads_from_the_ini_file_are_checked_too(pytester):
    pytester.makeini("[pytest]\nnpuperf_threads = 0\n")
    with pytest.raises(pytest.UsageError, match="npuperf_threads: 0 is not a count"):
        _ = session(pytester).settings


class FakeCuda(CpuBackend):
    """Names itself a CUDA device; nothing here touches a GPU."""

    kind = "cuda"

    def device_name(self) -> str:
        return "NVIDIA H100 80GB HBM3"


@pytest.fixture
def gpus(monkeypatch):
    """A host with `count` CUDA devices (set the value before the session looks)."""
    count = {"cuda": 1}
    monkeypatch.setattr(devices, "device_count", lambda kind: count.get(kind, 1))
    monkeypatch.setattr(session_module, "select_backend",
                        lambda kind, index, name: FakeCuda(index or 0, name))
    return count


def test_more_workers_than_gpus_is_refused_before_any_case(pytester, gpus):
    controller = Owner(session(pytester, "--npuperf-device", "cuda", workers=2))
    with pytest.raises(pytest.UsageError, match=r"2 xdist workers but 1 CUDA device\(s\) on "
                                                r"this host.*use -n 1 or fewer"):
        controller.prepare_writes()
    worker = session(pytester, "--npuperf-device", "cuda",
                     workerinput={"workerid": "gw1", "workercount": 2})
    with pytest.raises(pytest.UsageError, match="2 xdist workers but 1 CUDA device"):
        _ = worker.backend


def test_one_worker_per_gpu_is_fine_and_worker_k_uses_gpu_k(pytester, gpus):
    gpus["cuda"] = 2
    worker = session(pytester, "--npuperf-device", "cuda",
                     workerinput={"workerid": "gw1", "workercount": 2})
    assert worker.backend.kind == "cuda" and worker.backend.index == 1
    assert session(pytester, "--npuperf-device", "cuda", workers=2).backend.index == 0


def test_an_oversubscribed_machine_is_noted_on_each_case_and_in_the_summary(monkeypatch):
    cores = len(available_cores())
    monkeypatch.setattr(runner_module, "host_load", lambda: cores + 1.5)
    result = CaseRunner(CpuBackend(), RunnerOptions(policy=FAST)).run(REF, ROW, "n", "f.csv")
    assert result.host_load == cores + 1.5
    assert result.note == (f"machine oversubscribed: 1-minute load {cores + 1.5:.1f} above the "
                           f"{cores} core(s) available")
    assert f"({result.note})" in result.status_text  # the row's MicroBench Status says so
    info = SessionInfo(run_id="r", started="", wall_s=10.0, device={}, options={}, cores=2,
                       load_at_start=3.4)
    assert host_warnings([result], info)[:2] == [
        "machine oversubscribed at session start: 1-minute load 3.4 above the 2 core(s) "
        "available; timings are not trustworthy",
        "1 case(s) started while the machine was oversubscribed (see their status)"]
    quiet = SessionInfo(run_id="r", started="", wall_s=10.0, device={}, options={}, cores=2,
                        load_at_start=1.2)
    assert host_warnings([], quiet) == []
    monkeypatch.setattr(runner_module, "host_load", lambda: cores - 0.5)
    assert not CaseRunner(CpuBackend(), RunnerOptions(policy=FAST)).run(
        REF, ROW, "n", "f.csv").note


def test_auto_is_graph_on_cuda_and_profiler_with_a_flush(pytester, gpus):
    assert session(pytester, "--npuperf-device", "cuda").method == "graph"
    assert session(pytester, "--npuperf-device", "cuda", "--npuperf-flush-l2").method == \
        "profiler"


def test_auto_is_events_on_a_cpu(pytester):
    assert session(pytester, "--npuperf-device", "cpu").method == "events"


def test_graph_where_it_cannot_time_is_a_usage_error(pytester, gpus, monkeypatch):
    with pytest.raises(pytest.UsageError, match="graph needs device graphs"):
        _ = session(pytester, "--npuperf-method", "graph").method  # a stand-in without graphs
    monkeypatch.setattr(FakeCuda, "graphs", lambda self: object())
    assert session(pytester, "--npuperf-method", "graph").method == "graph"
    with pytest.raises(pytest.UsageError, match="cannot time an L2 flush"):
        _ = session(pytester, "--npuperf-method", "graph", "--npuperf-flush-l2").method
