"""The host a session runs on: its cores, their share per xdist worker, how busy it is.

Torch-free: the session reads these before it knows whether it will measure anything.
"""

from __future__ import annotations

import os


def available_cores() -> list[int]:
    """The CPUs this process may run on (its affinity mask), sorted."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def default_threads(cores: int, workers: int) -> int:
    """The cores available to this process divided among the xdist workers, at least 1."""
    return max(1, cores // max(1, workers))


def worker_cores(cores: list[int], workers: int, index: int) -> list[int]:
    """Worker `index`'s slice of the cores: disjoint while there are enough of them."""
    share = default_threads(len(cores), workers)
    start = (index * share) % len(cores)
    return cores[start:start + share]


def host_load() -> float | None:
    """The 1-minute load average of the machine; None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None
