"""A trace's operator calls as kernel-table rows: what `npuperf parse` aggregates, beside the
rows of kernel tables, per (kernel type, signature).

Each call of an operator the database maps is one row: its kernel type, the kernel's input and
output cells (kernels/torch_ops.py) and its in-model device time as `Duration(us)`. A
composite call (an RMS norm, a rotary embedding, a gated activation, an attention: see
trace.py) is one row of its kind's kernel type (kernels/composite_ops.py). What maps to
nothing stays in the summary with its share of the trace's device time, named by the
operator and its shapes, or by the composite call it is part of.

Beside the identity cells a row gets the strides its inputs had in the model (`Input
Strides`, the calls' commonest by time) and where and how the profile was taken (the
`Profiling Device|Threads|Host|Stack|Trust` columns) from what `npuperf profile` wrote into the
trace's metadata (key `npuperf`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..db.columns import (
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    INPUT_STRIDES,
    OUTPUT_DTYPES,
    OUTPUT_SHAPES,
    PROFILING_DEVICE,
    PROFILING_HOST,
    PROFILING_STACK,
    PROFILING_THREADS,
    PROFILING_TRUST,
    RAW_DURATION,
    TRUST_OK,
)
from ..db.errors import CellError
from ..db.signature import Signature, signature
from ..devices.names import cpu_model, database_device
from ..kernels.composite_ops import Part, composite_row, traced_tensors
from ..kernels.module_kinds import STEP_WAITS, ModuleKinds, load_kinds
from ..kernels.torch_ops import TorchOperators
from . import trace_fields as fields
from .chrome_trace import read_events
from .trace import KIND_CPU, KIND_CUDA, OpCall, TraceDevice, read_trace

_SHOWN = 8
LABEL_LIMIT = 400  # an unmapped label: a name cut at trace_fields' length, and its shapes
NOT_CONVERTED = "inputs not converted"
META_KEY = "npuperf"  # what `npuperf profile` records about the profile (profiling/workload.py)


@dataclass
class TraceSummary:
    path: Path
    device: TraceDevice
    calls: int  # calls that became rows
    groups: int = 0
    mapped_us: float = 0.0
    total_us: float = 0.0
    unmapped: Counter = field(default_factory=Counter)  # operator -> device time (us)
    alternates: dict[str, tuple[str, ...]] = field(default_factory=dict)
    left_out: Counter = field(default_factory=Counter)  # events with bad fields, by reason
    composites: Counter = field(default_factory=Counter)  # kernel type -> calls from kinds
    steps: int = 0
    outside_steps_us: float = 0.0
    init_us: float = 0.0
    profile: dict = field(default_factory=dict)  # the trace's `npuperf` metadata
    # Per (kernel type, signature): cells beside the identity (strides, profile conditions).
    extras: dict[tuple[str, Signature], dict[str, str]] = field(default_factory=dict)

    @property
    def database_device(self) -> str | None:
        """The `<DEVICE>` of the database this trace's rows belong to (None: it cannot say)."""
        recorded = self.profile.get("device")
        if recorded:
            return str(recorded)
        if self.device.kind == KIND_CUDA and self.device.name:
            return database_device(KIND_CUDA, self.device.name)
        if self.device.kind == KIND_CPU:
            return database_device(KIND_CPU, cpu_model())
        return None

    @property
    def trust(self) -> str:
        return str(self.profile.get("trust") or "")

    @property
    def waited_us(self) -> float:
        """What the profile's threads waited for a CPU inside the marked steps (Linux's
        run-queue delay, recorded by `npuperf profile`), in a CPU trace: time the host took,
        held by the in-model times but not the model's. 0: none recorded, or a device's
        trace (its kernels do not wait for the host's CPU)."""
        if self.device.kind != KIND_CPU or not self.steps:
            return 0.0
        waits = self.profile.get(STEP_WAITS)
        if not isinstance(waits, list):
            return 0.0
        total = 0.0
        for step in waits:
            try:
                value = float(step[1])
            except (TypeError, ValueError, IndexError):
                value = -1.0
            if not math.isfinite(value) or value < 0:
                return 0.0  # a hand-edited value: nothing said rather than a wrong figure
            total += value
        return min(total, self.total_us)

    def conditions(self) -> dict[str, str]:
        """The profile's conditions as the rows record them."""
        profile = self.profile
        found = {PROFILING_DEVICE: self.database_device or "",
                 PROFILING_THREADS: str(profile.get("threads") or ""),
                 PROFILING_HOST: str(profile.get("host") or ""),
                 PROFILING_STACK: str(profile.get("stack") or ""),
                 PROFILING_TRUST: self.trust}
        return {k: v for k, v in found.items() if v}

    def lines(self) -> list[str]:
        total = self.total_us or 1.0
        what = "device" if self.device.kind != KIND_CPU else "CPU operator"
        name = f" {self.device.name}" if self.device.name else ""
        scope = f" in its {self.steps} marked step(s)" if self.steps else ""
        lines = [f"{self.path}: {self.device.kind}{name} trace, {self.calls:,} mapped call(s) in "
                 f"{self.groups} (kernel type, signature) group(s): {self.mapped_us / total:.1%} "
                 f"of its {self.total_us / 1e3:,.3f} ms of {what} time{scope}"]
        if self.left_out:
            reasons = ", ".join(f"{n:,} {why}" for why, n in self.left_out.most_common())
            lines.append(f"  left out {sum(self.left_out.values()):,} event(s) with a bad "
                         f"field: {reasons}")
        if self.composites:
            lines.append("  composite calls: " + ", ".join(
                f"{kind} {n}" for kind, n in sorted(self.composites.items())))
        if self.steps and self.outside_steps_us:
            lines.append(f"  left out: {self.outside_steps_us / 1e3:,.3f} ms between and around "
                         f"the marked steps")
        elif not self.steps and self.init_us:
            lines.append(f"  no steps marked: {self.init_us / total:.1%} of the trace is weight "
                         f"initialisation (random fills); mark the step (pytest_npuperf."
                         f"profiling.step) or profile a callable (npuperf profile --call)")
        if self.waited_us > 0:
            lines.append(f"  the profile's threads waited {self.waited_us / 1e3:,.3f} ms "
                         f"({self.waited_us / total:.1%}) of it for a CPU (run-queue delay)")
        if self.trust and self.trust != TRUST_OK:
            lines.append(f"  the in-model times are {self.trust}: they are kept out of the "
                         f"replay comparison; profile again on a quiet host")
        if self.unmapped:
            # Labels name operators already cut and escaped, then their shapes.
            shown = ", ".join(f"{fields.shown(op, LABEL_LIMIT)} {us / total:.1%}" for op, us in
                              self.unmapped.most_common(_SHOWN))
            more = len(self.unmapped) - _SHOWN
            lines.append(f"  maps to no kernel table: {shown}"
                         + (f" (+{more} more)" if more > 0 else ""))
        return lines


