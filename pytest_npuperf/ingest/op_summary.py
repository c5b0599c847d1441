"""Profiler output of a run: where its kernel tables and marker files are, and the kernels.

Layouts (docs/format.md §6, msprof's docs/*/user_guide/msprof_parsing_instruct.md, torch_npu's
profiler):
- msprof: `<output>/**/PROF_*/mindstudio_profiler_output/op_summary_<stamp>.csv` and
  `msprof_tx_<stamp>.csv` (written by msprof's export; a PROF directory without them has not
  been exported yet: `msprof --export=on --output=<PROF dir>`). Older CANN kept per-device
  summaries in `PROF_*/device_<id>/summary/op_summary_*.csv` (no `Device_id` column: the
  directory names the device) and markers in `PROF_*/host/summary/msprof_tx*.csv`. Large
  summaries are split into `op_summary_slice_<n>_<stamp>.csv`; a directory exported twice
  holds two stamps, of which the newest is read.
- torch_npu: `<dir>/<worker>_<pid>_<time>_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details*.csv`
  (the op summary under torch_npu's column names: its profiler's _kernel_view_parser.py maps
  `OP Type` -> `Type`, `Task Start Time(us)` -> `Start Time(us)`, `Task Duration(us)` ->
  `Duration(us)`, so times share msprof's base) and the markers of the same run in
  `<..._ascend_pt>/PROF_*/mindstudio_profiler_output/msprof_tx_*.csv`, which torch_npu keeps
  only with `data_simplification=False` (its _profiling_parser.simplify_data deletes the
  directory otherwise).
- loose files: a directory (or one file) holding `*op_summary*.csv` / `*kernel_details*.csv`
  and `*msprof_tx*.csv` directly.

Kernel tables are read in chunks into arrays: kernel type codes, device, start, duration and
the 25 counters of docs/format.md §2 (NaN where a file has no such column), plus, on request, a
code for each distinct identity (shapes, dtypes, formats) with the identity cells.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..db.columns import (
    COUNTERS,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OUTPUT_DTYPES,
    OUTPUT_SHAPES,
)
from ..db.csvfile import CsvLayout, scan_csv
from ..db.database import walk_files
from ..db.errors import CellError, ContractError, NpuperfError, clip
from ..db.layout import normalize_kernel_type
from ..db.table import read_header
from .aggregate import _factorize_rows
from .kernel_details import (
    DEFAULT_CHUNK_ROWS,
    NA_VALUES,
    _bad_number,
    check_column_count,
    csv_read_errors,
    existing_path,
)
from .msprof_tx import MarkerTable, read_marker_file

OUTPUT_DIR = "mindstudio_profiler_output"
TORCH_NPU_OUTPUT = "ASCEND_PROFILER_OUTPUT"
ASCEND_PT_SUFFIX = "_ascend_pt"
# Aliases: msprof's op_summary name first, torch_npu's kernel_details name second.
TYPE_COLUMNS = ("OP Type", "Type")
START_COLUMNS = ("Task Start Time(us)", "Start Time(us)", "Task Start Time")
DURATION_COLUMNS = ("Task Duration(us)", "Duration(us)")
DEVICE_COLUMN = "Device_id"
IDENTITY_COLUMNS = (INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, OUTPUT_SHAPES, OUTPUT_DTYPES)
# One launch exported twice (seen in real kernel tables) has all of these equal.
LAUNCH_KEY = ("Stream ID", "Task ID", "Context ID")
_NO_TYPE = frozenset({"", "N/A", "NA", "NULL", "NONE", "UNDEFINED"})
_STAMPED = re.compile(r"^(?P<base>.*?)(?:_slice_\d+)?_(?P<stamp>\d{14})\.csv$")
_DEVICE_DIR = re.compile(r"^device_(\d+)$")
# torch_npu names its run directory `<worker>_<pid>_<time>_ascend_pt`; this project's worker
# names are `npuperf_dev<index>`.
ASCEND_PT_WORKER = re.compile(r"^npuperf_dev(?P<device>\d+)_(?P<pid>\d+)_\d+_ascend_pt$")


@dataclass
class ProfileSource:
    """One run directory: a PROF_* directory, a torch_npu run, or loose files."""

    root: Path
    kind: str  # "msprof", "torch_npu" or "files"
    kernel_files: list[tuple[Path, int]] = field(default_factory=list)  # (file, device or -1)
    marker_files: list[Path] = field(default_factory=list)
    ignored: list[Path] = field(default_factory=list)  # older exports of the same directory

    @property
    def exported(self) -> bool:
        return bool(self.kernel_files)


def _newest(files: list[Path]) -> tuple[list[Path], list[Path]]:
    """Of stamped exports of one summary, the newest stamp's files (slices included)."""
    stamps: dict[str, list[Path]] = {}
    unstamped = []
    for path in files:
        match = _STAMPED.match(path.name)
        if match:
            stamps.setdefault(match.group("stamp"), []).append(path)
        else:
            unstamped.append(path)
    if not stamps:
        return sorted(unstamped), []
    newest = max(stamps)
    old = [p for s, paths in stamps.items() if s != newest for p in paths]
    return sorted(stamps[newest]) + sorted(unstamped), sorted(old)


