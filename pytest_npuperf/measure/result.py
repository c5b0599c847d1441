"""One case's result, independent of where its duration came from.

Results travel as plain dicts (xdist workers attach them to their test reports), so every
field is JSON-serialisable. A result may be completed later: on the NPU, kernel durations
arrive from msprof files after the cases ran, and replace the in-case statistics.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .policy import METHOD_EVENTS
from .policy import METHOD_GRAPH as METHOD_GRAPH
from .policy import METHOD_MSPROF as METHOD_MSPROF
from .policy import METHOD_PROFILER as METHOD_PROFILER
from .stats import SampleStats, summarize

STATUS_OK = "ok"
STATUS_FAILED = "failed"  # the kernel raised
STATUS_ERROR = "error"  # the row could not be turned into a call (malformed cell, dtype)
STATUS_TIMEOUT = "timeout"
STATUS_SKIPPED = "skipped"  # no replay for this kernel type
STATUS_SUSPECT = "suspect"  # faster than the device's physical bound: flagged, not trusted
# Samples inconsistent with a quiet machine (see noise.py): kept in the MicroBench columns,
# never stored as the row's latency.
STATUS_NOISY = "noisy"
# How the error of a case left noisy by a preempted host, and of one far above its quiet
# history (harness/measurer.py), begin.
PREEMPTED_REASON = "preempted:"
PLATEAU_REASON = "plateau:"
STATUS_CRASHED = "crashed"  # the xdist worker running the case died
# Measured, but the profiler's kernels could not be tied to the case (no marker, no kernel of
# the expected type, a count that does not match its calls): the row keeps its latency.
STATUS_UNATTRIBUTED = "unattributed"
STATUSES = (STATUS_OK, STATUS_FAILED, STATUS_ERROR, STATUS_TIMEOUT, STATUS_SKIPPED,
            STATUS_SUSPECT, STATUS_NOISY, STATUS_CRASHED, STATUS_UNATTRIBUTED)
FAILING_STATUSES = (STATUS_FAILED, STATUS_ERROR, STATUS_TIMEOUT, STATUS_CRASHED)  # the case fails

# Results travel between processes and stay in memory for a whole session (10^5 cases): each
# keeps at most this many of its samples, evenly spread over the run, for plots.
MAX_KEPT_SAMPLES = 200


@dataclass(slots=True)  # 10^5 results live through a session: no per-instance dict
class CaseResult:
    case_id: str
    nodeid: str
    kernel_type: str
    file: str  # the CSV file name within the database
    signature: str  # short hash of the row's signature: checked against the row at `row`
    row: int | None = None  # 1-based data row in the file when collected
    status: str = STATUS_OK
    method: str = METHOD_EVENTS
    stats: SampleStats | None = None
    samples: list[float] = field(default_factory=list)
    error: str = ""  # one line: what went wrong, or why the result is flagged
    detail: str = ""  # the traceback of a failed kernel
    device: str = ""
    stack: str = ""  # software stack, e.g. "torch 2.9.0, torch_npu 2.9.0, cann 8.5"
    measured_kernel_type: str = ""  # the kernel the device actually ran, when known (msprof)
    warmup: int = 0
    time_in_calls_s: float = 0.0  # wall time spent inside the measured calls
    wall_s: float = 0.0  # wall time of the whole case (building inputs included)
    flops: float = 0.0
    bytes: float = 0.0
    bound_us: float | None = None  # the roofline's bound (measure/roofline.py)
    compute_bound_us: float | None = None
    memory_bound_us: float | None = None  # at the bandwidth of `memory_level`
    memory_level: str = ""  # where the working set streams from: L2, LLC, HBM, DRAM
    hbm_bound_us: float | None = None  # at main memory's bandwidth
    bound_by: str = ""  # compute | memory | latency
    bound_derivation: str = ""  # how each term of the bound was made (measure/roofline.py)
    cold_bytes: float = 0.0  # of `bytes`, those read cold at every call (--npuperf-cache)
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    mfu: float | None = None  # achieved / peak FLOP/s
    mbu: float | None = None  # achieved / the bandwidth of `memory_level`
    statistic: str = "median"  # which statistic `value` (Average Duration(us)) is
    precision: float | None = None  # relative 95 % CI half-width of that statistic reached
    stop_reason: str = ""  # why sampling stopped: precision reached, time budget, max samples
    threads: int | None = None  # torch intra-op threads the case ran with
    host_load: float | None = None  # 1-minute load average when the case started (cpu)
    fallback: str = ""  # why the session's method did not measure this case, if it did not
    note: str = ""  # what the reader of this number should know (e.g. a busy machine)
    verified: str = ""  # --npuperf-verify: what the output was compared with, when sampled
    # CPU: a fixed pure-Python loop's time around the case (measure/reference.py), which says
    # whether the host itself was slower than when the baseline was measured
    reference_us: float | None = None
    # --npuperf-baseline: measure.compare.Comparison as a dict, decided where the case ran
    regression: dict[str, Any] | None = None
    # Under a device profiler: what attribution needs (mstx marker text, pid, device index,
    # wall-clock range in us, calls inside the range, the kernel types the call launches).
    profile: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)  # mean hardware counters (msprof)
    extra_kernels: dict[str, int] = field(default_factory=dict)  # other kernels in the range
    timestamp: str = field(default_factory=lambda: _dt.datetime.now().isoformat(timespec="seconds"))
    implementation: str = ""  # what ran (`Prepared.implementation`): MicroBench Implementation
    impl: str = ""  # which implementation (kernels/implementation_options.py): eager, compiled, npu...
    cache: str = ""  # the cache state it was measured in (kernels/cache_state.py)
    # Samples the host's other processes took CPU time from (devices/preemption.py): left
    # out, or with --npuperf-preempted keep kept among the samples (`preempted_kept`).
    preempted: int = 0
    preempted_kept: bool = False
    # Where the case's time beyond its timed calls went (measure/overhead.py): part -> s.
    overhead_s: dict[str, float] | None = None

    @property
    def measured(self) -> bool:
        return self.stats is not None and self.status in (STATUS_OK, STATUS_SUSPECT,
                                                          STATUS_NOISY, STATUS_UNATTRIBUTED)

    @property
    def value(self) -> float | None:
        """The stored central value: the chosen statistic of the samples."""
        if self.stats is None:
            return None
        return self.stats.mean if self.statistic == "mean" else self.stats.median

    @property
    def status_text(self) -> str:
        """`status[: why it is flagged][ (what else to know)]`, on one line."""
        text = f"{self.status}: {self.error}" if self.error else self.status
        remarks = [r for r in (self.fallback, self.note) if r]
        if remarks:
            text += f" ({'; '.join(remarks)})"
        return " ".join(text.split())

    def set_samples(self, samples: list[float]) -> None:
        """Statistics of all samples; a spread-out subset of them kept for plots."""
        self.stats = summarize(samples)
        step = max(1, -(-len(samples) // MAX_KEPT_SAMPLES))
        self.samples = list(samples[::step])

    def to_dict(self) -> dict[str, Any]:
        # Lists and dicts copied, nothing else: dataclasses.asdict deep-copies every value,
        # four times slower, once per case in a session's journal and hand-offs.
        data = {name: _copied(getattr(self, name)) for name in _FIELDS}
        data["stats"] = self.stats.to_dict() if self.stats else None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaseResult:
        values = dict(data)
        stats = values.pop("stats", None)
        if not values.keys() <= cls.__dataclass_fields__.keys():  # fields of another version
            values = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        result = cls(**values)
        result.stats = SampleStats.from_dict(stats) if stats else None
        return result


_FIELDS = tuple(CaseResult.__dataclass_fields__)


def _copied(value: Any) -> Any:
    if isinstance(value, Mapping):  # a dict, or a counter row of the session's matrix
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copied(v) for v in value]
    return value
