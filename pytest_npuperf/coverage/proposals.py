"""What to measure next: values of a workload axis to add, in the order they help most.

1. Density first (the standard's gates): every spacing violation of a workload axis inside one
   bucket gets the values that close it (steps of `max_gap` from its lower end, or of
   `max_ratio`), and a required value missing inside a bucket's span gets itself; largest
   violation first.
2. Then accuracy: the rows with the largest leave-one-out error (predicted along one workload
   axis) get the integer midpoints of the intervals on either side of them (the standard's
   `L+1` step), largest error first.

Each proposal keeps a measured row of its bucket as the template of the new row and says why.
Structural axes (N, K, heads, head dim) are not proposed: their values are the model widths the
shape grid generates from model configurations (`npuperf grid --target-models`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .density import KernelDensity
from .interpolate import Point
from .loo import LooResult
from .points import KernelPoints
from .standard import AxisRule

DENSITY, ACCURACY = "density", "accuracy"
MIN_SPLIT_ERROR = 0.01  # a held-out row predicted within 1 % needs no split
MAX_STEPS = 64  # values proposed for one gap at most
MAX_SPLITS = 500  # held-out rows split per kernel type at most (the worst ones)


@dataclass(frozen=True)
class Proposal:
    kernel_type: str
    axis: str
    value: int
    kind: str  # DENSITY or ACCURACY
    score: float  # how much it matters: the violation's excess, or the error split
    reason: str
    bucket: str
    template: dict  # identity (and runtime) cells of a measured row of the bucket
    template_value: float

    def as_dict(self) -> dict:
        return {"kernel_type": self.kernel_type, "axis": self.axis, "value": self.value,
                "kind": self.kind, "score": self.score, "reason": self.reason,
                "bucket": self.bucket, "template_value": self.template_value,
                "template": self.template}

    @classmethod
    def from_dict(cls, data: dict) -> Proposal:
        return cls(str(data["kernel_type"]), str(data["axis"]), int(data["value"]),
                   str(data["kind"]), float(data["score"]), str(data["reason"]),
                   str(data.get("bucket", "")), dict(data["template"]),
                   float(data["template_value"]))


def template_cells(kernel: KernelPoints, point: Point) -> dict[str, str]:
    return kernel.row_cells(point.row)


def closing_values(a: float, b: float, rule: AxisRule) -> list[int]:
    """Integer values between a and b after which no gap breaks the rule: each step as far as
    the lowest segment the remaining gap reaches into allows (8 -> 64 on M_GRID: 10, 12, 14,
    16, 20, 24, 28, 32, 40, 48, 56)."""
    out: list[int] = []
    current = a
    while len(out) < MAX_STEPS:
        spanning = [s for s in rule.segments if s.low < b and s.high > current]
        if not spanning or all(s.exceeded_by(current, b) <= 1 + 1e-12 for s in spanning):
            break
        segment = min(spanning, key=lambda s: s.low)
        if segment.max_gap is not None:
            step = math.floor(current + segment.max_gap)
        else:
            step = math.floor(current * segment.max_ratio)
        step = max(step, math.floor(current) + 1)
        if step >= b:
            break
        out.append(int(step))
        current = step
    return out


def _midpoint(a: float, b: float) -> int | None:
    mid = math.floor((a + b) / 2)
    return mid if a < mid < b else None


def density_proposals(kernel: KernelPoints, density: KernelDensity) -> list[Proposal]:
    out = []
    for axis in density.axes:
        if axis.rule is None or not axis.axis.sweep:
            continue
        for bucket_gap in axis.gaps:
            gap = bucket_gap.gap
            for value in closing_values(gap.low, gap.high, axis.rule):
                out.append(Proposal(
                    kernel.kernel_type, axis.axis.name, value, DENSITY, gap.excess,
                    f"{axis.rule.name}: gap {gap.low:g}->{gap.high:g} breaks {gap.limit}",
                    bucket_gap.bucket, template_cells(kernel, bucket_gap.below),
                    bucket_gap.below.query.axes[axis.axis.name]))
    return out


def accuracy_proposals(kernel: KernelPoints, loo: LooResult) -> list[Proposal]:
    sweep = {a.name for a in kernel.family.axes if a.sweep}
    out = []
    splits = 0
    for holdout in sorted(loo.holdouts, key=lambda h: -h.error):
        if holdout.error < MIN_SPLIT_ERROR or splits >= MAX_SPLITS:
            break
        if len(holdout.estimate.axes) != 1:
            continue
        axis = holdout.estimate.axes[0]
        if axis not in sweep:
            continue
        splits += 1
        x = holdout.point.query.axes[axis]
        lo, hi = holdout.neighbours(axis) or (x, x)
        for a, b in ((lo, x), (x, hi)):
            value = _midpoint(a, b)
            if value is None:
                continue
            others = ", ".join(f"{k}={v:g}" for k, v in sorted(holdout.point.query.axes.items())
                               if k != axis)
            out.append(Proposal(
                kernel.kernel_type, axis, value, ACCURACY, holdout.error,
                f"leave-one-out error {100 * holdout.error:.1f} % at {axis}={x:g} "
                f"(between {lo:g} and {hi:g}): split {a:g}-{b:g}",
                others, template_cells(kernel, holdout.point), x))
    return out


def propose(kernel: KernelPoints, density: KernelDensity | None, loo: LooResult | None
            ) -> list[Proposal]:
    """Density proposals (largest violation first), then accuracy ones (largest error
    first); a proposal made twice is kept once, at its first place (the fill drops new rows
    whose signature another one, or the table, already has)."""
    first = sorted(density_proposals(kernel, density), key=lambda p: -p.score) if density else []
    second = accuracy_proposals(kernel, loo) if loo else []
    seen = set()
    out = []
    for proposal in first + second:
        key = (proposal.axis, proposal.value, proposal.bucket,
               tuple(sorted(proposal.template.items())))
        if key in seen:
            continue
        seen.add(key)
        out.append(proposal)
    return out