def _listing(directory: Path, pattern: str) -> list[Path]:
    return sorted(p for p in directory.glob(pattern) if not p.is_dir()) if directory.is_dir() else []


def _prof_source(root: Path) -> ProfileSource:
    source = ProfileSource(root, "msprof")
    output = root / OUTPUT_DIR
    kernels, old = _newest(_listing(output, "op_summary_*.csv"))
    if kernels:
        source.kernel_files = [(p, -1) for p in kernels]
        source.ignored += old
    else:  # older CANN: per-device summaries
        for device_dir in sorted(root.glob("device_*")):
            match = _DEVICE_DIR.match(device_dir.name)
            if match:
                files, old = _newest(_listing(device_dir / "summary", "op_summary_*.csv"))
                source.kernel_files += [(p, int(match.group(1))) for p in files]
                source.ignored += old
    markers, old = _newest(_listing(output, "msprof_tx_*.csv"))
    if not markers:
        markers, old = _newest(_listing(root / "host" / "summary", "msprof_tx*.csv"))
    source.marker_files, source.ignored = markers, source.ignored + old
    return source


def _ascend_pt_source(root: Path) -> ProfileSource:
    source = ProfileSource(root, "torch_npu")
    match = ASCEND_PT_WORKER.match(root.name)
    device = int(match.group("device")) if match else -1
    kernels = _listing(root / TORCH_NPU_OUTPUT, "kernel_details*.csv")
    source.kernel_files = [(p, device) for p in kernels]
    for prof in sorted(root.glob("PROF_*")):
        markers, old = _newest(_listing(prof / OUTPUT_DIR, "msprof_tx_*.csv"))
        source.marker_files += markers
        source.ignored += old
    return source


def find_sources(path: str | Path) -> list[ProfileSource]:
    """Every run directory below `path` (or `path` itself), in path order."""
    path = existing_path(path)
    if not path.is_file() and not path.is_dir():
        raise NpuperfError(f"{path}: not a regular file (a FIFO or device?); give profiler "
                           f"output: a directory or a summary file")
    if path.is_file():
        source = ProfileSource(path.parent, "files")
        if "msprof_tx" in path.name:
            source.marker_files = [path]
        else:
            source.kernel_files = [(path, -1)]
        return [source]
    sources = [(_ascend_pt_source(r) if r.name.endswith(ASCEND_PT_SUFFIX) else _prof_source(r))
               for r in _run_roots(path)]
    if not sources:  # loose summary files
        files = walk_files(path, lambda parts: parts[-1].endswith(".csv"))
        source = ProfileSource(path, "files")
        kernels, old = _newest([p for p in files if "op_summary" in p.name
                                or "kernel_details" in p.name])
        source.kernel_files = [(p, -1) for p in kernels]
        source.marker_files, ignored = _newest([p for p in files if "msprof_tx" in p.name])
        source.ignored = old + ignored
        if source.kernel_files or source.marker_files:
            sources.append(source)
    if not sources:
        raise NpuperfError(f"{path}: no profiler output found below this directory (expected "
                           f"PROF_*/ from msprof, *_ascend_pt/ from torch_npu, or "
                           f"op_summary_*.csv / kernel_details*.csv files)")
    return sources


