"""Issue 22 item 7: the graph method on the NPU (torch.npu.NPUGraph), with a stand-in of
torch_npu's graph API (torch_npu/npu/graphs.py and npu/__init__.py of torch_npu 2.9.0:
NPUGraph.capture_begin(pool=None, capture_error_mode="global"), capture_end, replay,
graph_pool_handle, Stream, Event; torch_npu._C._npu_endAllocateCurrentStreamToPool and
_npu_releasePool, Module.cpp:449-456) on a simulated device clock: capture, replay, the
fallback of a call that cannot be captured, and when `auto` picks it."""

from __future__ import annotations

import types

import pytest
import torch

from pytest_npuperf.devices.graphs import TorchGraphs
from pytest_npuperf.measure import methods as methods_module
from pytest_npuperf.measure.policy import (
    METHOD_EVENTS,
    METHOD_GRAPH,
    METHOD_PROFILER,
    PROFILER_NONE,
    PROFILER_TORCH_NPU,
    auto_method,
)
from pytest_npuperf.measure.result import STATUS_OK
from pytest_npuperf.measure.sampler import SamplingPolicy
from pytest_npuperf.profiling.session_profiler import SessionProfiler
from pytest_npuperf.replay import runner as runner_module
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from tests.test_devices import HostTensorNpu, fake_torch_npu
from tests.test_measure_graph import FakeDeviceModule

ROW = {"Input Shapes": "4,64", "Input Data Types": "DT_BF16", "Input Formats": "ND",
       "Output Shapes": "4,32", "Output Data Types": "DT_BF16"}
REF = CaseRef("SwiGlu-4x64-BF16-00000000", "SwiGlu", "SwiGlu.csv", 0, "sig", True)
# Samples other processes took CPU time from are kept: which ones are, on a shared CI host,
# is no question of these tests (the preemption rule has tests of its own).
FAST = SamplingPolicy(warmup=2, min_samples=5, max_samples=50, budget_s=10, min_time_s=0,
                      precision=0.01, reject_preempted=False)
KERNEL_MS = 0.004


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    monkeypatch.setattr(runner_module, "host_load", lambda: None)
    monkeypatch.setattr(runner_module, "noise_reason", lambda samples: None)


class NpuDevice(FakeDeviceModule):
    """torch.npu with its graph API; `capture_fails`: the call synchronises the stream, which
    a capture does not allow: it raises, the capture is invalidated and ending it raises too."""

    def __init__(self, capture_fails: bool = False) -> None:
        super().__init__(KERNEL_MS)
        device = self
        self.capture_fails = capture_fails
        self.capturing: list[object] = []
        self.invalidated = False
        self.pools: list[tuple[int, int]] = []

        class NPUGraph(self.Graph):
            def capture_begin(self, pool=None, capture_error_mode="global"):
                super().capture_begin()
                device.pools.append(pool)
                device.capturing.append(self)

            def capture_end(self):
                super().capture_end()
                device.capturing.clear()
                if device.invalidated:
                    device.invalidated = False
                    raise RuntimeError("aclmdlRICaptureEnd failed: the capture was invalidated")

        self.NPUGraph = NPUGraph
        self.default_generators = ()
        self.graph_pool_handle = lambda: (0, len(self.pools) + 1)
        self.is_available = lambda: True
        self.set_device = self.synchronize = self.empty_cache = lambda *a: None
        self.get_device_name = lambda index: "Ascend910_9382"
        self.device_count = lambda: 1

    def launched(self) -> None:
        """A kernel launch: counted into the graph being captured."""
        if self.capturing and self.capture_fails:
            self.invalidated = True
            raise RuntimeError("aclrtSynchronizeStream: not allowed while the stream is "
                               "capturing")
        if self.capturing:
            self.capturing[-1].calls += 1


