"""The model-level prediction: what a database says a profiled step takes, beside what it
took.

Each kernel call of the trace's steps (its operator calls and composite calls, as `npuperf
parse` reads them) is looked up in the database by kernel type and signature (exact rows
only; a GEMM in any table of its call space, MatMulV2/V3/Common) and costed at the database's
value for the row, what a simulator reading it adds up: the first valid of `Average
Duration(us)` (the replay) and `Profiling Average Duration(us)` (the in-model time). Summed,
that is the predicted step; the measured step is the trace's device time (CPU: operator time)
inside the steps. The difference is told apart: per kernel type its calls, measured and
predicted time, and where its values came from; the calls with no row (misses), and the time
that maps to no kernel type at all (unmapped).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..db.columns import (
    AVERAGE_DURATION,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OUTPUT_DTYPES,
    OUTPUT_SHAPES,
    PROFILING_AVERAGE_DURATION,
    RAW_DURATION,
    parse_duration,
)
from ..db.database import Database, Table
from ..db.errors import CellError, NpuperfError
from ..db.layout import OP_MAPPING_FILE
from ..db.op_mapping import load_op_mapping
from ..db.signature import signature
from ..kernels.catalog import same_call_types
from ..kernels.module_kinds import load_kinds
from ..kernels.torch_ops import TorchOperators
from .trace_rows import TraceSummary, trace_rows

REPLAY, PROFILED = "replay", "profiled"
_SHOWN = 6


@dataclass
class TypePrediction:
    kernel_type: str
    calls: int = 0
    measured_us: float = 0.0  # in the trace, every call of the type
    predicted_us: float = 0.0  # the database's values of the calls it has a row for
    hit_measured_us: float = 0.0  # in the trace, the calls it has a row for
    missed_calls: int = 0
    missed_us: float = 0.0
    sources: dict[str, int] = field(default_factory=dict)  # replay / profiled -> calls
    source_us: dict[str, float] = field(default_factory=dict)  # replay / profiled -> predicted
    source_measured_us: dict[str, float] = field(default_factory=dict)  # -> those calls' time
    misses: dict[str, float] = field(default_factory=dict)  # shape -> measured us

    @property
    def ratio(self) -> float:
        return self.predicted_us / self.hit_measured_us if self.hit_measured_us > 0 else \
            float("nan")


@dataclass
class Prediction:
    trace: Path
    database: Path
    measured_us: float  # the step's device (CPU: operator) time
    steps: int
    types: dict[str, TypePrediction] = field(default_factory=dict)
    unmapped_us: float = 0.0
    unmapped: list[tuple[str, float]] = field(default_factory=list)  # the largest
    trust: str = ""
    waited_us: float = 0.0  # of measured_us: the profile's threads waiting for a CPU

    @property
    def predicted_us(self) -> float:
        return sum(t.predicted_us for t in self.types.values())

    @property
    def missed_us(self) -> float:
        return sum(t.missed_us for t in self.types.values())

    @property
    def ratio(self) -> float:
        return self.predicted_us / self.measured_us if self.measured_us > 0 else float("nan")

    @property
    def wait_share(self) -> float:
        return self.waited_us / self.measured_us if self.measured_us > 0 else 0.0

    def _by_source(self, source: str) -> tuple[float, float]:
        """(predicted, measured) of the calls whose value came from `source`."""
        return (sum(t.source_us.get(source, 0.0) for t in self.types.values()),
                sum(t.source_measured_us.get(source, 0.0) for t in self.types.values()))

    @property
    def on_cpu_ratio(self) -> float:
        """Over the calls a replay costed: predicted / measured less the wait for a CPU (a
        CPU trace's run-queue delay). A replay leaves the host's waits out (its preempted
        samples are dropped); the in-model times hold them. The step's wait is exact; each
        call's is taken in proportion to its time (preemption lands where time is spent).
        In-model values are left out: they may hold a wait of their own profile."""
        predicted, measured = self._by_source(REPLAY)
        on_cpu = measured * (1.0 - self.wait_share)
        return predicted / on_cpu if on_cpu > 0 else float("nan")

    @property
    def covered_ratio(self) -> float:
        """Predicted / measured over the calls the database has a row for."""
        hit = sum(t.hit_measured_us for t in self.types.values())
        return self.predicted_us / hit if hit > 0 else float("nan")

    def share(self, us: float) -> float:
        return us / self.measured_us if self.measured_us > 0 else float("nan")

    def from_replays(self) -> float:
        """The share of the predicted time that replays measured (the rest: in-model values)."""
        replayed = sum(t.source_us.get(REPLAY, 0.0) for t in self.types.values())
        return replayed / self.predicted_us if self.predicted_us > 0 else float("nan")

    def lines(self) -> list[str]:
        steps = f"{self.steps} step(s)" if self.steps else "the whole trace"
        lines = [f"model prediction for {self.trace.name} ({steps}, {self.measured_us / 1e3:,.3f} "
                 f"ms measured): predicted / measured {self.ratio:.3f} ({self.covered_ratio:.3f} "
                 f"over the calls with a row; {self.from_replays():.0%} of the predicted time "
                 f"from replays, the rest from in-model values)"]
        if self.waited_us > 0:
            replayed = self._by_source(REPLAY)[1]
            lines.append(f"  of the measured time, {self.waited_us / 1e3:,.3f} ms "
                         f"({self.share(self.waited_us):.1%}) the profile's threads waited for a "
                         f"CPU (run-queue delay); without it, predicted / measured "
                         f"{self.on_cpu_ratio:.3f} over the calls a replay costed "
                         f"({self.share(replayed):.1%} of the step)")
        if self.trust and self.trust != "ok":
            lines.append(f"  measured on a host where the in-model times are {self.trust}")
        width = max((len(t) for t in self.types), default=0)
        for t in sorted(self.types.values(), key=lambda t: -t.measured_us):
            miss = (f", {t.missed_calls} call(s) without a row ({self.share(t.missed_us):.1%})"
                    if t.missed_calls else "")
            lines.append(f"  {t.kernel_type:<{width}}  {self.share(t.measured_us):6.1%} of the "
                         f"step, {t.calls} call(s), predicted / measured {t.ratio:.3f}{miss}")
        lines.append(f"  unmapped: {self.share(self.unmapped_us):.1%} of the step"
                     + (": " + ", ".join(f"{name} {self.share(us):.1%}"
                                         for name, us in self.unmapped[:_SHOWN])
                        if self.unmapped else ""))
        lines.append(f"  no row in the database: {self.share(self.missed_us):.1%} of the step")
        return lines

    def markdown(self) -> str:
        rows = ["| Kernel type | Share of step | Calls | Measured(us) | Predicted(us) | "
                "Predicted / measured | Without a row |",
                "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for t in sorted(self.types.values(), key=lambda t: -t.measured_us):
            rows.append(f"| {t.kernel_type} | {self.share(t.measured_us):.1%} | {t.calls} | "
                        f"{t.measured_us:,.1f} | {t.predicted_us:,.1f} | {t.ratio:.3f} | "
                        f"{t.missed_calls} ({self.share(t.missed_us):.1%}) |")
        head = (f"`{self.trace.name}` against `{self.database}`: predicted / measured "
                f"**{self.ratio:.3f}** over the whole step ({self.measured_us:,.1f} us measured), "
                f"{self.covered_ratio:.3f} over the calls with a row; unmapped "
                f"{self.share(self.unmapped_us):.1%}, no row {self.share(self.missed_us):.1%}.")
        if self.waited_us > 0:
            head += (f" The profile's threads waited {self.share(self.waited_us):.1%} of the "
                     f"measured time for a CPU: {self.on_cpu_ratio:.3f} without it, over the "
                     f"calls a replay costed.")
        return head + "\n\n" + "\n".join(rows)

    def as_dict(self) -> dict:
        return {"trace": str(self.trace), "database": str(self.database),
                "measured_us": self.measured_us, "predicted_us": self.predicted_us,
                "ratio": self.ratio, "covered_ratio": self.covered_ratio,
                "unmapped_us": self.unmapped_us, "missed_us": self.missed_us,
                "steps": self.steps, "trust": self.trust, "waited_us": self.waited_us,
                "on_cpu_ratio": self.on_cpu_ratio,
                "types": {k: {"calls": t.calls, "measured_us": t.measured_us,
                              "predicted_us": t.predicted_us, "missed_calls": t.missed_calls,
                              "missed_us": t.missed_us, "sources": t.sources,
                              "misses": dict(sorted(t.misses.items(), key=lambda kv: -kv[1])[:20])}
                          for k, t in self.types.items()},
                "unmapped": dict(self.unmapped)}


class _Values:
    """The database's value of each row, by kernel type and signature."""

    def __init__(self, tables: dict[str, Table]) -> None:
        self.by_type: dict[str, dict] = defaultdict(dict)
        for table in tables.values():
            frame = table.frame
            replay = frame[AVERAGE_DURATION].tolist() if AVERAGE_DURATION in frame.columns \
                else [""] * len(frame)
            profiled = frame[PROFILING_AVERAGE_DURATION].tolist() \
                if PROFILING_AVERAGE_DURATION in frame.columns else [""] * len(frame)
            found = self.by_type[table.kernel_type]
            for sig, r, p in zip(table.signatures, replay, profiled):
                if sig is None or sig in found:
                    continue
                value = parse_duration(r)
                if value is not None:
                    found[sig] = (value, REPLAY)
                elif parse_duration(p) is not None:
                    found[sig] = (parse_duration(p), PROFILED)

    def value(self, kernel_type: str, sig) -> tuple[float, str] | None:
        for kind in same_call_types(kernel_type):
            hit = self.by_type.get(kind, {}).get(sig)
            if hit is not None:
                return hit
        return None


def predict_tables(trace: Path, tables: dict[str, Table], database: Path, *,
                   operators: TorchOperators | None = None,
                   module_kinds: Sequence[str | Path] = ()) -> Prediction:
    rows, summary = trace_rows(trace, operators or TorchOperators(), load_kinds(module_kinds))
    return _predict(rows, summary, _Values(tables), database)


def _predict(rows, summary: TraceSummary, values: _Values, database: Path) -> Prediction:
    result = Prediction(summary.path, database, summary.total_us, summary.steps,
                        unmapped_us=sum(summary.unmapped.values()),
                        unmapped=summary.unmapped.most_common(_SHOWN), trust=summary.trust,
                        waited_us=summary.waited_us)
    cached: dict[tuple, object] = {}
    for row in rows.to_dict("records") if len(rows) else []:
        kernel_type = row["Type"]
        key = (kernel_type, row[INPUT_SHAPES], row[INPUT_DTYPES], row[INPUT_FORMATS],
               row[OUTPUT_SHAPES], row[OUTPUT_DTYPES])
        if key not in cached:
            try:
                cached[key] = values.value(kernel_type, signature(*key))
            except CellError:
                cached[key] = None
        hit = cached[key]
        us = float(row[RAW_DURATION])
        t = result.types.setdefault(kernel_type, TypePrediction(kernel_type))
        t.calls += 1
        t.measured_us += us
        if hit is None:
            t.missed_calls += 1
            t.missed_us += us
            t.misses[row[INPUT_SHAPES]] = t.misses.get(row[INPUT_SHAPES], 0.0) + us
            continue
        value, source = hit  # type: ignore[misc]
        t.predicted_us += value
        t.hit_measured_us += us
        t.sources[source] = t.sources.get(source, 0) + 1
        t.source_us[source] = t.source_us.get(source, 0.0) + value
        t.source_measured_us[source] = t.source_measured_us.get(source, 0.0) + us
    return result


def predict(trace: str | Path, database: str | Path, *,
            module_kinds: Sequence[str | Path] = ()) -> Prediction:
    """`npuperf predict --trace T --db D`."""
    trace, database = Path(trace), Path(database)
    if not database.is_dir():
        raise NpuperfError(f"--db {database}: not a directory")
    db = Database(database).read(strict=False)
    mapping = database / OP_MAPPING_FILE
    operators = None
    if mapping.is_file():
        mappings = load_op_mapping(mapping).get("operator_mappings")
        operators = TorchOperators(mappings if isinstance(mappings, dict) else None)
    return predict_tables(trace, db.tables, database, operators=operators,
                          module_kinds=module_kinds)


def prediction_json(prediction: Prediction) -> str:
    return json.dumps(prediction.as_dict(), indent=2)
