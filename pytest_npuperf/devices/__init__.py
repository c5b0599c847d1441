"""Device backends: cpu, cuda, npu. `select_backend("auto")` picks npu, then cuda, then cpu.

torch is imported when a backend is first needed, not with this package: the plugin's options
read `KINDS` when pytest starts.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Backend, Peak, Timer
    from .cpu import CpuBackend

KINDS = ("auto", "cpu", "cuda", "npu")
_LAZY = {"Backend": "base", "Peak": "base", "Timer": "base", "CpuBackend": "cpu"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class BackendError(RuntimeError):
    pass


def _npu(index: int, database_device: str | None) -> Backend:
    from .npu import NpuBackend

    return NpuBackend(index, database_device=database_device)


def device_count(kind: str) -> int:
    import torch

    if kind == "cuda":
        return torch.cuda.device_count()
    if kind == "npu":
        return int(torch.npu.device_count())  # type: ignore[attr-defined]
    return 1


def check_workers(kind: str, workers: int) -> None:
    """On GPU and NPU hosts worker K measures on device K: never two workers on one device
    (they would change what each other measures)."""
    if kind not in ("cuda", "npu") or workers <= 1:
        return
    count = device_count(kind)
    if workers > count:
        raise BackendError(
            f"{workers} xdist workers but {count} {kind.upper()} device(s) on this host: worker "
            f"K measures on device K, and two processes sharing a device change each other's "
            f"timings; use -n {count} or fewer" if count else
            f"{workers} xdist workers but no {kind.upper()} device on this host")


def select_backend(kind: str = "auto", index: int | None = None,
                   database_device: str | None = None) -> Backend:
    """The backend for `kind`; `index` None means the first device (xdist workers pass theirs)."""
    import torch

    from .cpu import CpuBackend

    if kind not in KINDS:
        raise BackendError(f"unknown device {kind!r}; choose from {', '.join(KINDS)}")
    if kind == "auto":
        from .npu import torch_npu_installed

        if torch_npu_installed():
            try:
                return select_backend("npu", index, database_device)
            except BackendError as exc:
                warnings.warn(f"npu not usable, trying cuda/cpu: {exc}", stacklevel=2)
        if torch.cuda.is_available():
            return select_backend("cuda", index, database_device)
        return CpuBackend(0, database_device)
    if kind == "cpu":
        return CpuBackend(0, database_device)
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise BackendError("--npuperf-device cuda: no CUDA device is available")
        from .cuda import CudaBackend

        return CudaBackend((index or 0) % max(torch.cuda.device_count(), 1), database_device)
    from .npu import NpuUnavailable, load_torch_npu

    try:
        load_torch_npu()
        return _npu((index or 0) % max(device_count("npu"), 1), database_device)
    except NpuUnavailable as exc:
        raise BackendError(f"--npuperf-device npu: {exc}") from exc


__all__ = [
    "KINDS",
    "Backend",
    "BackendError",
    "CpuBackend",
    "Peak",
    "Timer",
    "check_workers",
    "device_count",
    "select_backend",
]