@pytest.fixture
def npu_with_graphs(monkeypatch):
    """(backend, device, released pools): the NPU backend over stand-ins of torch_npu and
    torch.npu whose npu_swiglu launches one kernel."""
    def install(capture_fails: bool = False, pool_api: bool = True):
        module = fake_torch_npu(monkeypatch, [])
        device = NpuDevice(capture_fails)
        monkeypatch.setattr(torch, "npu", device, raising=False)
        released: list[tuple[str, int, object]] = []
        if pool_api:
            module._C = types.SimpleNamespace(
                _npu_endAllocateCurrentStreamToPool=lambda i, p: released.append(("end", i, p)),
                _npu_releasePool=lambda i, p: released.append(("release", i, p)))

        def npu_swiglu(x, dim=-1):
            device.launched()
            return x[..., : x.shape[-1] // 2]
        module.npu_swiglu = npu_swiglu
        return HostTensorNpu(0), device, released
    return install


def _run(backend, method=METHOD_GRAPH):
    runner = CaseRunner(backend, RunnerOptions(policy=FAST, method=method, cache="warm"))
    return runner.run(REF, ROW, "node", "SwiGlu.csv")


def test_the_npu_times_kernels_from_npugraph_replays(npu_with_graphs):
    backend, device, released = npu_with_graphs()
    graphs = backend.graphs()
    assert isinstance(graphs, TorchGraphs) and graphs._graph_class is device.NPUGraph
    result = _run(backend)
    assert (result.status, result.method, result.fallback) == (STATUS_OK, METHOD_GRAPH, "")
    # each sample is a replay's device time per call: the kernel alone, no launch
    assert result.stats.median == pytest.approx(KERNEL_MS * 1e3)
    assert device.log.count("replay") >= result.stats.samples
    assert device.pools and all(p is not None for p in device.pools)  # a pool per capture
    assert released == []


def test_a_call_that_cannot_be_captured_falls_back_to_events_and_its_pool_is_released(
        npu_with_graphs, monkeypatch):
    backend, device, released = npu_with_graphs(capture_fails=True)

    def no_profiler(*args, **kwargs):  # on an NPU torch.profiler sees no kernels
        raise AssertionError("the NPU fallback went to torch.profiler")
    monkeypatch.setattr(methods_module, "ProfilerSession", no_profiler)
    result = _run(backend)
    assert (result.status, result.method) == (STATUS_OK, METHOD_EVENTS)
    assert result.fallback.startswith("graph capture failed (RuntimeError: "
                                      "aclrtSynchronizeStream: not allowed")
    assert [what for what, _, _ in released] == ["end", "release"]
    assert released[0][1:] == (0, device.pools[-1]) and not backend.graphs().broken


def test_without_torch_npus_pool_api_a_failed_capture_turns_graphs_off(npu_with_graphs):
    backend, _, _ = npu_with_graphs(capture_fails=True, pool_api=False)
    assert _run(backend).method == METHOD_EVENTS
    assert "allocator pool API" in backend.graphs().broken
    second = _run(backend)
    assert second.method == METHOD_EVENTS and "graphs off for this session" in second.fallback


def test_auto_picks_npugraph_unless_a_profiler_supplies_the_kernel_times_or_a_flush():
    assert auto_method("npu", flush=False, profiled=False, graphs=True) == METHOD_GRAPH
    assert auto_method("npu", flush=False, profiled=True, graphs=True) == METHOD_EVENTS
    assert auto_method("npu", flush=True, profiled=False, graphs=True) == METHOD_EVENTS
    assert auto_method("npu", flush=False, profiled=False, graphs=False) == METHOD_EVENTS
    assert auto_method("cuda", flush=False, profiled=False, graphs=True) == METHOD_GRAPH
    assert auto_method("cuda", flush=True, profiled=False, graphs=True) == METHOD_PROFILER
    assert auto_method("cpu", flush=False, profiled=False, graphs=False) == METHOD_EVENTS


def test_msprof_wrapping_the_session_keeps_events(tmp_path):
    child = SessionProfiler("auto", "npu", tmp_path, "r", env={
        "NPUPERF_MSPROF_CHILD": str(tmp_path / "handoff.json")}, graph_timing=True)
    assert child.profiled  # so auto_method gives events: msprof's durations replace them


def test_unwrapped_auto_runs_no_profiler_around_graph_replays(tmp_path, monkeypatch):
    monkeypatch.setattr("pytest_npuperf.profiling.mode.shutil.which", lambda name: None)
    graphed = SessionProfiler("auto", "npu", tmp_path, "r", env={}, graph_timing=True)
    assert graphed.mode == PROFILER_NONE and "NPUGraph replays" in graphed.notes[0]
    events = SessionProfiler("auto", "npu", tmp_path, "r", env={}, graph_timing=False)
    assert events.mode == PROFILER_TORCH_NPU
    asked = SessionProfiler("torch_npu", "npu", tmp_path, "r", env={}, graph_timing=True)
    assert asked.mode == PROFILER_TORCH_NPU and asked.profiled

