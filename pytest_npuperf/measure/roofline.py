"""A case on the device's roofline: how fast it could be, how fast it was, and why.

For a call doing `flops` FLOP on `bytes` bytes:

- compute bound = flops / peak FLOP/s (the 8-bit peak for int8/fp8 operands, where known);
- memory bound = bytes / the bandwidth of the memory the data streams from. Between repeated
  calls the working set stays in the smallest cache that holds it, so that cache's bandwidth
  applies (never "cached bytes are free": a 1 MB GEMM on a GPU is bounded by its L2); with the
  cache flushed before every sample, or a working set larger than every cache, main memory
  (HBM, DRAM on a CPU). The HBM bound is reported as well, for comparison;
- the bound is the larger of the two, and names what limits the case (compute or memory);
- achieved TFLOP/s and GB/s at the median duration; MFU = achieved / peak FLOP/s, MBU =
  achieved / the bandwidth the memory bound used.

Two more terms make the bound hold for real kernels:

- the inputs a case reads cold (kernels/cache_state.py: rotated copies, or inputs too large to
  stay cached) stream from main memory whatever the working set: their bytes at main memory's
  bandwidth bound the case too;
- a latency floor, measured once per device and method (the fastest sample of a one-element
  fill: a launch and nothing to do): no kernel takes less, so a few-microsecond kernel is read
  against it rather than against a bound of nanoseconds (`bound_by` "latency").

A result whose fastest sample beats a bound that is known to hold flags `suspect`
(replay/runner.py): the compute bound (a FLOP count at a data sheet's peak), or the memory
bound where the bytes are what the kernel must move (`bytes_exact`, the spec's to say) at a
published bandwidth. An estimated cache bandwidth, a bytes model that counts slots the kernel
may not read, or a measured floor bound nothing: they are for reading. The slack below the
bound is 5 % for data-sheet peaks. Peaks measured on this host (a CPU) are what one GEMM and
one copy achieved, on a machine that may have been busy at the time, and the timer of a small
CPU call includes torch's dispatch: such a roofline is for reading (MFU, MBU, what limits a
case), and flags only a result 10x faster than it, which no noise explains (a call that did
not run, a lazily evaluated result). `derivation` says how each term was made.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..devices.base import Peak

DATASHEET_SLACK = 0.95
MEASURED_SLACK = 0.1
COMPUTE, MEMORY, LATENCY = "compute", "memory", "latency"
_EIGHT_BIT = ("INT8", "UINT8", "FLOAT8", "FP8", "HIFLOAT8")


@dataclass(frozen=True)
class Roofline:
    bound_us: float | None  # the larger of the compute and memory bounds
    compute_bound_us: float | None
    memory_bound_us: float | None  # at `memory_level`'s bandwidth (None: unknown)
    memory_level: str  # where the working set streams from: L2, LLC, HBM, DRAM...
    hbm_bound_us: float | None  # at main memory's bandwidth, for comparison
    bound_by: str  # compute | memory ("" when neither is known)
    achieved_tflops: float | None
    achieved_gbps: float | None
    mfu: float | None
    mbu: float | None
    peak_tflops: float
    level_gbps: float | None  # the bandwidth the memory bound used
    slack: float  # a sample below slack x exact_bound_us flags the case suspect
    exact_bound_us: float | None = None  # the largest term known to hold (None: none)
    latency_floor_us: float | None = None
    derivation: str = ""  # how each term was made

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_eight_bit(dtype: str) -> bool:
    text = dtype.upper().removeprefix("DT_")
    return any(text.startswith(kind) for kind in _EIGHT_BIT)


def roofline(peak: Peak, flops: float, nbytes: float, median_us: float | None, *,
             cache_bytes: int | None = None, flushed: bool = False,
             operand_dtype: str = "", cold_bytes: float = 0.0, bytes_exact: bool = False,
             floor_us: float | None = None, floor_how: str = "") -> Roofline:
    """The roofline of one case. `cache_bytes`: the last-level cache the backend reports
    (a fallback when the peak lists no cache levels); `flushed`: the cache is evicted before
    every sample (--npuperf-flush-l2); `cold_bytes`: of `nbytes`, those read cold at every
    call; `bytes_exact`: `nbytes` is what the kernel must move (see the module doc);
    `floor_us`: the device's latency floor, measured as `floor_how` says."""
    eight = bool(peak.flops_8bit and is_eight_bit(operand_dtype))
    peak_flops = peak.flops_8bit if eight else peak.flops
    compute = flops / peak_flops * 1e6 if flops > 0 and peak_flops else None
    hbm = nbytes / peak.bytes_per_s * 1e6 if nbytes > 0 and peak.bytes_per_s else None
    level, bandwidth, estimated = _memory_level(peak, nbytes, cache_bytes, flushed)
    memory = nbytes / bandwidth * 1e6 if nbytes > 0 and bandwidth else None
    cold = min(cold_bytes, nbytes) / peak.bytes_per_s * 1e6 \
        if cold_bytes > 0 and peak.bytes_per_s and level != peak.memory else None
    if cold is not None and (memory is None or cold > memory):
        memory, level, bandwidth, estimated = cold, peak.memory, peak.bytes_per_s, False
    terms = {COMPUTE: compute, MEMORY: memory, LATENCY: floor_us}
    known = {name: value for name, value in terms.items() if value is not None}
    bound_by = max(known, key=known.get) if known else ""
    bound = known.get(bound_by)
    exact = [compute] if compute is not None else []
    if memory is not None and bytes_exact and not estimated:
        exact.append(memory)
    if peak.measured:  # measured peaks: only a 10x miss flags (see the module doc)
        exact = [b for b in (compute, memory) if b is not None]
    seconds = median_us * 1e-6 if median_us and median_us > 0 else None
    achieved_flops = flops / seconds if seconds and flops > 0 else None
    achieved_bytes = nbytes / seconds if seconds and nbytes > 0 else None
    derivation = _derivation(peak, flops, peak_flops, eight, compute, nbytes, cold_bytes,
                             memory, level, bandwidth, estimated, bytes_exact, floor_us,
                             floor_how)
    return Roofline(
        bound_us=bound, compute_bound_us=compute, memory_bound_us=memory, memory_level=level,
        hbm_bound_us=hbm, bound_by=bound_by,
        achieved_tflops=achieved_flops / 1e12 if achieved_flops else None,
        achieved_gbps=achieved_bytes / 1e9 if achieved_bytes else None,
        mfu=achieved_flops / peak_flops if achieved_flops and peak_flops else None,
        mbu=achieved_bytes / bandwidth if achieved_bytes and bandwidth else None,
        peak_tflops=peak_flops / 1e12, level_gbps=bandwidth / 1e9 if bandwidth else None,
        slack=MEASURED_SLACK if peak.measured else DATASHEET_SLACK,
        exact_bound_us=max(exact) if exact else None, latency_floor_us=floor_us,
        derivation=derivation)


