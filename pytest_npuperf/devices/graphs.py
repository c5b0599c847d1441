"""Device graphs through torch's graph API: `torch.cuda.CUDAGraph` on a GPU.

The API is written against a torch device module (`torch.cuda`: Stream, stream, Event,
current_stream) and its graph class, because torch_npu mirrors it (`torch.npu.NPUGraph`,
aclgraph underneath): the NPU backend can hand its own module here once it times graphs.

Capture runs on a side stream, after one call on that stream (lazy initialisation such as
library handles and workspaces must not happen inside a capture), without the
synchronise / garbage-collect / empty-cache that `torch.cuda.graph` does on entry: those
cost milliseconds per case in a session holding 10^5 collected cases, and nothing here needs
them (each case's graph draws from its own private memory pool).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from itertools import pairwise
from types import ModuleType

from .base import CaptureError, DeviceGraphs, GraphReplay


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _leave_capture_mode(module: ModuleType) -> None:
    """An invalidated capture leaves the device's default random generators in capture mode:
    torch's `capture_end` raises before the epilogue that ends it, and the next eager random
    op anywhere in the process fails ("Offset increment outside graph capture encountered
    unexpectedly"). A generator given a copy of its own state is out of capture mode, with
    its seed and offset kept."""
    for generator in getattr(module, "default_generators", ()):
        clone = getattr(generator, "clone_state", None)
        restore = getattr(generator, "graphsafe_set_state", None)
        if clone is not None and restore is not None:
            with contextlib.suppress(Exception):
                restore(clone())


def pool_releaser(index: int, end: Callable[[int, object], None] | None,
                  release: Callable[[int, object], None] | None, owner: str
                  ) -> Callable[[object], None]:
    """`abandon_pool` for TorchGraphs from the allocator's two calls: stop routing the
    device's allocations to a pool, then release it (what a capture_end that raised skipped)."""
    def abandon(pool) -> None:
        if end is None or release is None:
            raise RuntimeError(f"{owner} has no allocator pool API")
        end(index, pool)
        release(index, pool)
    return abandon


class TorchGraphReplay(GraphReplay):
    def __init__(self, graph, calls: int, module: ModuleType) -> None:
        self.graph = graph
        self.calls = calls
        self._module = module

    def replay_times(self, n: int) -> list[float]:
        """Replays queued back to back, one event between each two: while the device runs
        replay k the host queues replay k+1, so no replay waits for its launch and each
        interval is device time only. A batch of calls (short kernels, whose launch would
        show) first gets one untimed replay, so that the device is already at work when the
        first timed one starts; a single call is a kernel long enough not to need it."""
        module = self._module
        events = [module.Event(enable_timing=True) for _ in range(n + 1)]
        replay = self.graph.replay
        if self.calls > 1:
            replay()
        events[0].record()
        for event in events[1:]:
            replay()
            event.record()
        events[-1].synchronize()
        return [start.elapsed_time(end) * 1e3 for start, end in pairwise(events)]


class TorchGraphs(DeviceGraphs):
    """`abandon_pool(pool)` undoes what a failed capture leaves in the caching allocator: when
    the capture is invalidated, torch's `capture_end` raises before it stops routing the
    stream's allocations to the graph's memory pool, and the next `empty_cache()` dies on an
    internal assert (`captures_underway.empty()`). Each capture then gets a pool of its own
    (`graph_pool_handle`) so that it can be named. Without it, or when it fails, graphs are
    off for the rest of the session (`broken` says why) and the cache is not emptied."""

    def __init__(self, module: ModuleType, graph_class: type,
                 abandon_pool: Callable[[object], None] | None = None) -> None:
        self._module = module
        self._graph_class = graph_class
        self._abandon_pool = abandon_pool
        self.broken = ""
        # One capture stream for the session: libraries keep per-stream state (cuBLAS a
        # workspace per stream), made once by the first warm call on it.
        self._side = None

    def capture(self, call: Callable[[], object], calls: int) -> TorchGraphReplay:
        if self.broken:
            raise CaptureError(f"graphs off for this session: {self.broken}")
        module = self._module
        main = module.current_stream()
        if self._side is None:
            self._side = module.Stream()
        side = self._side
        side.wait_stream(main)
        graph = self._graph_class()
        pool = module.graph_pool_handle() if self._abandon_pool is not None else None
        try:
            with module.stream(side):
                call()
                graph.capture_begin(*(() if pool is None else (pool,)))
                try:
                    for _ in range(calls):
                        call()
                except BaseException:
                    self._end_failed(graph, pool)
                    raise
                graph.capture_end()
        except Exception as exc:
            with contextlib.suppress(Exception):
                side.synchronize()
            raise CaptureError(_first_line(exc)) from exc
        finally:
            main.wait_stream(side)
        return TorchGraphReplay(graph, calls, module)

    def _end_failed(self, graph, pool) -> None:
        try:
            graph.capture_end()
            return  # the capture itself was sound (the call raised): torch cleaned up
        except Exception:
            pass
        _leave_capture_mode(self._module)
        if pool is None:
            self.broken = "a capture failed and its memory pool cannot be released"
            return
        try:
            self._abandon_pool(pool)
        except Exception as exc:
            self.broken = f"a failed capture's memory pool could not be released ({exc})"
