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

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..db.errors import ContractError, clip, os_error
from ..db.table import read_header

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


def _column(header: list[str], names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in header), None)


def _numbers(frame: pd.DataFrame, column: str | None, path: Path) -> np.ndarray:
    """A column as float64 (NaN for N/A and empty); anything else is an error naming the row."""
    if column is None:
        return np.full(len(frame), math.nan)
    try:  # the usual column, every cell a plain number: no strip, no per-cell check
        values = pd.to_numeric(frame[column]).to_numpy(np.float64)
        if not np.isnan(values).any():
            return values
    except (TypeError, ValueError):
        pass
    text = frame[column].str.strip()
    values = pd.to_numeric(text, errors="coerce")
    bad = values.isna() & ~text.isin(_NA)
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise ContractError(f"{path}: row {row + 1}: {column} {clip(text.iloc[row])} is not a "
                            f"number")
    return values.to_numpy(np.float64)


def read_marker_file(path: Path, source: int = 0) -> MarkerTable:
    """The ranges of one marker summary. A malformed number is an error naming its row."""
    try:
        header = [h.strip() for h in read_header(path)]
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8-sig",
                            engine="c", index_col=False, on_bad_lines="skip")
        with open(path, "rb") as handle:
            lines = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (offset {exc.start})") from None
    except pd.errors.ParserError as exc:
        raise ContractError(f"{path}: malformed CSV: {clip(str(exc), 160)}") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    frame.columns = header[:len(frame.columns)]
    start_col, end_col = _column(header, _HOST_START), _column(header, _HOST_END)
    if MESSAGE not in header or start_col is None or end_col is None:
        raise ContractError(f"{path}: not an msprof_tx summary (needs a message column and "
                            f"Start_time/End_time columns; header: {clip(','.join(header))})")
    scale = 1.0 if start_col.endswith("(us)") else 1e-3  # ns (6.x) -> us
    host_start = _numbers(frame, start_col, path) * scale
    host_end = _numbers(frame, end_col, path) * scale
    dev_start = _numbers(frame, DEVICE_START if DEVICE_START in header else None, path)
    dev_end = _numbers(frame, DEVICE_END if DEVICE_END in header else None, path)
    on_device = ~np.isnan(dev_start) & ~np.isnan(dev_end)
    start = np.where(on_device, dev_start, host_start)
    end = np.where(on_device, dev_end, host_end)
    pid = np.nan_to_num(_numbers(frame, "pid" if "pid" in header else None, path), nan=-1)
    device = (pd.to_numeric(frame["Device_id"].str.strip(), errors="coerce").fillna(-1)
              .to_numpy() if "Device_id" in header else np.full(len(frame), -1.0))
    event = (frame["event_type"].str.strip().to_numpy() if "event_type" in header
             else np.full(len(frame), "", dtype=object))
    ranged = np.isin(event, list(_RANGE_EVENTS)) | (event == "") | (end > start)
    keep = ~np.isnan(start) & ~np.isnan(end) & ranged
    table = MarkerTable(
        np.full(int(keep.sum()), source, np.int32), pid[keep].astype(np.int64),
        device[keep].astype(np.int32), start[keep], end[keep], on_device[keep],
        frame[MESSAGE].to_numpy()[keep].tolist(), [path])
    skipped = max(lines - 1 - len(frame), 0)
    if skipped:
        table.notes.append(f"{path}: {skipped} row(s) with another field count than the "
                           f"header were skipped")
    return table
