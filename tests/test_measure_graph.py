"""The graph method's logic, with a stand-in device graph (CUDA cannot run here): how the
batch is sized, what a sample is, what counts as time in calls, and the fallback of a call
that cannot be captured, recorded in the result and the row."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.devices.base import CaptureError, DeviceGraphs, GraphReplay, Peak
from pytest_npuperf.measure import methods as methods_module
from pytest_npuperf.measure.graph import MAX_CALLS, calls_for, capture_batch, sample_graph
from pytest_npuperf.measure.result import (
    METHOD_EVENTS,
    METHOD_GRAPH,
    METHOD_PROFILER,
    STATUS_FAILED,
    STATUS_OK,
    STATUS_TIMEOUT,
)
from pytest_npuperf.measure.sampler import CaseTimeout, SamplingPolicy
from pytest_npuperf.replay import runner as runner_module
from pytest_npuperf.replay.cases import CaseRef
from pytest_npuperf.replay.runner import CaseRunner, RunnerOptions
from pytest_npuperf.replay.write import _values

ROW = {"Input Shapes": "16,64;32,64", "Input Data Types": "DT_FLOAT;DT_FLOAT",
       "Input Formats": "ND;ND", "Output Shapes": "16,32", "Output Data Types": "DT_FLOAT"}
REF = CaseRef("MatMulV2-16x64x32-FLOAT-00000000", "MatMulV2", "MatMulV2.csv", 0, "sig", True)
# Samples other processes took CPU time from are kept: which ones are, on a shared CI host,
# is no question of these tests (the preemption rule has tests of its own).
FAST = SamplingPolicy(warmup=2, min_samples=5, max_samples=50, budget_s=10, min_time_s=0,
                      precision=0.01, reject_preempted=False)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """The fallbacks really time this busy CPU: leave its load and noise out of the statuses
    compared here (they have tests of their own)."""
    monkeypatch.setattr(runner_module, "host_load", lambda: None)
    monkeypatch.setattr(runner_module, "noise_reason", lambda samples: None)


class StandInReplay(GraphReplay):
    """A captured batch whose replays take `kernel_us` per call on the device, but no less
    than `launch_us` per replay (a host that cannot queue replays faster than that)."""

    def __init__(self, graphs: StandInGraphs, calls: int) -> None:
        self.graphs, self.calls = graphs, calls

    def replay_times(self, n: int) -> list[float]:
        self.graphs.replays += n
        per_replay = max(self.calls * self.graphs.kernel_us, self.graphs.launch_us)
        return [per_replay] * n


class StandInGraphs(DeviceGraphs):
    def __init__(self, kernel_us: float = 3.0, launch_us: float = 20.0,
                 error: BaseException | None = None) -> None:
        self.kernel_us, self.launch_us, self.error = kernel_us, launch_us, error
        self.captured: list[int] = []  # calls per captured graph, in order
        self.replays = 0

    def capture(self, call, calls: int) -> StandInReplay:
        if self.error is not None:
            raise CaptureError("cannot capture") from self.error
        for _ in range(calls):
            call()
        self.captured.append(calls)
        return StandInReplay(self, calls)


# A GPU's roofline comes from its data sheet; the stand-in's is one no call on any host beats
# (0.07 us for the MatMul of REF). Against this host's measured CPU peak, whether a made-up
# replay time is `suspect` would depend on the host, and is no question of these tests.
STANDIN_DATASHEET = Peak(flops=1e12, bytes_per_s=1e11, source="stand-in data sheet")


class GraphCapable(CpuBackend):
    """The CPU backend with a stand-in device graph: the runner's graph path end to end."""

    def __init__(self, graphs: StandInGraphs) -> None:
        super().__init__(0, "CPU_TEST")
        self._graphs = graphs

    def graphs(self):
        return self._graphs

    def peak(self) -> Peak:
        return STANDIN_DATASHEET


def test_calls_per_graph_aim_at_a_replay_of_the_target_length():
    assert calls_for(3.0, 1e-3) == 334
    assert calls_for(5000.0, 1e-3) == 1  # a long kernel: one call per replay
    assert calls_for(0.01, 1e-3) == MAX_CALLS and calls_for(0.0) == MAX_CALLS


def test_a_launch_bound_first_estimate_is_refined_by_recapturing():
    graphs = StandInGraphs(kernel_us=3.0, launch_us=20.0)
    graph = capture_batch(lambda: None, graphs, target_s=1e-3)
    # 1 call: 20 us per replay (launch bound, shorter than MIN_REPLAY_S) -> 50 calls: a
    # 150 us replay keeps the device busy, so no third capture.
    assert graphs.captured == [1, 50]
    assert graph.calls == 50


def test_an_eager_estimate_saves_every_recapture_when_its_replay_is_long_enough():
    graphs = StandInGraphs(kernel_us=3.0, launch_us=20.0)
    # Eager calls timed with their launch: 20 us -> 50 calls, 150 us per replay: kept.
    assert capture_batch(lambda: None, graphs, target_s=1e-3, estimate_us=20.0).calls == 50
    assert graphs.captured == [50]


