"""The `graph` method: replays of a captured device graph (CUDA graphs, NPUGraph), the
launch left out (measure/graph.py sizes the batch and turns replays into samples)."""

from __future__ import annotations

from collections.abc import Callable

from ..devices.base import CaptureError
from .graph import sample_graph
from .methods import Measured, Timing
from .overhead import WARMUP, PartClock
from .result import METHOD_GRAPH
from .sampler import CaseTimeout, warm_up


def measure_graph(timing: Timing, name: str, call: Callable[[], object],
                  deadline: float | None, clock: PartClock, cycle: int = 1,
                  budget_end: float | None = None) -> Measured:
    """Samples of graph replays of `call`. Raises the device's CaptureError when the call
    cannot be captured (the caller falls back); a kernel that fails eagerly raises its own
    error, and a timeout during the capture is a timeout. `cycle`: the call rotates through
    this many sets of inputs, all of which a captured graph must hold."""
    graphs = timing.backend.graphs()
    if graphs is None:
        raise RuntimeError(f"{timing.backend.kind} has no device graphs")
    # Eagerly first: a kernel that fails fails its case, it is not a capture problem.
    with clock.part(WARMUP):
        warm = warm_up(call, timing.timer, timing.policy, at_least=1, budget_end=budget_end)
    try:
        with timing.backend.named_range(name):
            run, _ = sample_graph(call, graphs, timing.policy, deadline=deadline,
                                  estimate_us=min(warm), min_calls=cycle,
                                  budget_end=budget_end)
    except CaptureError as exc:
        if isinstance(exc.__cause__, CaseTimeout):
            raise exc.__cause__ from None
        raise
    return Measured(run.samples, run, METHOD_GRAPH)
