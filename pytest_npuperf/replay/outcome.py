"""What a run's write did, per file and in all: the input of every report."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GAP_LOW, GAP_HIGH = 0.8, 1.2  # a microbench/profiling ratio outside this band is a hotspot


@dataclass
class FileOutcome:
    file: str  # CSV file name
    kernel_type: str
    rows: int = 0  # rows in the file after the write
    updated: int = 0  # rows that received a measurement this session
    added: int = 0  # replay never adds rows; kept for the report layout of CONTRACT.md §8
    deleted: int = 0  # rows pruned (--npuperf-prune-empty-duration-rows)
    unchanged: int = 0
    failed: int = 0  # rows whose case failed, errored, timed out or crashed (status written)
    # Rows whose case ran and was flagged, or was skipped: noisy, suspect, unattributed,
    # skipped (status written, no new value). Counted apart from `failed`, so that every
    # report's row counts agree with the case statuses.
    flagged: int = 0
    missing: int = 0  # rows with no valid duration after this session
    duplicates: int = 0  # rows that share a signature with an earlier row of the file
    examples: dict[str, list[str]] = field(default_factory=dict)  # category -> shape examples


@dataclass
class GapRow:
    operator: str
    csv_name: str
    microbench_us: float
    profiling_us: float  # the in-model time: mean of the profiled calls
    shape: str
    calls: int = 0  # profiled calls (Profiling Count; 0: not recorded)
    spread: float = math.nan  # their coefficient of variation (Profiling Std / Average)

    @property
    def model_us(self) -> float:
        """The row's time in the profiled model: its calls x their mean."""
        return self.profiling_us * max(self.calls, 1)

    @property
    def ratio(self) -> float:
        return self.microbench_us / self.profiling_us

    @property
    def abs_diff(self) -> float:
        return abs(self.microbench_us - self.profiling_us)

    @property
    def severity(self) -> float:
        """max(r, 1/r): how far from agreement, in either direction."""
        return max(self.ratio, 1 / self.ratio)

    @property
    def hotspot(self) -> bool:
        return not GAP_LOW <= self.ratio <= GAP_HIGH

    def share(self, model_us: float) -> float:
        """This row's share of the model's profiled device time."""
        return self.model_us / model_us if model_us > 0 else math.nan

    def impact(self, model_us: float) -> float:
        """What the gap costs a model predicted from the database: |ratio - 1| x share, so
        that a 2x gap on 0.1 % of the time ranks below a 10 % gap on 40 %."""
        return abs(self.ratio - 1.0) * self.share(model_us)


@dataclass
class WriteOutcome:
    source: Path  # the database the cases came from
    target: Path | None  # the database written (None for a dry run)
    native: bool  # True when the source belongs to the measuring device
    dry_run: bool
    run_id: str
    stamp: str  # YYYYmmdd_HHMMSS, the suffix of report file names
    files: list[FileOutcome] = field(default_factory=list)
    gaps: list[GapRow] = field(default_factory=list)  # every row with both durations
    notes: list[str] = field(default_factory=list)
    # Per kernel type, the profiled model's device time in the database written (calls x
    # mean over every row with profiling values): the denominator of each gap's share.
    model_us: dict[str, float] = field(default_factory=dict)
    # Rows left out of the gap: their in-model times' trust mark -> rows.
    untrusted: dict[str, int] = field(default_factory=dict)
    # Compared rows profiled with another thread count: (profiled, replayed) -> rows.
    thread_mismatch: dict[tuple[str, str], int] = field(default_factory=dict)
    # The model-level prediction of each trace kept with the database (ingest/prediction.py).
    predictions: list[Any] = field(default_factory=list)

    @property
    def model_total_us(self) -> float:
        return sum(self.model_us.values())

    def by_impact(self) -> list[GapRow]:
        """Every compared row, the costliest gap for a model prediction first."""
        total = self.model_total_us
        return sorted(self.gaps, key=lambda g: (-(g.impact(total) if total > 0 else 0.0),
                                                -g.severity))

    @property
    def hotspots(self) -> list[GapRow]:
        """Rows outside [0.8, 1.2], worst first by max(r, 1/r), then by absolute gap."""
        return sorted((g for g in self.gaps if g.hotspot),
                      key=lambda g: (-g.severity, -g.abs_diff))

    def totals(self) -> dict[str, int]:
        keys = ("rows", "updated", "added", "deleted", "unchanged", "failed", "flagged",
                "missing", "duplicates")
        return {k: sum(getattr(f, k) for f in self.files) for k in keys}


@dataclass
class SessionInfo:
    run_id: str
    started: str  # ISO time
    wall_s: float  # the run's wall time: from `wall_from` to the reports
    device: dict[str, Any]  # Backend.describe()
    options: dict[str, Any]  # the measurement options in force
    workers: int = 1
    wall_from: str = ""  # what wall_s counts from: pytest start (measure/clock.py), or other
    cores: int | None = None  # cores available to the session's process
    load_at_start: float | None = None  # 1-minute load average when the session began
    threads: int | None = None  # torch intra-op threads per measuring process (cpu)
    # Where the session's own time went (measure/overhead.py): part -> seconds of wall time.
    parts: dict[str, float] = field(default_factory=dict)
    # Whether the cases' timed calls ran within `wall_s` (False: `npuperf backfill` of a run
    # that measured them earlier, elsewhere: all of its time is overhead).
    timed_here: bool = True
