"""Case results from a device profile: attribute the profile's kernels to the cases, then put
kernel device times (and hardware counters) in place of the in-case timings.

A case that was measured (ok, noisy or suspect by its own timer) and whose kernels were found
gets: samples = its kernels' durations, the same statistics and columns as any other method,
the precision, bound and noise judgement recomputed on those samples, the mean of each
hardware counter, the kernel type the device ran (`measured_kernel_type`, which routes MatMul
rows between MatMulV2/V3/Common), and the other kernels its calls launched. A case whose
kernels could not be found keeps its own timing in the MicroBench columns, with status
`unattributed` and the reason; its row's latency is left as it was.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..db.columns import COUNTERS
from ..devices.mstx import mstx_message
from ..ingest.kernel_child import CHILD_MIN_BYTES, ChildRead, table_bytes
from ..ingest.msprof_tx import MarkerTable
from ..ingest.op_summary import KernelTable, ProfileSource, find_sources, read_kernels, read_markers
from ..kernels.catalog import entry_for
from ..measure.counters import CounterMatrix
from ..measure.groupstats import group_means, group_precision, group_stats, noise_reasons
from ..measure.policy import METHOD_MSPROF, METHOD_MSPROF_ORDER
from ..measure.result import (
    MAX_KEPT_SAMPLES,
    STATUS_NOISY,
    STATUS_OK,
    STATUS_SUSPECT,
    STATUS_UNATTRIBUTED,
    CaseResult,
)
from ..measure.stats import SampleStats, StdConvention
from .attribution import (
    Attribution,
    CaseSpec,
    attribute_by_markers,
    attribute_by_order,
    lexsort_pairs,
    match_markers,
)

BOUND_SLACK = 0.95  # as the runner: timer granularity slack below the physical bound
# SampleStats fields after `samples`, in its order.
_STATS_FIELDS = ("mean", "median", "std", "min", "max", "p90", "q1", "q3", "outliers")
_ATTRIBUTABLE = (STATUS_OK, STATUS_NOISY, STATUS_SUSPECT)


@contextlib.contextmanager
def gc_paused(*, leaving: bool = False) -> Iterator[None]:
    """Cyclic garbage collection off while 10^5 results and their dicts are built and
    written: each collection rescans every live container, which made loading a large run
    several times slower. Nothing built here holds reference cycles worth collecting.

    `leaving`: the process ends soon after; what it built is moved out of the collector's way
    (gc.freeze) rather than traversed by its next collection, which takes every container
    allocated meanwhile at once (a second at the end of a 200,000-case run)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if leaving:
            gc.freeze()
        if enabled:
            gc.enable()


def launches_of(kernel_type: str) -> tuple[str, ...]:
    entry = entry_for(kernel_type)
    return entry.launches if entry is not None else (kernel_type,)


def profile_record(case_id: str, kernel_type: str, *, pid: int, device: int, calls: int,
                   warmup: int, range_us: tuple[float, float] | None) -> dict:
    """What a measuring process records for attribution (CaseResult.profile)."""
    return {"marker": mstx_message(case_id), "pid": pid, "device": device, "calls": calls,
            "warmup": warmup, "launches": list(launches_of(kernel_type)),
            "range_us": list(range_us) if range_us else None}


def case_specs(results: list[CaseResult]) -> tuple[list[int], list[CaseSpec]]:
    """The results a profile can complete (measured, with a profile record), and their specs."""
    indices, specs = [], []
    for index, result in enumerate(results):
        profile = result.profile
        if result.status not in _ATTRIBUTABLE or not profile:
            continue
        indices.append(index)
        get = profile.get
        specs.append(CaseSpec(  # positional: 10^5 specs, keywords cost a third more
            str(get("marker") or mstx_message(result.case_id)),
            tuple(get("launches") or launches_of(result.kernel_type)),
            get("calls"), int(get("warmup") or 0), int(get("pid", -1)), int(get("device", -1)),
            result.signature))
    return indices, specs


@dataclass
class ProfileOutcome:
    """What reading a profile did, for the notes of the reports."""

    sources: list[ProfileSource] = field(default_factory=list)
    kernels: int = 0
    markers: int = 0
    attributed: int = 0
    unattributed: int = 0
    by_markers: bool = True
    notes: list[str] = field(default_factory=list)
    kernel_types: list[str] = field(default_factory=list)  # of the cases it was asked about