def _derivation(peak: Peak, flops: float, peak_flops: float, eight: bool,
                compute: float | None, nbytes: float, cold_bytes: float,
                memory: float | None, level: str, bandwidth: float | None, estimated: bool,
                bytes_exact: bool, floor_us: float | None, floor_how: str) -> str:
    source = "measured on this host" if peak.measured else (peak.source or "data sheet")
    parts = []
    if compute is not None:
        parts.append(f"compute {compute:.4g} us = {flops:.4g} FLOP at "
                     f"{peak_flops / 1e12:.4g} TFLOP/s ({'8-bit, ' if eight else ''}{source})")
    if memory is not None and bandwidth:
        what = ("bytes the kernel must move" if bytes_exact
                else "bytes of the row's slots, an estimate of its traffic")
        cold = f", {cold_bytes:.4g} B of them read cold" if cold_bytes > 0 else ""
        rate = "estimated" if estimated else source
        parts.append(f"memory {memory:.4g} us = {nbytes:.4g} B ({what}{cold}) at {level} "
                     f"{bandwidth / 1e9:.4g} GB/s ({rate})")
    if floor_us is not None:
        parts.append(f"latency floor {floor_us:.4g} us ({floor_how or 'measured'})")
    return "; ".join(parts)


def _memory_level(peak: Peak, nbytes: float, cache_bytes: int | None, flushed: bool
                  ) -> tuple[str, float | None, bool]:
    """(name, bandwidth, estimated) of the memory a working set of `nbytes` streams from
    between calls. A cache that holds it but whose bandwidth is unknown gives no memory bound
    (None)."""
    main = (peak.memory, peak.bytes_per_s, False)
    if flushed:
        return main
    for level in sorted(peak.levels, key=lambda lv: lv.capacity):
        if nbytes <= level.capacity:
            return level.name, level.bytes_per_s, level.estimated
    if not peak.levels and (cache_bytes is None or nbytes <= cache_bytes):
        # Nothing known about the caches, or a cache of unknown bandwidth holds the data:
        # main memory would not bound it.
        return ("cache" if cache_bytes else "unknown cache"), None, True
    return main