def test_a_batch_whose_replay_is_too_short_is_recaptured():
    graphs = StandInGraphs(kernel_us=0.5, launch_us=20.0)
    # 20 us eager -> 50 calls, 25 us per replay (< MIN_REPLAY_S) -> 2000 calls, 1 ms.
    graph = capture_batch(lambda: None, graphs, target_s=1e-3, estimate_us=20.0)
    assert graphs.captured == [50, 2000] and graph.calls == 2000


def test_a_long_kernel_is_replayed_one_call_at_a_time():
    graphs = StandInGraphs(kernel_us=4000.0, launch_us=20.0)
    assert capture_batch(lambda: None, graphs, target_s=1e-3).calls == 1
    assert graphs.captured == [1]


def test_a_sample_is_one_replay_per_call_and_calls_time_is_device_time():
    graphs = StandInGraphs(kernel_us=3.0, launch_us=20.0)
    # Room for more samples than one batch of 20 ms of replays, so that precision stops it.
    run, calls = sample_graph(lambda: None, graphs, dataclasses.replace(FAST, max_samples=1000))
    assert calls == 50
    assert run.samples and set(run.samples) == {3.0}  # launch cost hidden: kernel time only
    assert run.warmup == 1  # one replay uploads the graph; eager warmup is the caller's
    assert run.stop_reason == "precision reached" and run.precision == 0.0
    assert run.time_in_calls_s == pytest.approx(len(run.samples) * 50 * 3.0 / 1e6)


def _run(backend, policy=FAST, method=METHOD_GRAPH):
    runner = CaseRunner(backend, RunnerOptions(policy=policy, method=method))
    return runner, runner.run(REF, ROW, "node", "MatMulV2.csv")


def test_the_runner_measures_with_graph_replays():
    graphs = StandInGraphs(kernel_us=2.0, launch_us=20.0)
    _, result = _run(GraphCapable(graphs))
    assert result.status == STATUS_OK and result.method == METHOD_GRAPH
    # Judged on the roofline: its FLOP and byte bounds, and the latency floor measured with
    # the same stand-in graphs (every replayed call takes its kernel_us there).
    assert 0 < max(result.compute_bound_us, result.memory_bound_us or 0) < 2.0
    assert result.bound_by == "latency" and result.bound_us == 2.0
    assert "latency floor 2 us (fastest of" in result.bound_derivation
    assert result.fallback == ""
    assert result.stats.median == 2.0 and result.stats.samples >= FAST.min_samples
    values = _values(result, "run-1")
    assert values["MicroBench Method"] == "graph" and values["MicroBench Status"] == "ok"
    assert values["Average Duration(us)"] == "2"
    # The case's time outside its timed replays, by part: the same as on a CUDA device.
    parts = result.overhead_s
    assert {"inputs", "warm-up calls", "graph capture"} <= set(parts)
    assert all(v > 0 for v in parts.values())
    # (The stand-in's replays report device time they did not take: only the wall bounds.)
    assert sum(parts.values()) <= result.wall_s


def test_a_call_that_cannot_be_captured_falls_back_to_the_profiler_and_says_so():
    graphs = StandInGraphs(error=RuntimeError("operation not permitted when stream is "
                                              "capturing"))
    _, result = _run(GraphCapable(graphs))
    assert result.status == STATUS_OK and result.method == METHOD_PROFILER
    assert result.fallback.startswith("graph capture failed (cannot capture)")
    assert result.stats.samples >= FAST.min_samples and result.stats.min > 0
    values = _values(result, "run-1")
    assert values["MicroBench Method"] == "profiler"
    assert values["MicroBench Status"] == "ok (graph capture failed (cannot capture))"
    assert graphs.replays == 0


def test_without_a_profiler_the_fallback_is_events(monkeypatch):
    class NoProfiler:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("Can't disable Kineto profiler when it's not running")

    monkeypatch.setattr(methods_module, "ProfilerSession", NoProfiler)
    _, result = _run(GraphCapable(StandInGraphs(error=RuntimeError("sync inside"))))
    assert result.status == STATUS_OK and result.method == METHOD_EVENTS
    assert "graph capture failed" in result.fallback
    assert "profiler: RuntimeError: Can't disable Kineto" in result.fallback


def test_a_timeout_during_capture_is_a_timeout_not_a_fallback():
    graphs = StandInGraphs(error=CaseTimeout("case timeout (1 s) inside a call"))
    _, result = _run(GraphCapable(graphs))
    assert result.status == STATUS_TIMEOUT and not result.fallback


