"""The `graph` method: kernel device time without launch overhead, at full speed.

Timing each call with device events measures its launch too (about 20 us for a 3 us GEMM on
an H100); the profiler measures kernels alone but costs about a second of trace processing
per case. Here a batch of calls is captured once in a device graph and the graph is replayed:
replays are queued back to back and timed with device events, so the device never waits for
the host, and one sample is one replay's time divided by the calls in it. The batch is sized
so that a replay lasts about TARGET_REPLAY_S, far longer than queueing one (a few us), so
the queue never runs dry. The samples then go through the same adaptive stopping rule as
every other method.

What a sample holds: the device time of the call's kernels plus the gaps between kernels
inside a graph (well under a microsecond each), the basis an independent CUDA-graph replay
(triton's do_bench_cudagraph) measures on too.

L2 flush mode is not timed this way: a flush inside the graph would have to be subtracted,
and its own replay-to-replay spread (a 2x L2 write, tens of us) would swamp a few-us kernel.
With --npuperf-flush-l2, `auto` measures with the profiler instead, which times the kernels
alone, and an explicit `graph` is refused (see harness/context.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

from ..devices.base import DeviceGraphs, GraphReplay, Timer
from .sampler import SamplingPolicy, SamplingRun, sample

TARGET_REPLAY_S = 1e-3
# A replay this long is far longer than queueing the next one (a few us): the device queue
# never runs dry, so launch costs stay hidden.
MIN_REPLAY_S = 1e-4
MAX_CALLS = 2048  # capture and graph memory grow with the batch; 2048 x 0.5 us is 1 ms
CALIBRATION_REPLAYS = 5
_CAPTURES = 3  # a first estimate from a 1-call graph, then at most two better-sized batches


def calls_for(per_call_us: float, target_s: float = TARGET_REPLAY_S) -> int:
    """Calls per graph for replays of about `target_s`."""
    if not per_call_us > 0 or not math.isfinite(per_call_us):
        return MAX_CALLS
    return max(1, min(MAX_CALLS, math.ceil(target_s * 1e6 / per_call_us)))


def _per_call(graph: GraphReplay) -> float:
    times = sorted(graph.replay_times(CALIBRATION_REPLAYS))
    return times[len(times) // 2] / graph.calls


def capture_batch(call: Callable[[], object], graphs: DeviceGraphs,
                  target_s: float = TARGET_REPLAY_S, estimate_us: float | None = None,
                  min_calls: int = 1) -> GraphReplay:
    """A graph of enough calls that one replay lasts about `target_s`.

    A batch holds at least `min_calls` calls: a call that rotates its inputs through that
    many copies (kernels/cache_state.py) must meet every copy inside each replay, else the
    replayed copies would stay in the cache between replays. The first batch is sized from
    `estimate_us` (eager calls timed with their launch), or is a single call; both can only
    overestimate a short kernel (the host may not keep up with it), so a replay comes out
    shorter than `target_s`. It is recaptured only while a replay is shorter than
    MIN_REPLAY_S: longer replays already keep the device busy while the next one is queued,
    and each capture costs milliseconds of graph instantiation (measured on an H100: 13 ms on
    average for the MatMul rows), most of a case's overhead.
    """
    first = calls_for(estimate_us, target_s) if estimate_us else 1
    graph = graphs.capture(call, max(first, min_calls))
    for _ in range(_CAPTURES - 1):
        per_call = _per_call(graph)
        wanted = max(calls_for(per_call, target_s), min_calls)
        if wanted <= graph.calls or graph.calls * per_call >= MIN_REPLAY_S * 1e6:
            break
        graph = graphs.capture(call, wanted)
    return graph


class ReplayTimer(Timer):
    """Times replays of a captured batch: each value is one replay's time per call (us)."""

    name = "graph"

    def __init__(self, graph: GraphReplay) -> None:
        self.graph = graph

    def time_calls(self, call: Callable[[], object], n: int,
                   before_each: Callable[[], object] | None = None) -> list[float]:
        calls = self.graph.calls
        return [t / calls for t in self.graph.replay_times(n)]


def sample_graph(call: Callable[[], object], graphs: DeviceGraphs, policy: SamplingPolicy, *,
                 deadline: float | None = None, estimate_us: float | None = None,
                 min_calls: int = 1, budget_end: float | None = None
                 ) -> tuple[SamplingRun, int]:
    """Adaptive sampling of graph replays; the run and the calls per replay. Raises the
    device's CaptureError when the call cannot be captured (the caller falls back)."""
    start = time.perf_counter()
    graph = capture_batch(call, graphs, estimate_us=estimate_us, min_calls=min_calls)
    captured = time.perf_counter() - start
    # The caller warmed the call up eagerly; one replay warms the graph itself (its first
    # launch uploads it to the device).
    replays = dataclasses.replace(policy, warmup=1, flush_l2=False)
    run = sample(_unused, ReplayTimer(graph), replays, deadline=deadline,
                 calls_per_sample=graph.calls, device_time=True, budget_end=budget_end)
    run.capture_s = captured
    return run, graph.calls


def _unused() -> None:
    """The replay timer replays the graph itself; the sampler's call is never made."""
