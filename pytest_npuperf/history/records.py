"""What the history remembers of a run and of each of its cases: plain records, no SQL.

A case is identified within a run by `(kind, key)`: `kind` is `kernel` (a database row's
replay; the key is its case id, `<type>-<shape>-<dtype>-<hash>`, stable across runs) or
`collective` (a size-sweep point; the key is `collective_key(...)`), so that collective points
live in the same tables with their own columns (message size, ranks, dtype, tier, bus
bandwidth) and are compared and trended the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

KIND_KERNEL = "kernel"
KIND_COLLECTIVE = "collective"
MEASURED_STATUSES = ("ok", "noisy", "suspect")


def collective_key(op: str, message_bytes: int, num_devices: int, dtype: str,
                   tier: int | None) -> str:
    """The stable key of a collective point, e.g. `all_reduce-16777216B-8r-DT_BF16-tier1`."""
    tier_text = "tierNA" if tier is None else f"tier{tier}"
    return f"{op}-{int(message_bytes)}B-{int(num_devices)}r-{dtype}-{tier_text}"


@dataclass
class RunRecord:
    run_id: str
    started: float  # epoch seconds (orders runs from hosts in any time zone)
    started_iso: str = ""
    device: str = ""  # the database <DEVICE> name: runs are compared within one device
    device_kind: str = ""
    device_name: str = ""
    stack: dict[str, Any] = field(default_factory=dict)
    host: str = ""
    git_commit: str = ""
    git_dirty: bool | None = None
    options: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    target: str = ""
    cases: int = 0
    exit_status: int | None = None
    passed: bool | None = None  # the session ended with exit status 0: a "good" run
    baseline: str = ""  # the --npuperf-baseline it was compared with, if any
    imported_from: str = ""  # a run JSON or history file this record came from


@dataclass
class CaseRecord:
    kind: str
    key: str
    kernel: str  # kernel type, or the collective's op
    signature: str = ""
    status: str = ""
    method: str = ""
    statistic: str = "median"
    value_us: float | None = None
    samples_count: int = 0
    mean_us: float | None = None
    median_us: float | None = None
    std_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    p90_us: float | None = None
    q1_us: float | None = None
    q3_us: float | None = None
    outliers: int | None = None
    precision: float | None = None
    stop_reason: str = ""
    device: str = ""
    stack: str = ""
    timestamp: str = ""
    # Roofline (kernels).
    flops: float | None = None
    bytes: float | None = None
    bound_us: float | None = None
    compute_bound_us: float | None = None
    memory_bound_us: float | None = None
    memory_level: str = ""
    hbm_bound_us: float | None = None
    bound_by: str = ""
    achieved_tflops: float | None = None
    achieved_gbps: float | None = None
    mfu: float | None = None
    mbu: float | None = None
    # Collectives (docs/format.md §7).
    message_bytes: int | None = None
    num_devices: int | None = None
    dtype: str = ""
    tier: int | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    # Against the baseline of its run.
    verdict: str = ""
    ratio: float | None = None
    p_value: float | None = None
    baseline_run: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    samples: list[float] = field(default_factory=list)  # the kept samples (us)
    run_id: str = ""  # filled when read back
    run_started: float | None = None

    @property
    def measured(self) -> bool:
        return self.status in MEASURED_STATUSES and bool(self.samples or self.value_us)


# Columns of the `cases` table, in CaseRecord order (everything but the samples and the
# fields filled on reading).
CASE_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(CaseRecord) if f.name not in ("samples", "run_id", "run_started"))
RUN_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(RunRecord))
JSON_FIELDS = ("stack", "options", "extra")  # stored as JSON text (`stack` of a run)