def complete_results(results: list[CaseResult], indices: list[int], specs: list[CaseSpec],
                     attribution: Attribution, kernels: KernelTable, method: str) -> int:
    """Put the attributed kernels' statistics into the results; returns how many got them."""
    groups = len(specs)
    case_of, kernel_of = attribution.sample_case, attribution.sample_kernel
    durations = kernels.duration[kernel_of]
    stats = group_stats(case_of, durations, groups, std=StdConvention.SAMPLE)
    statistics = {results[i].statistic for i in indices}
    precision = {name: group_precision(case_of, durations, groups, stats, name)
                 for name in statistics}
    noisy = noise_reasons(stats)
    means = group_means(case_of, kernels.counters, groups, kernel_of)
    order = lexsort_pairs(kernels.start[kernel_of], case_of)
    # per case, in launch order (for plots)
    ordered = (durations if order is None else durations[order]).tolist()
    count = stats.count.tolist()
    offsets = np.concatenate(([0], np.cumsum(stats.count)[:-1])).tolist()
    # Per group, SampleStats' arguments in order: one tuple each, built by zip in C.
    stat_rows = list(zip(count, *(getattr(stats, name).tolist() for name in _STATS_FIELDS)))
    precision = {name: values.tolist() for name, values in precision.items()}
    counter_rows = CounterMatrix(COUNTERS, means).rows()  # NaN: no such counter in the profile
    attributed = 0
    for group, (index, found) in enumerate(zip(indices, attribution.cases)):
        result = results[index]
        if found.extra:
            result.extra_kernels = dict(sorted(found.extra.items()))
        if found.problem or not count[group]:
            result.status = STATUS_UNATTRIBUTED
            result.error = found.problem or "no samples left after the warmup calls"
            continue
        attributed += 1
        row = stat_rows[group]  # (samples, mean, median, std, min, ...)
        result.stats = SampleStats(*row)
        first, samples = offsets[group], row[0]
        kept = ordered[first:first + samples]
        result.samples = kept if samples <= MAX_KEPT_SAMPLES else \
            kept[::-(-samples // MAX_KEPT_SAMPLES)]
        value = precision[result.statistic][group]
        result.precision = value if math.isfinite(value) else None
        result.method = method
        result.measured_kernel_type = found.measured_type
        result.counters = counter_rows[group]
        result.time_in_calls_s = row[1] * samples / 1e6
        result.status, result.error = STATUS_OK, ""
        if result.bound_us and row[4] < BOUND_SLACK * result.bound_us:
            result.status = STATUS_SUSPECT
            result.error = (f"faster than the device allows: min {row[4]:.3f} us < "
                            f"bound {result.bound_us:.3f} us")
        elif group in noisy:
            result.status, result.error = STATUS_NOISY, noisy[group]
    return attributed


def read_kernels_ahead(pool: ThreadPoolExecutor, sources: list[ProfileSource]
                       ) -> Future[KernelTable] | ChildRead:
    """The kernel tables read while the caller does other work (the markers, the hand-off,
    the database): large tables by a child process (pandas holds the GIL for most of a
    parse), small ones in `pool`. Pass `.result()` to `attribute_results`; `.cancel()` ends
    a read not waited for. Shapes are read only without marker files (attribution by order
    needs them)."""
    with_identity = not any(s.marker_files for s in sources)
    if table_bytes(sources) >= CHILD_MIN_BYTES:
        return ChildRead(sources, with_identity)
    return pool.submit(read_kernels, sources, with_identity=with_identity)


@dataclass
class PreparedCases:
    """What attribution needs of the results and the markers alone (`prepare_cases`): made
    while the kernel tables are still being read, so that it is not left for after them."""

    indices: list[int]
    specs: list[CaseSpec]
    marker_of: np.ndarray | None = None  # per spec, its marker in the table it was made with


def prepare_cases(results: list[CaseResult], markers: MarkerTable | None = None
                  ) -> PreparedCases:
    """The results' specs and, where `markers` has ranges, each spec's marker."""
    indices, specs = case_specs(results)
    marker_of = match_markers(markers, specs) if markers is not None and len(markers) else None
    return PreparedCases(indices, specs, marker_of)


def attribute_results(results: list[CaseResult], path: str | Path | list[ProfileSource], *,
                      method: str = METHOD_MSPROF, order_method: str = METHOD_MSPROF_ORDER,
                      markers: MarkerTable | None = None,
                      kernels: KernelTable | None = None,
                      prepared: PreparedCases | None = None) -> ProfileOutcome:
    """Read the profile at `path` and complete the results it holds kernels for (`markers`,
    `kernels`: its marker table and kernels (`read_kernels_ahead`), when the caller has read
    them already; `prepared`: `prepare_cases` of these results and `markers`)."""
    sources = path if isinstance(path, list) else find_sources(path)
    outcome = ProfileOutcome(sources=sources)
    prepared = prepared or prepare_cases(results)
    indices, specs = prepared.indices, prepared.specs
    outcome.kernel_types = sorted({results[i].kernel_type for i in indices})
    if markers is None:
        markers = read_markers(sources)
    use_markers = len(markers) > 0
    if kernels is None or (not use_markers and kernels.identity is None):
        # (marker files without a single range: attribution by order needs the shapes)
        kernels = read_kernels(sources, with_identity=not use_markers)
    outcome.kernels, outcome.markers = len(kernels), len(markers)
    outcome.notes += markers.notes + kernels.notes
    for source in sources:
        if source.ignored:
            outcome.notes.append(f"{source.root}: {len(source.ignored)} file(s) of an older "
                                 f"export were ignored (the newest export was read)")
    if use_markers:
        attribution = attribute_by_markers(kernels, markers, specs, prepared.marker_of)
    else:
        attribution = attribute_by_order(kernels, specs)
        outcome.by_markers = False
    outcome.notes += attribution.notes
    outcome.attributed = complete_results(results, indices, specs, attribution, kernels,
                                          method if use_markers else order_method)
    outcome.unattributed = len(indices) - outcome.attributed
    return outcome
