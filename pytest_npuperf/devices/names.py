"""Device names as database directory names, without torch: the trace parser names the
database of the device a trace was taken on the way the backends name their own."""

from __future__ import annotations

import platform
import re
from functools import lru_cache
from pathlib import Path


def sanitize_device_name(name: str) -> str:
    """A device name usable as a database directory name."""
    return re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_") or "UNKNOWN"


def database_device(kind: str, device_name: str) -> str:
    """The `<DEVICE>` directory of a device of `kind` (cpu, cuda, npu) named `device_name`."""
    return sanitize_device_name(f"{kind.upper()}_{device_name}")


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """This host's CPU model, as /proc/cpuinfo names it."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"
