"""A CPU's peaks, measured: no data sheet knows what this host gives one process.

Compute: the best of a few large GEMMs (float32 and bfloat16, the faster wins: CPUs with
AMX run bfloat16 far faster). Memory: a streaming copy (`dst.copy_(src)`, read + write bytes)
whose buffers fit in the L2, in the last-level cache, and far exceed it (DRAM). Each figure is
the best of repeated timings (noise only ever slows a run down).

Each figure is the better of two probes: one with the session's intra-op threads, one with a
single thread. A case runs on anything from one thread (torch does not split work below its
grain size, so every small case) to all of them, and the bound has to hold for each. The
threaded probe alone understates the host wherever a core is busy: a parallel region ends
when its slowest thread does, so one preempted thread holds up the whole copy or GEMM (an L2
copy read 0.04 GB/s on a loaded 16-core host, and cases of a few us that torch ran on one
thread were judged faster than the CPU allows).

A probe costs about a tenth of a second (more on a busy host): a JSON file per host under the
session's output directory keeps, per CPU model, thread count and torch version, the best
figures measured so far, which later sessions use without probing again. A case faster than
they allow has the peak probed again (a bounded number of times per session): a session
measured on a busy machine does not lower the figures, and the roofline converges to the
host's peak.
"""

from __future__ import annotations

import json
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

from ..db.errors import NpuperfError
from ..db.table import write_text
from ..db.transaction import recover_if_free
from .base import MemoryLevel, Peak

CACHE_SCHEMA = "npuperf-cpu-peaks/1"
_GEMM_N = 512
_PROBE_N = 128
_DRAM_MIN = 16 << 20  # bytes per copy buffer: two buffers of at least the LLC each
_DRAM_MAX = 128 << 20
_TIME_EACH_S = 0.01
_SYS_CPU = Path("/sys/devices/system/cpu/cpu0/cache")


def cache_levels(sys_dir: Path = _SYS_CPU) -> dict[str, int]:
    """Data/unified cache sizes by name (`L1`, `L2`, `L3`) from sysfs; empty when unknown."""
    found: dict[str, int] = {}
    for index in sorted(sys_dir.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text().strip())
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size:
            found[f"L{level}"] = max(size, found.get(f"L{level}", 0))
    return found


def _parse_size(text: str) -> int | None:
    text = text.strip().upper()
    factor = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * factor if digits.isdigit() else None


def _best_rate(call: Callable[[], object], work: float) -> float:
    """`work` per second of the fastest of repeated calls (at least 3, about _TIME_EACH_S)."""
    call()  # warm: first-touch page faults, kernel selection
    best = float("inf")
    spent, runs = 0.0, 0
    while runs < 3 or spent < _TIME_EACH_S:
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
        if runs >= 50:
            break
    return work / best if best > 0 else 0.0


def _gemm_rate(dtype: torch.dtype, n: int) -> float:
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    out = torch.empty(n, n, dtype=dtype)
    return _best_rate(lambda: torch.mm(a, b, out=out), 2.0 * n ** 3)


def _gemm_flops() -> float:
    best = _gemm_rate(torch.float32, _GEMM_N)
    # bfloat16 only where it can compete (a small probe first): without AMX it runs tens of
    # times slower, and timing it at full size would cost seconds.
    if _gemm_rate(torch.bfloat16, _PROBE_N) > 0.5 * best:
        best = max(best, _gemm_rate(torch.bfloat16, _GEMM_N))
    return best


