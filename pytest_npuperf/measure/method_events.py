"""The `events` method: the device's event timer (CUDA/NPU events, the host clock on a CPU)
around each call, launch included."""

from __future__ import annotations

import time
from collections.abc import Callable

from .methods import Measured, Timing
from .result import METHOD_EVENTS
from .sampler import sample


def measure_events(timing: Timing, name: str, call: Callable[[], object],
                   deadline: float | None, budget_end: float | None = None) -> Measured:
    """Samples of `call` inside a range named `name`; the range's wall clock comes back
    with them (attribution under a session profiler ties the range to the case)."""
    with timing.backend.named_range(name):
        opened = time.time()
        run = sample(call, timing.timer, timing.policy, flush=timing.flush(),
                     deadline=deadline, budget_end=budget_end)
        range_us = (opened * 1e6, time.time() * 1e6)
    return Measured(run.samples, run, METHOD_EVENTS, range_us=range_us)
