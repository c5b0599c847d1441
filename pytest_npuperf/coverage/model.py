"""Coverage of a model: each kernel call of a profile, classed the way the simulator would
answer it from the database.

The profile is read the way `npuperf parse` reads it (kernel tables, torch.profiler and
torch_npu traces, `ingest.parse.aggregate_profiles`): its calls, per (kernel type, signature),
with their count and in-model time. Each group is:

- exact: a measured row of its kernel table (or of a table of the same call, MatMulV2/V3/
  Common) has its very signature (the standard's "strict exact": identity cells compared field
  by field, latency > 0);
- interpolable: no such row, but the simulator's interpolation answers inside the call's own
  bucket (interpolate.py), between measured values, never beyond them;
- outside: a measured table exists, but the call lies beyond its measured points, in a bucket
  the table does not hold (another dtype or layout), or lacks what the query needs (the
  simulator extrapolates nothing: it falls back to its analytic model);
- no table: no measured row of its kernel type at all.

Operators of a trace that map to no kernel table are reported beside, with their time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..db.signature import signature
from ..ingest.parse import aggregate_profiles
from ..kernels import catalog
from ..kernels.torch_ops import TorchOperators
from .interpolate import Estimate
from .points import DatabasePoints

EXACT, INTERPOLABLE, OUTSIDE, NO_TABLE = "exact", "interpolable", "outside", "no table"
CLASSES = (EXACT, INTERPOLABLE, OUTSIDE, NO_TABLE)
WORST = 10


@dataclass
class CallGroup:
    kernel_type: str
    identity: dict[str, str]
    calls: int
    time_us: float
    klass: str = ""
    reason: str = ""
    table: str = ""  # the table that answers (exact / interpolable)
    estimate: Estimate | None = None

    @property
    def shapes(self) -> str:
        return self.identity.get("Input Shapes", "")


@dataclass
class ModelCoverage:
    sources: list[str]
    groups: list[CallGroup] = field(default_factory=list)
    unmapped: Counter = field(default_factory=Counter)  # operator -> time (us)
    notes: list[str] = field(default_factory=list)

    @property
    def mapped_us(self) -> float:
        return sum(g.time_us for g in self.groups)

    @property
    def total_us(self) -> float:
        return self.mapped_us + sum(self.unmapped.values())

    def time_by_class(self) -> dict[str, float]:
        out = dict.fromkeys(CLASSES, 0.0)
        for group in self.groups:
            out[group.klass] += group.time_us
        return out

    def calls_by_class(self) -> dict[str, int]:
        out = dict.fromkeys(CLASSES, 0)
        for group in self.groups:
            out[group.klass] += group.calls
        return out

    def shares(self) -> dict[str, float]:
        total = self.total_us or 1.0
        return {k: v / total for k, v in self.time_by_class().items()}

    def worst(self, count: int = WORST) -> list[CallGroup]:
        """The calls the database answers worst: outside or without a table, most time first."""
        missed = [g for g in self.groups if g.klass in (OUTSIDE, NO_TABLE)]
        return sorted(missed, key=lambda g: -g.time_us)[:count]


def _tables_of(kernel_type: str, alternates: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys([kernel_type, *catalog.same_call_types(kernel_type), *alternates]))


def classify(db: DatabasePoints, group: CallGroup, alternates: tuple[str, ...] = ()) -> None:
    tables = [db.kernels[t] for t in _tables_of(group.kernel_type, alternates) if t in db.kernels]
    measured = [t for t in tables if t.measured]
    if not measured:
        group.klass = NO_TABLE
        group.reason = (f"{group.kernel_type}.csv has no measured row" if tables
                        else f"no {group.kernel_type}.csv")
        return
    cells = group.identity
    sig = signature(group.kernel_type, *(cells.get(c, "") for c in (
        "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
        "Output Data Types")), cells.get("EP Size", ""))
    for table in measured:
        if sig in table.measured_signatures:
            group.klass, group.table = EXACT, table.kernel_type
            return
    reasons = []
    for table in measured:
        query = db.query(table.kernel_type, cells)
        if isinstance(query, str):
            reasons.append(f"{table.kernel_type}: {query}")
            continue
        if query.regime not in table.interpolator.regimes():
            reasons.append(f"{table.kernel_type}: no measured row of its bucket (dtypes, "
                           f"layout or fixed dims differ)")
            continue
        estimate = table.interpolator.estimate(query)
        if estimate is not None:
            group.klass, group.table, group.estimate = INTERPOLABLE, table.kernel_type, estimate
            return
        axes = ", ".join(f"{a}={v:g}" for a, v in query.axes.items())
        reasons.append(f"{table.kernel_type}: {axes} lies beyond the measured points of its "
                       f"bucket")
    group.klass, group.reason = OUTSIDE, "; ".join(reasons)


def model_coverage(db: DatabasePoints, profiles: list[Path], *, show_progress: bool = False
                   ) -> ModelCoverage:
    mappings = db.op_mapping.get("operator_mappings") if db.op_mapping else None
    operators = TorchOperators(mappings if isinstance(mappings, dict) else None)
    result, notes, traces = aggregate_profiles(profiles, show_progress=show_progress,
                                               operators=operators)
    coverage = ModelCoverage([str(p) for p in profiles], notes=list(notes) + list(result.notes))
    skipped = ", ".join(f"{n:,} {why}" for why, n in result.skipped.most_common() if n)
    if skipped:
        coverage.notes.append(f"profile rows left out (as npuperf parse leaves them): {skipped}")
    alternates: dict[str, tuple[str, ...]] = {}
    for trace in traces:
        coverage.unmapped.update(trace.unmapped)
        alternates.update(trace.alternates)
    for kernel in result.kernels:
        stats = kernel.stats
        identity = dict(kernel.identity)
        identity.update(kernel.runtime)
        group = CallGroup(kernel.kernel_type, identity, int(stats.count),
                          float(stats.count) * float(stats.mean))
        classify(db, group, alternates.get(kernel.kernel_type, ()))
        coverage.groups.append(group)
    return coverage
