"""One collective case's result, as rank 0 assembles it from every rank's samples."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .ops import OPS
from .sweep import CommPoint

STATUS_OK = "ok"
STATUS_FAILED = "failed"  # wrong result (the correctness check) or a rank raised
STATUS_FAULT = "fault"  # a rank died or hung: the process group is unusable from here on
STATUS_SKIPPED = "skipped"  # the backend does not support the op / dtype
FAILING = (STATUS_FAILED, STATUS_FAULT)


@dataclass
class RankTimes:
    """One rank's per-op times (microseconds) of a case."""

    rank: int
    median: float
    mean: float
    min: float
    max: float
    q1: float
    q3: float
    samples: int


@dataclass
class CommResult:
    point: CommPoint
    nodeid: str = ""
    status: str = STATUS_OK
    error: str = ""
    method: str = ""
    backend: str = ""  # gloo / nccl / hccl
    device: str = ""  # database <DEVICE> name
    stack: str = ""
    statistic: str = "median"
    duration_us: float = math.nan  # the slowest rank's statistic: the case's time
    ranks: list[RankTimes] = field(default_factory=list)
    straggler_rank: int | None = None
    ops_per_sample: int = 0  # calls per sample in the last round (rank 0 adapts it)
    timed_calls: int = 0  # calls timed per rank, all rounds
    warmup: int = 0
    precision: float = math.inf  # relative 95 % CI half-width of the slowest rank's statistic
    stop_reason: str = ""
    wrong: int = 0  # elements that failed the correctness check, over all ranks
    check: str = ""
    time_in_ops_s: float = 0.0  # rank 0's wall time inside timed batches
    wall_s: float = 0.0
    finished: str = ""  # ISO time the case ended
    samples: list[float] = field(default_factory=list)  # the straggler's per-op samples (us)
    regression: dict | None = None  # the verdict against --npuperf-baseline (rank 0)

    @property
    def case_id(self) -> str:
        return self.point.case_id

    @property
    def measured(self) -> bool:
        return self.status == STATUS_OK and math.isfinite(self.duration_us) and self.duration_us > 0

    def algbw_gbps(self) -> float:
        """docs/format.md §7 bandwidth_gbps: message_bytes / time (GB/s)."""
        return self.point.message_bytes / self.duration_us / 1e3 if self.measured else math.nan

    def busbw_gbps(self) -> float:
        return self.algbw_gbps() * OPS[self.point.op].busbw_factor(self.point.num_devices)

    def rank_spread(self) -> tuple[float, float, float]:
        """min / median / max over ranks of each rank's statistic."""
        values = sorted(self.value_of(r) for r in self.ranks)
        if not values:
            return (math.nan, math.nan, math.nan)
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        return values[0], median, values[-1]

    def value_of(self, times: RankTimes) -> float:
        return times.mean if self.statistic == "mean" else times.median

    def slowest(self) -> RankTimes | None:
        return max(self.ranks, key=self.value_of) if self.ranks else None

    def spread(self) -> float:
        """The slowest rank's interquartile range relative to its median."""
        worst = self.slowest()
        if worst is None or not worst.median > 0:
            return math.nan
        return (worst.q3 - worst.q1) / worst.median

    def to_dict(self) -> dict:
        data = asdict(self)
        data["point"] = self.point.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CommResult:
        data = dict(data)
        data["point"] = CommPoint.from_dict(data["point"])
        data["ranks"] = [RankTimes(**r) for r in data.get("ranks", [])]
        return cls(**data)