def _run_roots(path: Path) -> list[Path]:
    """PROF_* and *_ascend_pt directories at or below `path`, not looking inside one (a
    torch_npu run holds a PROF_* of its own). Hidden directories are not entered; os.walk
    does not follow symbolic links."""
    roots: list[Path] = []
    problems: list[OSError] = []
    for directory, dirs, _files in os.walk(path, onerror=problems.append):
        here = Path(directory)
        if here.name.endswith(ASCEND_PT_SUFFIX) or here.name.startswith("PROF_"):
            roots.append(here)
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
    if problems:
        raise NpuperfError(f"{problems[0].filename}: cannot read this directory: "
                           f"{problems[0].strerror or problems[0]}")
    return sorted(roots)


@dataclass
class KernelTable:
    """Kernel launches of every kernel table of a run, as arrays (one entry per launch)."""

    types: list[str]  # kernel type names (normalised), indexed by type_code
    type_code: np.ndarray  # int32
    source: np.ndarray  # int32: index of the ProfileSource
    device: np.ndarray  # int32, -1 when neither the file nor its directory says
    start: np.ndarray  # float64 us
    duration: np.ndarray  # float64 us
    counters: np.ndarray  # float64 (n, len(COUNTERS)), column-major, NaN where absent
    identity: np.ndarray | None = None  # int32 codes into `identities`
    identities: list[tuple[str, ...]] = field(default_factory=list)  # IDENTITY_COLUMNS cells
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: int = 0  # records without a kernel type or a valid time

    def __len__(self) -> int:
        return len(self.start)

    def type_index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.types)}


class CounterColumns:
    """A chunk's counters, one array per counter of COUNTERS (None: the file has no such
    column), as the parser gave them: copied once, into the table's matrix or the child's
    files, not first into a matrix of the chunk (10^6 rows: 200 MB written twice)."""

    __slots__ = ("columns", "rows")

    def __init__(self, columns: list[np.ndarray | None], rows: int) -> None:
        self.columns, self.rows = columns, rows

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, keep: np.ndarray) -> CounterColumns:
        """The rows where the mask `keep` holds."""
        return CounterColumns([None if c is None else c[keep] for c in self.columns],
                              int(np.count_nonzero(keep)))

    def column(self, index: int) -> np.ndarray:
        """Counter `index` of every row, NaN where the file has no such column."""
        column = self.columns[index]
        return np.full(self.rows, np.nan) if column is None else column


def _pick(header: list[str], names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in header), None)


def _intern(index: dict, items: list, key) -> int:
    """The code of `key` in `items`, appended on first sight."""
    code = index.get(key)
    if code is None:
        code = index[key] = len(items)
        items.append(key)
    return code


