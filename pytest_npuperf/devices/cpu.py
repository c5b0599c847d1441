"""The CPU backend: torch on the host, timed with a high-resolution clock."""

from __future__ import annotations

import platform
from functools import lru_cache
from pathlib import Path

import torch

from .base import Backend

_SYS_CPU = Path("/sys/devices/system/cpu/cpu0/cache")


@lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def _parse_size(text: str) -> int | None:
    text = text.strip().upper()
    factor = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * factor if digits.isdigit() else None


class CpuBackend(Backend):
    kind = "cpu"

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def synchronize(self) -> None:
        return None

    def device_name(self) -> str:
        return _cpu_model()

    def stack(self) -> dict[str, str]:
        return {"torch": torch.__version__, "threads": str(torch.get_num_threads())}

    def l2_cache_bytes(self) -> int | None:
        """The last-level cache: what a flush between samples has to evict."""
        sizes = []
        for index in sorted(_SYS_CPU.glob("index*")):
            try:
                size = _parse_size((index / "size").read_text())
            except OSError:
                continue
            if size:
                sizes.append(size)
        return max(sizes) if sizes else None
