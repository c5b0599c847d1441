"""The `profiler` method: device time of the kernels a case launched, from torch.profiler.

One profiler is started per pytest session (starting one costs about a second); each case is
one profiler cycle, closed with `step()`, whose events are read right away. Every timed call
runs inside a `npuperf.sample` range, so each sample is the device time of the kernels
launched inside one call: CUDA kernel time on a GPU, the time of the top-level operators on
a CPU (there, the operator is the kernel).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.autograd import DeviceType

SAMPLE_RANGE = "npuperf.sample"


class ProfilerSession:
    def __init__(self, activities: list, uses_device: bool) -> None:
        self.uses_device = uses_device
        self._last: list[float] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "won't be using warmup" is what we want here
            self._profiler = torch.profiler.profile(
                activities=activities,
                schedule=torch.profiler.schedule(wait=0, warmup=0, active=1, repeat=0),
                on_trace_ready=self._collect, acc_events=False)
            self._profiler.start()
        self.started = True

    def wrap(self, call: Callable[[], object]) -> Callable[[], object]:
        record = torch.profiler.record_function

        def sampled() -> object:
            with record(SAMPLE_RANGE):
                return call()
        return sampled

    def _collect(self, prof) -> None:
        samples = []
        for event in prof.events():
            # With CUDA activity, kineto also reports each range as a GPU annotation of the
            # same name; only the host-side range carries the kernels launched inside it.
            if event.name != SAMPLE_RANGE or event.device_type != DeviceType.CPU:
                continue
            if self.uses_device:
                samples.append(float(event.device_time_total))
            else:
                samples.append(float(sum(child.cpu_time_total for child in event.cpu_children)))
        self._last = samples

    def finish_case(self) -> list[float]:
        """Close this case's cycle; the per-call device times (us) of its sampled calls."""
        self._last = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._profiler.step()
        return self._last

    def stop(self) -> None:
        if self.started:
            self.started = False
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._profiler.stop()
