"""A trace's operator calls as kernel-table rows: what `npuperf parse` aggregates, beside the
rows of kernel tables, per (kernel type, signature).

Each call of an operator the database maps is one row: its kernel type, the kernel's input and
output cells (kernels/torch_ops.py) and its in-model device time as `Duration(us)`. What maps
to nothing stays in the summary with its share of the trace's device time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..db.columns import RAW_DURATION
from ..devices.names import cpu_model, database_device
from ..kernels.torch_ops import TorchOperators
from . import trace_fields as fields
from .trace import KIND_CPU, KIND_CUDA, TraceDevice, read_trace

_SHOWN = 8
NOT_CONVERTED = "inputs not converted"


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

    @property
    def database_device(self) -> str | None:
        """The `<DEVICE>` of the database this trace's rows belong to (None: it cannot say)."""
        if self.device.kind == KIND_CUDA and self.device.name:
            return database_device(KIND_CUDA, self.device.name)
        if self.device.kind == KIND_CPU:
            return database_device(KIND_CPU, cpu_model())
        return None

    def lines(self) -> list[str]:
        total = self.total_us or 1.0
        what = "device" if self.device.kind != KIND_CPU else "CPU operator"
        name = f" {self.device.name}" if self.device.name else ""
        lines = [f"{self.path}: {self.device.kind}{name} trace, {self.calls:,} mapped call(s) in "
                 f"{self.groups} (kernel type, signature) group(s): {self.mapped_us / total:.1%} "
                 f"of its {self.total_us / 1e3:,.3f} ms of {what} time"]
        if self.left_out:
            reasons = ", ".join(f"{n:,} {why}" for why, n in self.left_out.most_common())
            lines.append(f"  left out {sum(self.left_out.values()):,} event(s) with a bad "
                         f"field: {reasons}")
        if self.unmapped:
            shown = ", ".join(f"{fields.shown(op)} {us / total:.1%}" for op, us in
                              self.unmapped.most_common(_SHOWN))
            more = len(self.unmapped) - _SHOWN
            lines.append(f"  maps to no kernel table: {shown}"
                         + (f" (+{more} more)" if more > 0 else ""))
        return lines


def trace_rows(path: Path, operators: TorchOperators) -> tuple[pd.DataFrame, TraceSummary]:
    profile = read_trace(path, operators.is_mapped)
    rows: list[dict[str, str | float]] = []
    summary = TraceSummary(path, profile.device, 0, total_us=profile.total_us,
                           unmapped=Counter(profile.unmapped), left_out=profile.left_out)
    for call in profile.calls:
        cells = operators.row(call.name, call.dims, call.types, call.strides)
        if cells is None:
            summary.unmapped[f"{call.name} ({NOT_CONVERTED})"] += call.device_us
            continue
        kernel = operators.kernel_of(call.name)
        if kernel is not None and kernel.alternates:
            summary.alternates[kernel.kernel_type] = kernel.alternates
        summary.mapped_us += call.device_us
        rows.append({**cells, RAW_DURATION: call.device_us})
    summary.calls = len(rows)
    summary.groups = len({tuple(v for k, v in row.items() if k != RAW_DURATION) for row in rows})
    return pd.DataFrame(rows, dtype=object), summary
