"""The CUDA backend: one GPU per process, timed with CUDA events or torch.profiler."""

from __future__ import annotations

import torch

from .base import Backend, DeviceEventTimer, DeviceGraphs, Peak, Timer
from .graphs import TorchGraphs, pool_releaser
from .memory import device_available_bytes
from .peaks import cuda_peak


class CudaBackend(Backend):
    kind = "cuda"

    def __init__(self, index: int = 0, database_device: str | None = None) -> None:
        super().__init__(index, database_device)
        self._graphs: TorchGraphs | None = None

    def activate(self) -> None:
        torch.cuda.set_device(self.index)

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.index)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.index)

    def device_name(self) -> str:
        return torch.cuda.get_device_name(self.index)

    def stack(self) -> dict[str, str]:
        return {"torch": torch.__version__, "cuda": str(torch.version.cuda)}

    def timer(self) -> Timer:
        return DeviceEventTimer(lambda: torch.cuda.Event(enable_timing=True), self.synchronize)

    def graphs(self) -> DeviceGraphs:
        if self._graphs is None:
            # torch's capture_end skips both calls when the capture was invalidated.
            end = (getattr(torch._C, "_cuda_endAllocateToPool", None)
                   or getattr(torch._C, "_cuda_endAllocateCurrentStreamToPool", None))
            abandon = pool_releaser(self.index, end, getattr(torch._C, "_cuda_releasePool", None),
                                    f"torch {torch.__version__}")
            self._graphs = TorchGraphs(torch.cuda, torch.cuda.CUDAGraph, abandon)
        return self._graphs

    def profiler_activities(self) -> list:
        return [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def l2_cache_bytes(self) -> int | None:
        return int(getattr(torch.cuda.get_device_properties(self.index), "L2_cache_size", 0)) or None

    def available_memory(self) -> int | None:
        return device_available_bytes("cuda", self.index)

    def peak(self) -> Peak | None:
        return cuda_peak(self.device_name(), self.l2_cache_bytes())

    def empty_cache(self) -> None:
        if self._graphs is not None and self._graphs.broken:
            return  # torch would die on its allocator's stale capture state
        torch.cuda.empty_cache()
