"""Reading msprof's marker summaries (`msprof_tx_*.csv`): every documented form, one table.

Forms (headers read from CANN's profiling documentation and from msprof's own exporter):
- CANN 6.x (`host/summary/msprof_tx.csv`): `pid,tid,category,event_type,payload_type,
  payload_value,Start_time(ns),End_time(ns),message_type,message` (some pages spell the time
  columns without unit; the unit is ns either way).
- CANN 8.0 (`mindstudio_profiler_output/msprof_tx_<stamp>.csv`): `Device_id` first, times
  `Start_time(us)`, `End_time(us)`.
- newer msprof (Ascend/msprof analysis/msinterface/msprof_output_summary.py, and
  docs/*/user_guide/profile_data_file_references.md): the 8.0 columns plus `domain`,
  `Device Start_time(us)`, `Device End_time(us)`. A range opened with a stream gets the
  device's times and its device id in `Device_id`; a host-only range has `host` there and
  `N/A` device times.

Time base: msprof converts host counters (marker times) and device counters (kernel start
times) to the same local wall-clock microseconds (`InfoConfReader.time_from_host_syscnt` /
`time_from_syscnt` + `trans_into_local_time` in msprof's analysis/common_func/
info_conf_reader.py), using the host/device sync points it logs at start. So marker and
kernel times compare directly; device-side marker times are preferred when present (no
host-device conversion between them and the kernels). That ns values of the 6.x form share
this base after dividing by 1000 is inferred, not confirmed.

Only ranges are kept (event types `start/end`, `push/pop`: an end after the start); instant
marks have nothing to contain.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..db.errors import ContractError, clip, os_error

MESSAGE = "message"
_HOST_START = ("Start_time(us)", "Start_time(ns)", "Start_time")
_HOST_END = ("End_time(us)", "End_time(ns)", "End_time")
DEVICE_START, DEVICE_END = "Device Start_time(us)", "Device End_time(us)"
_RANGE_EVENTS = {"start/end", "push/pop"}
_NA = {"", "N/A", "NA", "NULL", "None", "nan"}


@dataclass
class MarkerTable:
    """Every range of every marker file, as arrays in file order."""

    source: np.ndarray  # index of the source (run directory) the file belongs to
    pid: np.ndarray  # -1 when the file has no pid
    device: np.ndarray  # device id of a device-side range, -1 for a host range
    start: np.ndarray  # us, on msprof's local time base
    end: np.ndarray
    device_times: np.ndarray  # bool: start/end are the device's times
    message: list[str]
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.message)

    @classmethod
    def empty(cls) -> MarkerTable:
        return cls(np.empty(0, np.int32), np.empty(0, np.int64), np.empty(0, np.int32),
                   np.empty(0), np.empty(0), np.empty(0, bool), [])

    @classmethod
    def concat(cls, tables: list[MarkerTable]) -> MarkerTable:
        if not tables:
            return cls.empty()
        return cls(*(np.concatenate([getattr(t, name) for t in tables])
                     for name in ("source", "pid", "device", "start", "end", "device_times")),
                   [m for t in tables for m in t.message],
                   [f for t in tables for f in t.files], [n for t in tables for n in t.notes])


def _number(text: str) -> float:
    text = text.strip()
    if text in _NA:
        return math.nan
    return float(text)


def _column(header: list[str], names: tuple[str, ...]) -> tuple[int, str] | None:
    for name in names:
        if name in header:
            return header.index(name), name
    return None


def read_marker_file(path: Path, source: int = 0) -> MarkerTable:
    """The ranges of one marker summary. A malformed number is an error naming its row."""
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return _parse(csv.reader(handle), path, source)
    except OSError as exc:
        raise os_error(path, exc) from None


def _parse(reader, path: Path, source: int) -> MarkerTable:
    header = [h.strip() for h in next(reader, [])]
    start_col, end_col = _column(header, _HOST_START), _column(header, _HOST_END)
    if MESSAGE not in header or start_col is None or end_col is None:
        raise ContractError(f"{path}: not an msprof_tx summary (needs a message column and "
                            f"Start_time/End_time columns; header: {clip(','.join(header))})")
    scale = 1e-3 if not start_col[1].endswith("(us)") else 1.0  # ns (6.x) -> us
    where = {name: header.index(name) for name in header}
    message, pid, event = where[MESSAGE], where.get("pid"), where.get("event_type")
    dev_id = where.get("Device_id")
    dev_start, dev_end = where.get(DEVICE_START), where.get(DEVICE_END)
    rows: list[tuple] = []
    skipped = 0
    for number, row in enumerate(reader, start=1):
        if not row:
            continue
        if len(row) != len(header):
            skipped += 1
            continue
        try:
            host = (_number(row[start_col[0]]) * scale, _number(row[end_col[0]]) * scale)
            device = ((_number(row[dev_start]), _number(row[dev_end]))
                      if dev_start is not None and dev_end is not None else (math.nan, math.nan))
            process = int(_number(row[pid])) if pid is not None and row[pid].strip() not in _NA \
                else -1
        except ValueError:
            raise ContractError(f"{path}: row {number}: a time or pid is not a number "
                                f"({clip(','.join(row), 160)})") from None
        kind = row[event].strip() if event is not None else ""
        times, on_device = (device, True) if not math.isnan(device[0]) else (host, False)
        if math.isnan(times[0]) or math.isnan(times[1]):
            continue
        if kind and kind not in _RANGE_EVENTS and times[1] <= times[0]:
            continue  # an instant mark
        device_id = row[dev_id].strip() if dev_id is not None else ""
        rows.append((process, int(device_id) if device_id.isdigit() else -1, times[0],
                     times[1], on_device, row[message]))
    table = MarkerTable(
        np.full(len(rows), source, np.int32), np.array([r[0] for r in rows], np.int64),
        np.array([r[1] for r in rows], np.int32), np.array([r[2] for r in rows], np.float64),
        np.array([r[3] for r in rows], np.float64), np.array([r[4] for r in rows], bool),
        [r[5] for r in rows], [path])
    if skipped:
        table.notes.append(f"{path}: {skipped} row(s) with another field count than the "
                           f"header were skipped")
    return table