def test_an_eager_failure_is_a_failed_case(monkeypatch):
    backend = GraphCapable(StandInGraphs())
    runner = CaseRunner(backend, RunnerOptions(policy=FAST, method=METHOD_GRAPH))

    def boom(call, n, before_each=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(runner.timing.timer, "time_calls", boom)
    result = runner.run(REF, ROW, "node", "MatMulV2.csv")
    assert result.status == STATUS_FAILED and "illegal memory access" in result.error
    assert backend.graphs().captured == []  # never captured a call that fails eagerly


class FakeDeviceModule:
    """What TorchGraphs uses of `torch.cuda`, on a simulated device clock: a replay of a graph
    of `calls` calls advances it by calls x kernel_ms; an event records the clock."""

    def __init__(self, kernel_ms: float) -> None:
        self.kernel_ms, self.clock, self.log = kernel_ms, 0.0, []
        module = self

        class Stream:
            def wait_stream(self, other):
                module.log.append("wait")

            def synchronize(self):
                module.log.append("sync")

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = module.clock

            def synchronize(self):
                module.log.append("event sync")

            def elapsed_time(self, other):
                return other.t - self.t

        class Graph:
            def __init__(self):
                self.calls = 0
                self.capturing = False

            def capture_begin(self):
                module.log.append("begin")
                self.capturing = True

            def capture_end(self):
                module.log.append("end")
                self.capturing = False

            def replay(self):
                module.log.append("replay")
                module.clock += self.calls * module.kernel_ms

        self.Stream, self.Event, self.Graph = Stream, Event, Graph
        self.current = Stream()

    def current_stream(self):
        return self.current

    def stream(self, side):
        return contextlib.nullcontext()


def test_torch_graphs_capture_on_a_side_stream_and_time_replays_back_to_back():
    from pytest_npuperf.devices.graphs import TorchGraphs

    module = FakeDeviceModule(kernel_ms=0.003)
    made = []

    class CountingGraph(module.Graph):
        def __init__(self):
            super().__init__()
            made.append(self)

    calls = []

    def call():
        calls.append(made[-1].capturing if made else None)
        if made and made[-1].capturing:
            made[-1].calls += 1

    graphs = TorchGraphs(module, CountingGraph)
    graph = graphs.capture(call, 4)
    assert calls == [False, True, True, True, True]  # one warm call, then 4 captured
    assert module.log[:3] == ["wait", "begin", "end"] and module.log[3] == "wait"
    module.log.clear()
    times = graph.replay_times(3)
    assert times == pytest.approx([4 * 0.003 * 1e3] * 3)  # us per replay of 4 calls
    assert module.log == ["replay"] * 4 + ["event sync"]  # one untimed replay leads a batch
    module.log.clear()
    single = graphs.capture(call, 1)
    assert single.replay_times(2) == pytest.approx([3.0, 3.0])
    assert module.log.count("replay") == 2  # a single long call needs no lead replay


def _failing_capture(module):
    """A call with a host synchronisation inside: the capture is invalidated, so ending it
    raises as well (as cudaStreamEndCapture does)."""
    state = {}

    class Graph(module.Graph):
        def capture_begin(self, *pool):
            super().capture_begin()
            state["capturing"], state["pool"] = True, pool

        def capture_end(self):
            super().capture_end()
            if state.pop("invalidated", False):
                raise RuntimeError("CUDA error: operation failed due to a previous error "
                                   "during capture")

    def call():
        if state.get("capturing"):
            state["invalidated"] = True
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing\n"
                               "more")

    return Graph, call, state


def test_torch_graphs_end_a_failed_capture_release_its_pool_and_report_it():
    from pytest_npuperf.devices.graphs import TorchGraphs

    module = FakeDeviceModule(kernel_ms=0.003)
    module.graph_pool_handle = lambda: (0, 7)
    Graph, call, state = _failing_capture(module)
    released = []
    graphs = TorchGraphs(module, Graph, abandon_pool=released.append)
    with pytest.raises(CaptureError, match=r"^RuntimeError: CUDA error: operation not "
                                           r"permitted when stream is capturing$"):
        graphs.capture(call, 8)
    assert state["pool"] == ((0, 7),)  # a pool of its own, so that it can be released
    assert released == [(0, 7)] and not graphs.broken
    assert module.log == ["wait", "begin", "end", "sync", "wait"]


def test_a_pool_that_cannot_be_released_turns_graphs_off_for_the_session():
    from pytest_npuperf.devices.graphs import TorchGraphs

    module = FakeDeviceModule(kernel_ms=0.003)
    module.graph_pool_handle = lambda: (0, 8)
    Graph, call, _ = _failing_capture(module)

    def cannot(pool):
        raise RuntimeError("endAllocatePool: not currently recording to mempool_id")

    graphs = TorchGraphs(module, Graph, abandon_pool=cannot)
    with pytest.raises(CaptureError):
        graphs.capture(call, 8)
    assert graphs.broken.startswith("a failed capture's memory pool could not be released")
    with pytest.raises(CaptureError, match="graphs off for this session"):
        graphs.capture(lambda: None, 1)
