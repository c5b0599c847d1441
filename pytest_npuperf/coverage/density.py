"""A database's measured points against the density standard, kernel type by axis.

For every axis of a kernel type's query family (axes.py) with a rule in the standard:

- the values present (measured rows only: a positive finite latency), their span, and the
  standard's range endpoints that are not among them;
- required values missing inside the span the kernel type covers (a kernel type declares its
  own sub-range of a public axis; required values beyond it are listed apart, as not covered);
- spacing violations (`max_gap` / `max_ratio`): for a workload axis (M, tokens, sequence,
  batch) between adjacent values of one interpolation bucket (every other axis and the bucket's
  exact fields fixed), where the simulator interpolates; for a structural axis (N, K, heads,
  head dim) over the table's set of values.

An axis without a rule in the standard is listed with its values, and judged on nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from .axes import AxisSpec
from .interpolate import Point
from .points import KernelPoints
from .standard import AxisCheck, AxisRule, DensityStandard, Gap, check_values, spacing_gaps


@dataclass(frozen=True)
class BucketGap:
    gap: Gap
    bucket: str  # the other axes' values, e.g. "K=7168, N=512"
    below: Point  # the measured row at the gap's lower end (a template for a new row)


@dataclass
class AxisDensity:
    axis: AxisSpec
    rule: AxisRule | None
    check: AxisCheck | None  # of the table's set of values
    values: tuple[float, ...]
    buckets: int = 0
    gaps: list[BucketGap] = field(default_factory=list)
    listed_only: bool = False  # a structural axis under --workload-only
    unjudged: str = "no rule in the standard"  # why, where rule is None

    @property
    def ok(self) -> bool:
        return self.listed_only or self.check is None or (
            not self.gaps and not self.check.missing_required)

    @property
    def judged(self) -> bool:
        return self.rule is not None and not self.listed_only

    def summary(self) -> str:
        name = self.axis.name
        if not self.values:
            return f"{name}: no values"
        span = f"{self.values[0]:g}-{self.values[-1]:g}"
        text = f"{name}: {len(self.values)} value(s) {span}"
        if self.rule is None:
            return f"{text} ({self.unjudged})"
        parts = [f"rule {self.rule.name}" + (", listed, not judged" if self.listed_only else "")]
        if self.gaps:
            worst = max(self.gaps, key=lambda g: g.gap.excess)
            where = f" at {worst.bucket}" if worst.bucket else ""
            parts.append(f"{len(self.gaps)} gap(s), worst {worst.gap.text()}{where}")
        if self.check is not None and self.check.missing_required:
            shown = ", ".join(f"{v:g}" for v in self.check.missing_required[:8])
            more = len(self.check.missing_required) - 8
            parts.append(f"missing required {shown}" + (f" (+{more})" if more > 0 else ""))
        if self.check is not None and self.check.range_endpoints_missing:
            parts.append("range endpoint(s) not measured: "
                         + ", ".join(f"{v:g}" for v in self.check.range_endpoints_missing))
        return f"{text} [{'; '.join(parts)}]" + ("" if self.ok else " FAIL")


@dataclass
class KernelDensity:
    kernel_type: str
    family: str
    rows: int
    measured: int
    points: int
    rejected: Counter
    axes: list[AxisDensity] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.axes)

    @property
    def judged(self) -> bool:
        return any(a.judged for a in self.axes)


def bucket_label(others: tuple) -> str:
    return ", ".join(f"{a}={v:g}" for a, v in others)


def points_by_bucket(points: list[Point], axis: str) -> dict[tuple, list[Point]]:
    """Per interpolation bucket of `axis` (regime and every other axis fixed), its points."""
    out: dict[tuple, list[Point]] = defaultdict(list)
    for point in points:
        q = point.query
        if axis in q.axes:
            others = tuple(sorted((a, v) for a, v in q.axes.items() if a != axis))
            out[(q.regime, others)].append(point)
    return out


def axis_density(kernel: KernelPoints, spec: AxisSpec, standard: DensityStandard | None,
                 points: list[Point]) -> AxisDensity:
    values = [p.query.axes[spec.name] for p in points if spec.name in p.query.axes]
    rule = standard.rule(spec.rule) if standard is not None and spec.rule else None
    check = check_values(values, rule) if rule is not None else None
    out = AxisDensity(spec, rule, check, tuple(sorted(set(values))))
    if standard is None:
        out.unjudged = "no standard given"
    buckets = points_by_bucket(points, spec.name)
    out.buckets = len(buckets)
    if rule is None:
        return out
    if not spec.sweep:
        below = {p.query.axes[spec.name]: p for p in points if spec.name in p.query.axes}
        out.gaps = [BucketGap(g, "", below[g.low]) for g in check.gaps]
        return out
    for (_, others), members in sorted(buckets.items(), key=lambda kv: str(kv[0])):
        at = {}
        for p in members:
            at.setdefault(p.query.axes[spec.name], p)
        distinct = sorted(at)
        out.gaps += [BucketGap(g, bucket_label(others), at[g.low])
                     for g in spacing_gaps(distinct, rule)]
    return out


def kernel_density(kernel: KernelPoints, standard: DensityStandard | None, *,
                   workload_only: bool = False, theory: bool = False) -> KernelDensity:
    """`workload_only`: structural axes (model widths) are listed, not judged. `theory`: rows
    without a latency count too (a grid's plan, before it is measured)."""
    points = kernel.points + kernel.theory if theory else kernel.points
    out = KernelDensity(kernel.kernel_type, kernel.family.name, kernel.rows, kernel.measured,
                        len(points), kernel.rejected)
    out.axes = [axis_density(kernel, spec, standard, points) for spec in kernel.family.axes]
    for axis in out.axes:
        axis.listed_only = workload_only and not axis.axis.sweep
    return out
