"""The device's latency floor: what the fastest possible kernel takes with this method.

A one-element fill launches one kernel that has nothing to do; the fastest of its samples,
timed as the cases are (device events or a synchronised clock per call, or graph replays),
is the floor no case can go under. Measured once per runner (device, method), in well under
a tenth of a second. A roofline without it says nothing about kernels of a few microseconds
(their FLOP and byte bounds are nanoseconds): with it, such a kernel reads as latency-bound
(measure/roofline.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..devices.base import DeviceGraphs, Timer
from .graph import sample_graph
from .sampler import SamplingPolicy, sample

# The floor is the fastest sample: a preempted one is only ever slower, so none is left out
# (on a busy host rejecting them could leave none at all).
_POLICY = SamplingPolicy(warmup=5, min_samples=50, max_samples=200, budget_s=0.02,
                         min_time_s=0.0, precision=1.0, reject_preempted=False)


@dataclass(frozen=True)
class Floor:
    us: float
    how: str  # what was timed, how, and the statistic


def latency_floor(device, timer: Timer, graphs: DeviceGraphs | None, method: str) -> Floor:
    """The floor on `device` with `method` ("graph": replays of a captured batch; else
    `timer`, one call per sample)."""
    import torch

    one = torch.zeros(1, device=device)
    call = one.zero_
    if graphs is not None and method == "graph":
        call()
        run, _ = sample_graph(call, graphs, _POLICY)
        how = "graph replays"
    else:
        run = sample(call, timer, _POLICY)
        how = f"{timer.name}, one call per sample"
    samples = run.samples or [float("nan")]
    return Floor(min(samples), f"fastest of {len(run.samples)} samples of a one-element fill, "
                               f"{how}")
