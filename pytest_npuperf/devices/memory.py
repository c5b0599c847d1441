"""Memory a case may still allocate: on the host, and on an accelerator through its torch module.

A row's tensors are checked against it before anything is allocated (`kernels/spec.py`): on a
host, Linux hands out memory it does not have and the OOM killer ends the whole session (not the
case) once the pages are touched; a device allocator fails only the case, but may leave the
device too fragmented for the next one.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")


def host_available_bytes() -> int | None:
    """`MemAvailable` of the host, bounded by the cgroup's own limit (a container's OOM killer
    acts at its limit, whatever the host has); None when neither is known."""
    found = [value for value in (_meminfo_available(), _cgroup_available()) if value is not None]
    if not found and hasattr(os, "sysconf"):
        with contextlib.suppress(ValueError, OSError):
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    return min(found) if found else None


def _meminfo_available() -> int | None:
    with contextlib.suppress(OSError, ValueError):
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def _cgroup_available() -> int | None:
    """The limit of this process's memory cgroup less its use (v2: memory.max and
    memory.current; v1: memory.limit_in_bytes and memory.usage_in_bytes); None without a
    limit. A container sees its own group at the hierarchy's root."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, relative = line.split(":", 2)
            if controllers == "":
                found = _group_room(_CGROUP, relative, "memory.max", "memory.current")
            elif "memory" in controllers.split(","):
                found = _group_room(_CGROUP / "memory", relative, "memory.limit_in_bytes",
                                    "memory.usage_in_bytes")
            else:
                continue
            if found is not None:
                return found
    return None


def _group_room(root: Path, relative: str, limit_name: str, usage_name: str) -> int | None:
    for group in (root / relative.lstrip("/"), root):
        with contextlib.suppress(OSError, ValueError):
            limit = (group / limit_name).read_text().strip()
            usage = int((group / usage_name).read_text())
            if limit == "max" or int(limit) >= 1 << 60:  # v1 writes "no limit" as ~2^63
                return None
            return max(int(limit) - usage, 0)
    return None


def device_available_bytes(kind: str, index: int) -> int | None:
    """Free memory of a device whose torch module (`torch.cuda`, `torch.npu`) has
    `mem_get_info`, plus what its caching allocator holds without using it."""
    import torch

    module = getattr(torch, kind, None)
    try:
        free, _total = module.mem_get_info(index)  # type: ignore[union-attr]
        cached = module.memory_reserved(index) - module.memory_allocated(index)  # type: ignore
    except (AttributeError, RuntimeError, TypeError):
        return None
    return int(free) + max(int(cached), 0)
