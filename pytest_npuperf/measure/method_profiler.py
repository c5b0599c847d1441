"""The `profiler` method: the device time of the kernels each call launched, from
torch.profiler (measure/torch_profiler.py keeps the session), one sample per timed call."""

from __future__ import annotations

from collections.abc import Callable

from .methods import Measured, Timing, first_line
from .result import METHOD_PROFILER
from .sampler import sample
from .torch_profiler import ProfilerSession


class ProfilerMismatch(RuntimeError):
    """The profiler did not see one sample per timed call."""


class ProfilerUnavailable(RuntimeError):
    """The profiler cannot be started here."""


def measure_profiler(timing: Timing, name: str, call: Callable[[], object],
                     deadline: float | None, profiler: ProfilerSession,
                     budget_end: float | None = None) -> Measured:
    """Samples of `call` from `profiler`, inside a range named `name`."""
    # The profiler's samples are every timed call's: the host clock beside them must not
    # leave preempted ones out, or the two would no longer pair up.
    with timing.backend.named_range(name):
        run = sample(call, timing.plain_timer, timing.policy, flush=timing.flush(),
                     deadline=deadline, wrap=profiler.wrap, budget_end=budget_end)
    # The profiler cycle ends outside the case's range: a range left open across cycles
    # leaves the profiler holding an event it has already handed over.
    device_samples = profiler.finish_case()
    if len(device_samples) != len(run.samples):
        raise ProfilerMismatch(f"profiler attributed {len(device_samples)} samples to this "
                               f"case, {len(run.samples)} were taken")
    return Measured(device_samples, run, METHOD_PROFILER)


def measure_profiler_once(timing: Timing, name: str, call: Callable[[], object],
                          deadline: float | None, budget_end: float | None = None
                          ) -> Measured:
    """The profiler for one case, stopped right after: one left running would trace
    every graph replay of the cases that follow."""
    try:
        profiler = timing.new_profiler()
    except Exception as exc:  # e.g. another profiler already active in this process
        raise ProfilerUnavailable(first_line(exc)) from exc
    try:
        return measure_profiler(timing, name, call, deadline, profiler, budget_end)
    finally:
        profiler.stop()
