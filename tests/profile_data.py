"""Writers of msprof output in its real layouts and formats, for attribution tests.

Headers are spelled out here (tests/msprof_standin.py holds the CANN 8.3 op_summary header,
copied from realdata/op_summary/), never imported from the product.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.msprof_standin import COUNTERS, OP_SUMMARY_HEADER, TX_CANN8, TX_NEW

# CANN <= 7 (inference): Model Name / Infer ID, no Device_id (the directory names the device).
OLD_OP_SUMMARY_HEADER = (
    "Model Name", "Model ID", "Task ID", "Stream ID", "Infer ID", "Op Name", "OP Type",
    "OP State", "Task Type", "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)",
    "Block Dim", "Mix Block Dim", "HF32 Eligible", "Input Shapes", "Input Data Types",
    "Input Formats", "Output Shapes", "Output Data Types", "Output Formats", "Context ID",
    *COUNTERS,
)
# CANN 6.x: no Device_id, times in ns.
TX_CANN6 = ("pid", "tid", "category", "event_type", "payload_type", "payload_value",
            "Start_time(ns)", "End_time(ns)", "message_type", "message")


@dataclass
class Kernel:
    type: str
    start: float  # us
    duration: float
    device: int = 0
    shapes: tuple[str, str, str, str, str, str] = ("N/A",) * 6
    counters: dict[str, float] = field(default_factory=dict)
    task: int = 0


@dataclass
class Range:
    message: str
    start: float  # us
    end: float
    pid: int = 100
    device: int = 0  # device-side ranges (form "new" with device times)
    on_device: bool = False


def counters_for(duration: float) -> dict[str, float]:
    return {name: round(duration * (i + 1) / 7.0, 6) for i, name in enumerate(COUNTERS)}


def _kernel_row(header: Sequence[str], k: Kernel) -> list[str]:
    cells = {"Device_id": str(k.device), "Model ID": "4294967295", "Task ID": str(k.task),
             "Stream ID": "2", "Op Name": f"aclnn{k.type}_{k.type}", "OP Type": k.type,
             "OP State": "dynamic", "Task Type": "AI_CORE",
             "Task Start Time(us)": f"{k.start:.3f}\t", "Task Duration(us)": f"{k.duration:.3f}",
             "Task Wait Time(us)": "0", "Block Dim": "24", "Mix Block Dim": "0",
             "HF32 Eligible": "NO", "Context ID": "N/A", "Model Name": "ge_default",
             "Infer ID": "1"}
    cells.update(zip(("Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
                      "Output Data Types", "Output Formats"), k.shapes))
    counters = k.counters or counters_for(k.duration)
    cells.update({name: repr(value) for name, value in counters.items()})
    return [cells.get(column, "") for column in header]


def write_op_summary(path: Path, kernels: Iterable[Kernel],
                     header: Sequence[str] = OP_SUMMARY_HEADER) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for task, kernel in enumerate(kernels):
            kernel.task = kernel.task or task
            writer.writerow(_kernel_row(header, kernel))
    return path


def write_markers(path: Path, ranges: Iterable[Range], form: str = "cann8") -> Path:
    """msprof_tx summary in one of its documented forms: cann6 (ns), cann8, new."""
    header = {"cann6": TX_CANN6, "cann8": TX_CANN8, "new": TX_NEW}[form]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(header)
        for r in ranges:
            if form == "cann6":
                row = [r.pid, r.pid, "0", "start/end", "0", "0", f"{r.start * 1000:.0f}",
                       f"{r.end * 1000:.0f}", "0", r.message]
            else:
                host_start, host_end = (r.start - 3.0, r.end + 3.0) if r.on_device else (r.start,
                                                                                         r.end)
                device = str(r.device) if (form == "cann8" or r.on_device) else "host"
                row = [device, r.pid, r.pid, "N/A", "start/end", "N/A", "N/A",
                       f"{host_start:.3f}", f"{host_end:.3f}", "N/A", r.message]
                if form == "new":
                    row += ["default", *((f"{r.start:.3f}", f"{r.end:.3f}") if r.on_device
                                         else ("N/A", "N/A"))]
            writer.writerow(row)
    return path


def prof_dir(root: Path, name: str = "PROF_000001_20260605161737000_AAA") -> Path:
    """A PROF directory with its raw sub-directories (as msprof lays them out)."""
    prof = root / name
    (prof / "device_0" / "data").mkdir(parents=True, exist_ok=True)
    (prof / "host" / "data").mkdir(parents=True, exist_ok=True)
    return prof


def summaries(prof: Path, kernels: Iterable[Kernel], ranges: Iterable[Range] | None,
              form: str = "cann8", stamp: str = "20260605161737") -> Path:
    output = prof / "mindstudio_profiler_output"
    write_op_summary(output / f"op_summary_{stamp}.csv", kernels)
    if ranges is not None:
        write_markers(output / f"msprof_tx_{stamp}.csv", ranges, form)
    return prof


def calls(kind: str, begin: float, n: int, *, step: float = 10.0, base: float = 5.0,
          device: int = 0, shapes: tuple[str, ...] = ("N/A",) * 6) -> list[Kernel]:
    """n kernels of one type from `begin`, `step` apart, durations base, base+1, ..."""
    return [Kernel(kind, begin + step * i, base + i, device, tuple(shapes))  # type: ignore[arg-type]
            for i in range(n)]