def _composite_cells(call: OpCall, cache: dict) -> dict[str, str] | None:
    """A composite call's cells; the same call in every layer is converted once."""
    key = (call.kind.name, repr(call.recorded), repr(call.parts))  # type: ignore[union-attr]
    if key not in cache:
        parts = [Part(*p) for p in call.parts]
        cache[key] = composite_row(call.kind, traced_tensors(call.recorded), parts)  # type: ignore[arg-type]
    cells = cache[key]
    return None if cells is None else dict(cells)


def _not_converted(call: OpCall) -> str:
    if call.kind is None:
        return f"{fields.shown(call.name)} ({NOT_CONVERTED})"
    inputs = "; ".join("x".join(map(str, r[0])) for r in call.recorded if r) or \
        "; ".join("x".join(map(str, d)) for p in call.parts[:3] for d in p[1][:1] if d)
    return (f"inside {call.kind.name} {fields.shown(call.label)} ({inputs[:200]}): not a "
            f"{call.kind.kernel_type} call")


def _signature(cells: dict[str, str]) -> Signature | None:
    try:
        return signature(cells["Type"], cells[INPUT_SHAPES], cells[INPUT_DTYPES],
                         cells[INPUT_FORMATS], cells[OUTPUT_SHAPES], cells[OUTPUT_DTYPES])
    except CellError:
        return None


def trace_rows(path: Path, operators: TorchOperators, kinds: ModuleKinds | None = None
               ) -> tuple[pd.DataFrame, TraceSummary]:
    kinds = kinds if kinds is not None else load_kinds()
    profile = read_trace(path, operators.is_mapped, kinds)
    rows: list[dict[str, str | float]] = []
    meta = profile.meta.get(META_KEY)
    summary = TraceSummary(path, profile.device, 0, total_us=profile.total_us,
                           unmapped=Counter(profile.unmapped), left_out=profile.left_out,
                           steps=profile.steps, outside_steps_us=profile.outside_steps_us,
                           init_us=profile.init_us,
                           profile=meta if isinstance(meta, dict) else {})
    strides: dict[tuple[str, Signature], Counter] = defaultdict(Counter)
    converted: dict = {}
    signatures: dict[tuple, Signature | None] = {}
    for call in profile.calls:
        if call.kind is not None:
            cells = _composite_cells(call, converted)
        else:
            cells = operators.row(call.name, call.dims, call.types, call.strides)
        if cells is None:
            summary.unmapped[_not_converted(call)] += call.device_us
            continue
        if call.kind is not None:
            summary.composites[cells["Type"]] += 1
        else:
            kernel = operators.kernel_of(call.name)
            if kernel is not None and kernel.alternates:
                summary.alternates[kernel.kernel_type] = kernel.alternates
        summary.mapped_us += call.device_us
        view = cells.pop(INPUT_STRIDES, "")
        identity = tuple(cells.values())
        if identity not in signatures:
            signatures[identity] = _signature(cells)
        sig = signatures[identity]
        if sig is not None:
            strides[(cells["Type"], sig)][view] += call.device_us
        rows.append({**cells, RAW_DURATION: call.device_us})
    summary.calls = len(rows)
    summary.groups = len({tuple(v for k, v in row.items() if k != RAW_DURATION) for row in rows})
    conditions = summary.conditions()
    for key, views in strides.items():
        summary.extras[key] = {**conditions, INPUT_STRIDES: views.most_common(1)[0][0]}
    return pd.DataFrame(rows, dtype=object), summary


def profile_metadata(path: str | Path) -> dict:
    """What `npuperf profile` recorded about a trace (its top-level `npuperf` value, written
    before the events), without reading the events."""
    meta: dict = {}
    for _ in read_events(Path(path), meta):
        break
    found = meta.get(META_KEY)
    return found if isinstance(found, dict) else {}