class _KernelReader:
    def __init__(self, with_identity: bool, chunk_rows: int) -> None:
        self.with_identity = with_identity
        self.chunk_rows = chunk_rows
        self.types: list[str] = []
        self._type_of: dict[str, int] = {}
        self.identities: list[tuple[str, ...]] = []
        self._identity_of: dict[tuple[str, ...], int] = {}
        self.parts: list[dict[str, np.ndarray | CounterColumns]] = []
        self.notes: list[str] = []
        self.files: list[Path] = []
        self.skipped = 0

    def _type_codes(self, values: pd.Series) -> np.ndarray:
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
        lookup = np.empty(len(uniques), np.int32)
        for i, raw in enumerate(uniques):
            text = str(raw).strip()
            if text.upper() in _NO_TYPE:
                lookup[i] = -1
                continue
            lookup[i] = _intern(self._type_of, self.types, normalize_kernel_type(text))
        return lookup[codes]

    def _identity_codes(self, chunk: pd.DataFrame, columns: list[str]) -> np.ndarray:
        codes, first = _factorize_rows(chunk, columns)
        lookup = np.empty(len(first), np.int32)
        values = [chunk[c].to_numpy() for c in columns]
        for code, row in enumerate(first):
            cells = tuple(str(v[row]) for v in values)
            lookup[code] = _intern(self._identity_of, self.identities, cells)
        return lookup[codes]

    def add(self, path: Path, source: int, device_hint: int) -> None:
        names = read_header(path)
        check_column_count(path, names)
        header = [h.strip() for h in names]
        raw = {h.strip(): h for h in names}
        type_col, start_col = _pick(header, TYPE_COLUMNS), _pick(header, START_COLUMNS)
        duration_col = _pick(header, DURATION_COLUMNS)
        missing = [names[0] for names, col in ((TYPE_COLUMNS, type_col), (START_COLUMNS, start_col),
                                               (DURATION_COLUMNS, duration_col)) if col is None]
        if missing:
            if type_col is not None and INPUT_SHAPES not in header and duration_col is not None:
                self.notes.append(f"{path}: level-0 table without start times: skipped")
                return
            raise ContractError(f"{path}: not an op_summary / kernel_details table: missing "
                                f"column(s) {', '.join(missing)}")
        identity = [c for c in IDENTITY_COLUMNS if c in header] if self.with_identity else []
        counters = [c for c in COUNTERS if c in header]
        launch = [c for c in LAUNCH_KEY if c in header]
        device_col = DEVICE_COLUMN if DEVICE_COLUMN in header else None
        text_cols = [type_col, *identity]
        numeric = [start_col, duration_col, *counters, *launch,
                   *([device_col] if device_col else [])]
        layout = self._layout(path)
        wanted = [raw[c] for c in dict.fromkeys([*text_cols, *numeric])]
        dtypes = {raw[c]: str for c in text_cols}
        dtypes.update({raw[c]: "float64" for c in numeric})
        matrix_index = [COUNTERS.index(c) for c in counters]
        with csv_read_errors(path, lambda: self._raise_bad_number(path, raw, numeric, layout)):
            reader = pd.read_csv(path, usecols=wanted, dtype=dtypes,
                                 encoding="utf-8-sig", chunksize=self.chunk_rows,
                                 keep_default_na=False, engine="c", index_col=False,
                                 na_values={raw[c]: NA_VALUES for c in numeric},
                                 skiprows=layout.skip or None, on_bad_lines="error")
            for chunk in reader:
                chunk.columns = [c.strip() for c in chunk.columns]
                self._chunk(chunk, source, device_hint, device_col, type_col, start_col,
                            duration_col, counters, matrix_index, identity, launch)
        self.files.append(path)

    def _layout(self, path: Path) -> CsvLayout:
        """The file's records by field count (the bytes checked first: no NUL byte, no absurd
        line). A record with a field fewer than the header cannot be read: which field is
        missing is unknown, and pandas would put every later value in the column before it
        (`aic_mac_time` getting the ratio): such rows are skipped and said. One with more
        fields is an error."""
        layout = scan_csv(path, keep_skip=True)
        if layout.long_count:
            raise ContractError(f"{path}: {layout.describe('long')}: not an msprof export as "
                                f"written (edited or concatenated?)")
        if layout.short_count:
            self.skipped += layout.short_count
            self.notes.append(f"{path}: {layout.describe('short')}: skipped, their values "
                              f"cannot be placed in their columns (truncated or edited export)")
        return layout

    def _chunk(self, chunk: pd.DataFrame, source: int, device_hint: int, device_col: str | None,
               type_col: str, start_col: str, duration_col: str, counters: list[str],
               matrix_index: list[int], identity: list[str], launch: list[str]) -> None:
        n = len(chunk)
        type_code = self._type_codes(chunk[type_col])
        start = chunk[start_col].to_numpy(np.float64)
        duration = chunk[duration_col].to_numpy(np.float64)
        if device_col is not None:
            device = np.nan_to_num(chunk[device_col].to_numpy(np.float64), nan=-1.0)
            device = device.astype(np.int32)
        else:
            device = np.full(n, device_hint, np.int32)
        by_counter: list[np.ndarray | None] = [None] * len(COUNTERS)
        for column, index in zip(counters, matrix_index):
            by_counter[index] = chunk[column].to_numpy(np.float64)
        keep = (type_code >= 0) & np.isfinite(start) & np.isfinite(duration) & (duration > 0)
        part = {"type_code": type_code, "start": start, "duration": duration, "device": device,
                "counters": CounterColumns(by_counter, n), "source": np.full(n, source, np.int32)}
        if self.with_identity:
            part["identity"] = (self._identity_codes(chunk, identity) if identity
                                else np.zeros(n, np.int32))
            if not identity and not self.identities:
                self.identities.append(("",) * len(IDENTITY_COLUMNS))
        if launch:
            # With shapes read, a record of another signature at the same launch is kept
            # (as the parse aggregation does); without them, it counts as a repeat.
            key = chunk[launch].to_numpy(np.float64)
            if self.with_identity:
                key = np.column_stack([key, part["identity"]])
            keep &= ~_repeated_launches(key, start, type_code)
        kept = int(keep.sum())
        self.skipped += n - kept
        self.parts.append(part if kept == n else {k: v[keep] for k, v in part.items()})

    @staticmethod
    def _raise_bad_number(path: Path, raw: dict[str, str], numeric: list[str],
                          layout: CsvLayout) -> None:
        reader = pd.read_csv(path, usecols=lambda c: c in {raw[n] for n in numeric}, dtype=str,
                             encoding="utf-8-sig", chunksize=DEFAULT_CHUNK_ROWS,
                             keep_default_na=False, index_col=False,
                             skiprows=layout.skip or None)
        offset = 0
        for chunk in reader:
            chunk.columns = [c.strip() for c in chunk.columns]
            for column in numeric:
                position = _bad_number(chunk[column])
                if position is not None:
                    row = layout.data_row(offset + position + 1)
                    raise CellError(f"cannot read {clip(str(chunk[column].iloc[position]).strip())}"
                                    f" as a number", column=column, row=row, path=str(path))
            offset += len(chunk)

    def table(self) -> KernelTable:
        def joined(name: str, dtype, width: int | None = None) -> np.ndarray:
            """The parts' arrays end to end, each part's released once copied (the counter
            matrix of 10^6 rows must not exist twice); a matrix column-major, as it is read
            (a counter's mean over the cases' kernels)."""
            total = sum(len(p[name]) for p in self.parts)
            out = np.empty((total, width) if width else total, dtype, order="F")
            at = 0
            for part in self.parts:
                size = len(part[name])
                value = part.pop(name)
                if isinstance(value, CounterColumns):
                    for index, column in enumerate(value.columns):
                        out[at:at + size, index] = np.nan if column is None else column
                else:
                    out[at:at + size] = value
                at += size
            return out

        return KernelTable(
            types=self.types, type_code=joined("type_code", np.int32),
            source=joined("source", np.int32), device=joined("device", np.int32),
            start=joined("start", np.float64), duration=joined("duration", np.float64),
            counters=joined("counters", np.float64, len(COUNTERS)),
            identity=joined("identity", np.int32) if self.with_identity else None,
            identities=self.identities, files=self.files, notes=self.notes,
            skipped=self.skipped)


