"""Leave-one-out interpolation error: each measured row held out in turn and predicted from
the rest of its table by the simulator's interpolation (interpolate.py).

The error of a row is |predicted - measured| / measured. A row the rest cannot bracket (an
endpoint of its axis, or outside the hull of its bucket) has no prediction: it is counted, not
scored. Per kernel type: median, p90, p95, max and the count above 50 %, and the rows whose
removal costs most (the largest errors: where the curve bends between its neighbours, the
first places to measure more densely). Per axis: the same over the rows predicted along one
axis group (the M axis of a GEMM, the tokens of MoE, the sequence of attention).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .interpolate import Estimate, Point
from .points import KernelPoints

WORST = 10
HIGH_ERROR = 0.5


@dataclass(frozen=True)
class Holdout:
    point: Point
    estimate: Estimate
    error: float  # relative

    @property
    def axes_label(self) -> str:
        return ",".join(self.estimate.axes)

    def neighbours(self, axis: str) -> tuple[float, float] | None:
        """The measured values on each side of the held-out row along `axis` (1-D only)."""
        if self.estimate.axes != (axis,):
            return None
        values = [p.query.axes[axis] for p in self.estimate.used]
        return min(values), max(values)


@dataclass
class ErrorStats:
    count: int = 0
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    max: float | None = None
    over_50: int = 0

    @classmethod
    def of(cls, errors: list[float]) -> ErrorStats:
        if not errors:
            return cls()
        values = np.asarray(errors, dtype=float)
        return cls(len(values), float(np.median(values)), float(np.percentile(values, 90)),
                   float(np.percentile(values, 95)), float(values.max()),
                   int((values > HIGH_ERROR).sum()))

    def text(self) -> str:
        if not self.count:
            return "no row predictable"
        return (f"median {100 * self.median:.2f} %, p90 {100 * self.p90:.2f} %, "
                f">50 %: {self.over_50} (n={self.count})")

    def as_dict(self) -> dict:
        return {"count": self.count, "median": self.median, "p90": self.p90, "p95": self.p95,
                "max": self.max, "over_50": self.over_50}


@dataclass
class LooResult:
    kernel_type: str
    points: int
    holdouts: list[Holdout] = field(default_factory=list)

    @property
    def unpredictable(self) -> int:
        return self.points - len(self.holdouts)

    @property
    def stats(self) -> ErrorStats:
        return ErrorStats.of([h.error for h in self.holdouts])

    def by_axes(self) -> dict[str, ErrorStats]:
        groups: dict[str, list[float]] = defaultdict(list)
        for holdout in self.holdouts:
            groups[holdout.axes_label].append(holdout.error)
        return {label: ErrorStats.of(errors) for label, errors in sorted(groups.items())}

    def worst(self, count: int = WORST) -> list[Holdout]:
        return sorted(self.holdouts, key=lambda h: -h.error)[:count]


def leave_one_out(kernel: KernelPoints) -> LooResult:
    result = LooResult(kernel.kernel_type, len(kernel.points))
    interpolator = kernel.interpolator
    for point in kernel.points:
        estimate = interpolator.estimate(point.query, exclude=point)
        if estimate is None:
            continue
        error = abs(estimate.value - point.latency) / point.latency
        result.holdouts.append(Holdout(point, estimate, error))
    return result
