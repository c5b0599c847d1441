"""The Ascend NPU backend (torch_npu, imported only when this backend is used).

torch_npu is an optional extra: without CANN, importing it breaks `import torch`, so nothing
outside this module imports it, and this module imports it only in `load_torch_npu`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import re
from collections.abc import Iterator
from types import ModuleType

import torch

from ..db.layout import KNOWN_DEVICES, detect_versions
from .base import Backend, DeviceEventTimer, DeviceGraphs, Peak, Timer
from .graphs import TorchGraphs, pool_releaser
from .memory import device_available_bytes
from .mstx import MSTX_MESSAGE_LIMIT as MSTX_MESSAGE_LIMIT
from .mstx import CannMstx, mstx_message
from .peaks import ascend_peak

FRACTAL_NZ_FORMAT_ID = 29  # ACL_FORMAT_FRACTAL_NZ, the id torch_npu.npu_format_cast takes


class NpuUnavailable(RuntimeError):
    pass


def torch_npu_installed() -> bool:
    return importlib.util.find_spec("torch_npu") is not None


def load_torch_npu() -> ModuleType:
    try:
        return importlib.import_module("torch_npu")
    except Exception as exc:  # torch_npu raises many kinds of errors without CANN
        raise NpuUnavailable(f"torch_npu cannot be imported ({type(exc).__name__}: {exc}); "
                             f"source CANN's set_env.sh first") from exc


# SoC names torch_npu reports, by Atlas product family (the database device names say A2/A3).
_FAMILIES = (("A3", re.compile(r"^Ascend910_93")), ("A2", re.compile(r"^Ascend910B")))


def soc_family(soc_name: str) -> str | None:
    """`Ascend910_9382` -> `A3`, `Ascend910B2` -> `A2`; None when unknown."""
    return next((family for family, pattern in _FAMILIES if pattern.match(soc_name.strip())),
                None)


def same_family(soc_name: str, database_device: str | None) -> bool:
    """Whether an NPU of this SoC may own a database of this Atlas device directory."""
    if not database_device or database_device not in KNOWN_DEVICES:
        return False
    family = soc_family(soc_name)
    return family is not None and database_device.startswith(f"ATLAS_800_{family}_")


class NpuBackend(Backend):
    kind = "npu"

    def __init__(self, index: int = 0, database_device: str | None = None) -> None:
        super().__init__(index, database_device)
        self.torch_npu = load_torch_npu()
        # Who emits the case ranges: torch_npu's mstx (collected by torch_npu's profiler), or
        # CANN's mstx C API (collected by the msprof command line; see devices/mstx.py).
        self._cann_mstx: CannMstx | None = None
        self._graphs: TorchGraphs | None = None
        if not torch.npu.is_available():  # type: ignore[attr-defined]
            raise NpuUnavailable("torch_npu is installed but no NPU is visible")

    def activate(self) -> None:
        torch.npu.set_device(self.index)  # type: ignore[attr-defined]
        # Replays build FRACTAL_NZ tensors; torch_npu only keeps them with this switch on.
        self.torch_npu.npu.config.allow_internal_format = True

    @property
    def device(self) -> torch.device:
        return torch.device("npu", self.index)

    def synchronize(self) -> None:
        torch.npu.synchronize()  # type: ignore[attr-defined]

    def device_name(self) -> str:
        return str(torch.npu.get_device_name(self.index))  # type: ignore[attr-defined]

    def stack(self) -> dict[str, str]:
        found = detect_versions()
        return {"torch": torch.__version__,
                "torch_npu": str(getattr(self.torch_npu, "__version__", found.get("torch_npu"))),
                "vllm_ascend": str(found.get("vllm")), "cann": str(found.get("cann"))}

    def timer(self) -> Timer:
        return DeviceEventTimer(lambda: torch.npu.Event(enable_timing=True),  # type: ignore
                                self.synchronize)

    def profiler_activities(self) -> list:
        return [torch.profiler.ProfilerActivity.CPU]

    def graphs(self) -> DeviceGraphs | None:
        """NPUGraph (aclgraph) replays: torch_npu mirrors torch's graph API (torch.npu.NPUGraph
        with capture_begin(pool)/capture_end/replay, graph_pool_handle, Stream, Event,
        default_generators: torch_npu/npu/graphs.py and npu/__init__.py, since torch_npu
        2.5.1), so the CUDA graph method runs unchanged on torch.npu. None on an older one."""
        graph_class = getattr(torch.npu, "NPUGraph", None)  # type: ignore[attr-defined]
        if graph_class is None:
            return None
        if self._graphs is None:
            # A failed capture's pool is released with torch_npu's counterparts of CUDA's
            # allocator calls (torch_npu/csrc/npu/Module.cpp:449-456 in v7.3.0, torch_npu
            # 2.9.0; :505-512 in v26.0.1, 2.10.0.post2).
            native = getattr(self.torch_npu, "_C", None)
            abandon = pool_releaser(
                self.index, getattr(native, "_npu_endAllocateCurrentStreamToPool", None),
                getattr(native, "_npu_releasePool", None),
                f"torch_npu {getattr(self.torch_npu, '__version__', '?')}")
            self._graphs = TorchGraphs(torch.npu, graph_class, abandon)  # type: ignore
        return self._graphs

    def process_group_name(self, ranks: int) -> str | None:
        """The HCCL communicator name of the default process group when it has `ranks` ranks
        (vllm-ascend's token dispatcher asks the group's backend the same way), else None."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() != ranks:
            return None
        backend = dist.group.WORLD._get_backend(torch.device("npu"))
        return backend.get_hccl_comm_name(dist.get_rank())

    def available_memory(self) -> int | None:
        return device_available_bytes("npu", self.index)

    def peak(self) -> Peak | None:
        name = self.database_device()
        return ascend_peak(name) if name in KNOWN_DEVICES else None

    def use_cann_markers(self) -> None:
        """Emit case ranges through CANN's mstx C API (a session under the msprof command
        line, where torch_npu's mstx records nothing)."""
        self._cann_mstx = CannMstx()

    @contextlib.contextmanager
    def named_range(self, name: str) -> Iterator[None]:
        """An mstx range around the case's calls: msprof exports it to msprof_tx_*.csv, which
        ties the kernels launched inside it to this case. The device is idle when it opens
        (kernels queued while building the inputs do not start inside it)."""
        self.synchronize()
        if self._cann_mstx is not None:
            cann = self._cann_mstx
            range_id = cann.range_start(name)
            try:
                yield
            finally:
                self.synchronize()
                cann.range_end(range_id)
            return
        mstx = self.torch_npu.npu.mstx
        # With a stream, torch_npu queues the marker with the kernels (device-side times too).
        range_id = mstx.range_start(mstx_message(name), self.torch_npu.npu.current_stream())
        try:
            yield
        finally:
            mstx.range_end(range_id)

    def to_format(self, tensor: torch.Tensor, fmt: str) -> torch.Tensor:
        if fmt == "FRACTAL_NZ":
            return self.torch_npu.npu_format_cast(tensor, FRACTAL_NZ_FORMAT_ID)
        return tensor

    def empty_cache(self) -> None:
        if self._graphs is not None and self._graphs.broken:
            return  # the allocator may hold a failed capture's state (as on CUDA)
        torch.npu.empty_cache()  # type: ignore[attr-defined]
