"""How fast the host was while a CPU case ran: a fixed pure-Python loop with a copy through the
caches, timed right before and right after the case's samples, and a copy from main memory,
timed as often (at most once a second: replay/runner.py, MEMORY_PROBE_EVERY_S).

Two runs of the same CPU kernel can differ by 1.5x or more when other work shares the cores
(a sibling hyperthread, a busy neighbour, frequency scaling): every sample of the case shifts,
its minimum included, so neither the rank test nor the noise rule can tell it from a slower
kernel. The loop shifts with it. It runs no torch code, so a slower torch or BLAS build does
not move it: comparing two runs' loop times tells a slower machine from a slower kernel
(history/compare.py makes such a comparison UNCERTAIN instead of SLOWER).

The loop is compute-bound: it did not see the 1.65x that small-M BF16 GEMMs moved between two
quiet sessions of issue 29, whose weights stream from main memory (`--npuperf-cache model`)
while co-tenants take the memory bandwidth. The memory probe copies MEMORY_BYTES, beyond the
private caches and the share of a shared last-level cache a VM gets, so its time follows
the bandwidth those kernels get; a memory-bound case is judged against it.
"""

from __future__ import annotations

import statistics
import time

_ITERATIONS = 500
_REPEATS = 5
# A copy through the caches as well (a C memcpy, still no torch): neighbours that fill the
# shared caches slow kernels down without slowing a loop that lives in registers.
_SOURCE = bytes(1 << 18)
_TARGET = bytearray(1 << 18)


def _loop() -> float:
    start = time.perf_counter_ns()
    total = 0
    for i in range(_ITERATIONS):
        total += i * i
    _TARGET[:] = _SOURCE
    return (time.perf_counter_ns() - start) / 1e3


# Two buffers of this size, allocated (and touched) on the first probe of a CPU session. On the
# 2-core VM of issue 29 a 32 MiB copy still ran from the last-level cache at times (28 GB/s
# when co-tenants left it alone, 6-10 GB/s otherwise); from 48 MiB on it always ran from main
# memory (6-7 GB/s): about 7-16 ms a copy there.
MEMORY_BYTES = 48 << 20
_MEMORY: list[bytearray] = []


def memory_sample() -> float:
    """One copy of MEMORY_BYTES from main memory (us)."""
    if not _MEMORY:
        _MEMORY.extend((bytearray(b"\x01") * MEMORY_BYTES, bytearray(MEMORY_BYTES)))
        _MEMORY[1][:] = _MEMORY[0]  # fault every page in before the first timed copy
    source, target = _MEMORY
    start = time.perf_counter_ns()
    target[:] = source
    return (time.perf_counter_ns() - start) / 1e3


def reference_samples() -> list[float]:
    """The loop's time (us), several times: a fraction of a millisecond in all."""
    return [_loop() for _ in range(_REPEATS)]


def reference_us(before: list[float], after: list[float]) -> float:
    """One figure for the host's speed around a case: the median of the loop's times."""
    return float(statistics.median([*before, *after]))
