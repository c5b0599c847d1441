"""The interface every device backend implements (cpu, cuda, npu).

A backend selects its device, allocates, synchronises, times calls with its own events,
names itself and its software stack, and knows what it can about its physical limits.
"""

from __future__ import annotations

import contextlib
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from .names import database_device


@dataclass(frozen=True)
class MemoryLevel:
    """A cache level: what it holds and how fast it streams (bytes per second)."""

    name: str  # "L2", "LLC"...
    capacity: int  # bytes
    bytes_per_s: float | None  # None: not published, so no bound is drawn from it
    # A generous estimate where the vendor publishes none: the bound drawn from it is for
    # reading, never a reason to call a measurement impossible.
    estimated: bool = False


@dataclass(frozen=True)
class Peak:
    """Peak throughput of a device: the roofline of its cases (measure/roofline.py), and the
    physical bound that flags a measurement faster than the device allows."""

    flops: float  # dense 16-bit matrix FLOP/s
    bytes_per_s: float  # main memory (HBM, or DRAM on a CPU) bandwidth
    levels: tuple[MemoryLevel, ...] = ()  # caches, smallest first
    flops_8bit: float | None = None  # dense int8/fp8 matrix FLOP/s, when higher
    memory: str = "HBM"  # the name of main memory in reports
    measured: bool = False  # measured on this host (a CPU), not a data sheet's figure
    source: str = ""  # where the figures come from

    def bound_us(self, flops: float, nbytes: float) -> float:
        return max(flops / self.flops if self.flops else 0.0,
                   nbytes / self.bytes_per_s if self.bytes_per_s else 0.0) * 1e6


class Timer(ABC):
    """Times calls one by one; returns microseconds per call."""

    name: str = "events"
    # Per value of the last `time_calls`: True where the host says the call did not have the
    # device to itself (a CPU preempted by another process: PreemptionAwareTimer); None when
    # this timer cannot tell.
    disturbed: list[bool] | None = None

    @abstractmethod
    def time_calls(self, call: Callable[[], object], n: int,
                   before_each: Callable[[], object] | None = None) -> list[float]:
        ...


class HostClockTimer(Timer):
    """A synchronised high-resolution host clock: sync, start, call, sync, stop."""

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self._sync = synchronize

    def time_calls(self, call: Callable[[], object], n: int,
                   before_each: Callable[[], object] | None = None) -> list[float]:
        out = []
        clock = time.perf_counter_ns
        sync = self._sync
        for _ in range(n):
            if before_each is not None:
                before_each()
            sync()
            start = clock()
            call()
            sync()
            out.append((clock() - start) / 1e3)
        return out


class DeviceEventTimer(Timer):
    """Device events around each call, read after one synchronisation per batch."""

    def __init__(self, event_factory: Callable[[], object], synchronize: Callable[[], None]) -> None:
        self._event = event_factory
        self._sync = synchronize

    def time_calls(self, call: Callable[[], object], n: int,
                   before_each: Callable[[], object] | None = None) -> list[float]:
        pairs = []
        for _ in range(n):
            if before_each is not None:
                before_each()
            start, end = self._event(), self._event()
            start.record()
            call()
            end.record()
            pairs.append((start, end))
        self._sync()
        return [start.elapsed_time(end) * 1e3 for start, end in pairs]  # ms -> us


class CaptureError(RuntimeError):
    """The call cannot be captured in a device graph (a host synchronisation inside it, an
    operation the graph cannot hold): the case is measured another way."""


class GraphReplay(ABC):
    """A device graph holding `calls` captured calls."""

    calls: int

    @abstractmethod
    def replay_times(self, n: int) -> list[float]:
        """Replay the graph `n` times back to back; each replay's device time (us)."""


class DeviceGraphs(ABC):
    """Capture of calls into device graphs (CUDA graphs; on an NPU, NPUGraph / aclgraph)."""

    @abstractmethod
    def capture(self, call: Callable[[], object], calls: int) -> GraphReplay:
        """`calls` calls of `call` in one graph; CaptureError when it cannot be captured."""


class Backend(ABC):
    kind: str = ""

    def __init__(self, index: int = 0, database_device: str | None = None) -> None:
        self.index = index
        self.database_device_name = database_device  # the user's name for it, if any

    @property
    @abstractmethod
    def device(self) -> torch.device:
        ...

    def activate(self) -> None:
        """Make this the current device of the process. Only processes that run cases call
        it, so that naming a device (the xdist controller does) opens no context on it."""
        return None

    @abstractmethod
    def synchronize(self) -> None:
        ...

    @abstractmethod
    def device_name(self) -> str:
        """Human name of the device, e.g. `NVIDIA H200`."""

    def database_device(self) -> str:
        """The `<DEVICE>` directory name of this device's database: the name the user gave,
        else derived from the device's own name."""
        if self.database_device_name:
            return self.database_device_name
        return database_device(self.kind, self.device_name())

    def stack(self) -> dict[str, str]:
        """Software stack versions, recorded with every run."""
        return {"torch": torch.__version__}

    def timer(self) -> Timer:
        return HostClockTimer(self.synchronize)

    def graphs(self) -> DeviceGraphs | None:
        """Graph capture of this device, when it has one the harness can time."""
        return None

    def profiler_activities(self) -> list:
        return [torch.profiler.ProfilerActivity.CPU]

    def l2_cache_bytes(self) -> int | None:
        return None

    def available_memory(self) -> int | None:
        """Bytes a case may still allocate on this device; None when unknown."""
        return None

    def peak(self) -> Peak | None:
        return None

    def remeasure_peak(self) -> bool:
        """Measure the peak again where it was measured, not read from a data sheet; True
        when the new figure is higher (the first was taken on a busy host)."""
        return False

    # Where a backend that measures its own peaks (the CPU) caches them per host; the session
    # points it into its output directory.
    peak_cache_dir: Path | None = None

    @contextlib.contextmanager
    def named_range(self, name: str) -> Iterator[None]:
        """A range that profilers show with the case id (torch.profiler record_function)."""
        with torch.profiler.record_function(name):
            yield

    def to_format(self, tensor: torch.Tensor, fmt: str) -> torch.Tensor:
        """Storage format conversion; only the NPU has internal formats (FRACTAL_NZ)."""
        return tensor

    def empty_cache(self) -> None:
        return None

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "index": self.index, "name": self.device_name(),
                "database_device": self.database_device(), "stack": self.stack()}