def _copy_rate(nbytes: int) -> float:
    elements = max(nbytes // 4, 1024)
    src = torch.empty(elements, dtype=torch.float32)  # its pages are touched by the warm-up
    dst = torch.empty_like(src)
    return _best_rate(lambda: dst.copy_(src), 2.0 * 4 * elements)


def _probe(levels: dict[str, int]) -> Peak:
    """Every figure once, with torch's current intra-op threads."""
    memory_levels = []
    # A copy whose two buffers fill a quarter of the level: resident between repetitions.
    for name in ("L2", "L3"):
        size = levels.get(name)
        if size:
            shown = "LLC" if name == "L3" else name
            memory_levels.append(MemoryLevel(shown, size, _copy_rate(size // 8)))
    llc = max(levels.values(), default=0)
    dram = min(max(llc, _DRAM_MIN), _DRAM_MAX)  # each of the two buffers
    return Peak(flops=_gemm_flops(), bytes_per_s=_copy_rate(dram),
                levels=tuple(memory_levels), memory="DRAM", measured=True)


def measure_cpu_peak(levels: dict[str, int] | None = None) -> Peak:
    """The host's peak for a session with torch's current intra-op threads: each figure the
    better of the threaded and the single-threaded probe (see the module docstring)."""
    levels = cache_levels() if levels is None else levels
    threads = torch.get_num_threads()
    peak = _probe(levels)
    if threads > 1:
        torch.set_num_threads(1)
        try:
            peak = best_of(peak, _probe(levels))
        finally:
            torch.set_num_threads(threads)
    counts = f"1 and {threads} threads" if threads > 1 else "1 thread"
    return replace(peak, source=f"measured on {socket.gethostname()} with {counts} (the "
                                f"better of each figure): GEMM {_GEMM_N}^3 float32/bfloat16, "
                                f"streaming copies")


def cache_key(model: str) -> str:
    return f"{model}|threads={torch.get_num_threads()}|torch={torch.__version__}"


def _to_json(peak: Peak) -> dict:
    return {"flops": peak.flops, "bytes_per_s": peak.bytes_per_s, "memory": peak.memory,
            "source": peak.source, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "levels": [[lv.name, lv.capacity, lv.bytes_per_s] for lv in peak.levels]}


def _from_json(data: dict) -> Peak:
    levels = tuple(MemoryLevel(str(n), int(c), float(b)) for n, c, b in data["levels"])
    peak = Peak(float(data["flops"]), float(data["bytes_per_s"]), levels,
                memory=str(data.get("memory", "DRAM")), measured=True,
                source=str(data.get("source", "")))
    if peak.flops <= 0 or peak.bytes_per_s <= 0:
        raise ValueError("non-positive peak")
    return peak


def cache_file(directory: Path) -> Path:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())
    return Path(directory) / "peaks" / f"{host or 'host'}.json"


def best_of(a: Peak, b: Peak) -> Peak:
    """Figure by figure, the higher of two measurements of one host: noise only ever slows a
    measurement down, so the best seen is the closest to the peak."""
    levels = {lv.name: lv for lv in a.levels}
    for lv in b.levels:
        old = levels.get(lv.name)
        if old is None or (lv.bytes_per_s or 0) > (old.bytes_per_s or 0):
            levels[lv.name] = lv
    return Peak(max(a.flops, b.flops), max(a.bytes_per_s, b.bytes_per_s),
                tuple(sorted(levels.values(), key=lambda lv: lv.capacity)), memory=a.memory,
                measured=True, source=b.source if b.flops >= a.flops else a.source)


def cpu_peak(model: str, cache_dir: Path | None, *, again: bool = False) -> Peak:
    """This host's peak, kept in a per-host cache under `cache_dir` as the best measurement
    seen so far (a session that measured on a busy machine does not lower it): the cached
    figures when there are some (a probe costs tenths of a second of every session's start),
    else measured; `again` measures anyway and keeps the better figures (a case faster than
    the cached peak allows: devices/cpu.py). A cache that cannot be read is measured over;
    one that cannot be written (another xdist worker writing it at that moment) is no
    error."""
    key = cache_key(model)
    path = cache_file(cache_dir) if cache_dir is not None else None
    entries: dict = {}
    cached: Peak | None = None
    if path is not None:
        # A writer killed mid-commit left its journal and staged files; the cache may not be
        # written again for many sessions (only a better peak is), so it is recovered here.
        recover_if_free(path.parent, wait_s=0.0)
    if path is not None and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") == CACHE_SCHEMA and isinstance(data.get("peaks"), dict):
                entries = data["peaks"]
                if key in entries:
                    cached = _from_json(entries[key])
        except (OSError, ValueError, KeyError, TypeError):
            entries, cached = {}, None  # damaged: measured again and rewritten
    if cached is not None and not again:
        return cached
    peak = measure_cpu_peak()
    if cached is not None:
        peak = best_of(cached, peak)
        if peak == cached:
            return cached
    if path is not None:
        entries[key] = _to_json(peak)
        text = json.dumps({"schema": CACHE_SCHEMA, "host": platform.node(), "peaks": entries},
                          indent=1, sort_keys=True) + "\n"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text, purpose="cpu peak cache")
        except (OSError, NpuperfError):  # refused too: another process writes its own best
            pass
    return peak
