"""The CPU backend: torch on the host, timed with a high-resolution clock.

A CPU session pins torch's intra-op threads: left to itself torch starts one thread per core,
and on a machine whose cores are shared (other processes, xdist workers) a small kernel then
measures thread wake-ups (15.6 ms instead of 27 us for an Add of 16x5120 on 2 busy cores).
xdist workers split the cores: each gets its own slice and as many threads (the share is
decided in measure/host.py).
"""

from __future__ import annotations

import os

import torch

from .base import Backend, Peak, Timer
from .memory import host_available_bytes
from .names import cpu_model
from .preemption import PreemptionAwareTimer

# Peak re-measurements per session when a case beats the roofline (about 0.1 s each): enough
# for a busy start, bounded where a case is suspect for other reasons.
_MAX_REMEASURES = 3


class CpuBackend(Backend):
    kind = "cpu"

    def __init__(self, index: int = 0, database_device: str | None = None) -> None:
        super().__init__(index, database_device)
        self.threads: int | None = None  # intra-op threads to pin (None: torch's own choice)
        self.cores: list[int] | None = None  # CPUs to keep this process on (xdist workers)
        self._peak: Peak | None = None
        self._remeasured = 0
        self._cache_bytes: tuple[int | None] | None = None  # read once: every case asks

    def share(self, threads: int, cores: list[int] | None = None) -> None:
        """Run with `threads` intra-op threads, on `cores` when given; applied by activate()."""
        self.threads, self.cores = threads, cores

    def activate(self) -> None:
        if self.cores and hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, self.cores)
        if self.threads:
            torch.set_num_threads(self.threads)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def synchronize(self) -> None:
        return None

    def device_name(self) -> str:
        return cpu_model()

    def stack(self) -> dict[str, str]:
        return {"torch": torch.__version__, "threads": str(torch.get_num_threads())}

    def timer(self) -> Timer:
        return PreemptionAwareTimer()

    def peak(self) -> Peak | None:
        """Measured once per host and thread count (devices/cpu_peak.py), then cached."""
        if self._peak is None:
            from .cpu_peak import cpu_peak

            self._peak = cpu_peak(self.device_name(), self.peak_cache_dir)
        return self._peak

    def remeasure_peak(self) -> bool:
        # A case faster than the session's peak most often means the peak was timed while
        # the host was busy: noise only slows a peak measurement down, never speeds it up.
        if self._remeasured >= _MAX_REMEASURES or self._peak is None:
            return False
        from .cpu_peak import cpu_peak

        self._remeasured += 1
        before, self._peak = self._peak, cpu_peak(self.device_name(), self.peak_cache_dir,
                                                  again=True)
        return self._peak.flops > before.flops or self._peak.bytes_per_s > before.bytes_per_s \
            or self._peak.levels != before.levels

    def available_memory(self) -> int | None:
        return host_available_bytes()

    def l2_cache_bytes(self) -> int | None:
        """The last-level cache: what a flush between samples has to evict."""
        if self._cache_bytes is None:
            self._cache_bytes = (_last_level_cache(),)
        return self._cache_bytes[0]


def _last_level_cache() -> int | None:
    """The largest data cache of cpu0 in sysfs (bytes); None when unknown."""
    from .cpu_peak import cache_levels

    return max(cache_levels().values(), default=None)