def _repeated_launches(key: np.ndarray, start: np.ndarray, type_code: np.ndarray) -> np.ndarray:
    """Records that repeat an earlier one's launch (same start, type, stream, task, context):
    only rows sharing a start time with another are compared (rare; sorting all is not)."""
    out = np.zeros(len(start), bool)
    if (start[1:] > start[:-1]).all():  # in launch order, as exported: no start twice
        return out
    order = np.argsort(start, kind="stable")
    ordered = start[order]
    same = np.flatnonzero(ordered[1:] == ordered[:-1])
    if not len(same):
        return out
    candidates = np.unique(np.concatenate([order[same], order[same + 1]]))
    rows = np.column_stack([start[candidates], type_code[candidates], key[candidates]])
    frame = pd.DataFrame(rows)
    out[candidates[frame.duplicated().to_numpy()]] = True
    return out


def read_kernels(sources: list[ProfileSource], *, with_identity: bool = False,
                 chunk_rows: int = DEFAULT_CHUNK_ROWS) -> KernelTable:
    """The kernel launches of every source's tables."""
    reader = _KernelReader(with_identity, chunk_rows)
    for index, source in enumerate(sources):
        for path, device in source.kernel_files:
            reader.add(path, index, device)
    return reader.table()


def read_markers(sources: list[ProfileSource]) -> MarkerTable:
    tables = [read_marker_file(path, index) for index, source in enumerate(sources)
              for path in source.marker_files]
    return MarkerTable.concat(tables)
