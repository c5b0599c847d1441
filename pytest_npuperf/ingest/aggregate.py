"""Aggregating kernel tables per (kernel type, signature).

The expensive part of a million-row table is the per-row work, so it stays vectorised:
the distinct identity cells of a chunk are factorised, their signature is computed once per
distinct combination (a few hundred in a real profile), and rows carry only an integer group
id, a duration and their counters. Statistics are computed once, at the end, over all rows
of all files, so medians are exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..db.columns import (
    ACCELERATOR_CORE,
    FIA_KERNEL,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OP_STATE,
    OUTPUT_DTYPES,
    OUTPUT_FORMATS,
    OUTPUT_SHAPES,
    RAW_DURATION,
)
from ..db.errors import CellError, ContractError
from ..db.layout import normalize_kernel_type
from ..db.shapes import (
    NULL_FORMAT,
    UNDEFINED_DTYPE,
    dtype_cell,
    format_cell,
    format_shapes,
    normalize_dtype,
    normalize_format,
    parse_shapes,
    split_list,
    strip_cell,
)
from ..db.signature import Signature, signature
from ..measure.groupstats import GroupStats
from ..measure.stats import StdConvention
from .kernel_details import (
    DEFAULT_CHUNK_ROWS,
    LAUNCH_KEY,
    TYPE,
    KernelDetailsReader,
    KernelTableHeader,
    read_kernel_header,
)

KEY_COLUMNS = (TYPE, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, OUTPUT_SHAPES, OUTPUT_DTYPES)
MAX_DURATION_US = 1e12
"""Longer than 11 days: not a kernel launch (and its statistics would overflow to inf)."""
MAX_IDENTITY_CHARS = 1 << 20
"""Identity cells of one row, as written. A real row has a few hundred characters (31 slots at
most); a hostile one (a million empty slots, each padded with `DT_UNDEFINED` and `NULL`) would
become a line longer than the database's readers accept, and the table unreadable."""

# Skip reasons, as negative group ids.
SKIP_NO_TYPE = "no kernel type (N/A)"
SKIP_HCCL = "HCCL / communication"
SKIP_NO_SHAPE = "no shapes (N/A)"
SKIP_BAD_DURATION = "invalid duration"
SKIP_DUPLICATE = "duplicate launch record (same stream, task, start time and signature)"
SKIP_MISALIGNED = "dtype or format list with more entries than shape slots"
SKIP_SHORT = "fewer fields than the header"
SKIP_HUGE_DURATION = f"duration above {MAX_DURATION_US:.0e} us"
SKIP_OVERSIZED = (f"identity cells longer than {MAX_IDENTITY_CHARS >> 20} MiB once written "
                  f"(an absurd slot count)")
_SKIP_CODES = {SKIP_NO_TYPE: -1, SKIP_HCCL: -2, SKIP_NO_SHAPE: -3, SKIP_MISALIGNED: -5,
               SKIP_OVERSIZED: -6}
_NO_TYPE_TOKENS = frozenset({"", "N/A", "NA", "NULL", "NONE", "UNDEFINED"})


@dataclass
class ProfiledKernel:
    """One aggregated (kernel type, signature) group of profiler rows."""

    kernel_type: str
    signature: Signature
    identity: dict[str, str]
    stats: GroupStats  # of Duration(us), with the population std (the Profiling Std)
    counters: dict[str, float] = field(default_factory=dict)  # mean of each, where present
    sources: list[str] = field(default_factory=list)
    runtime: dict[str, str] = field(default_factory=dict)


@dataclass
class AggregateResult:
    kernels: list[ProfiledKernel]
    files: list[Path]
    level0_files: list[Path]
    rows_read: int
    skipped: Counter
    notes: list[str] = field(default_factory=list)  # per file: rows skipped or cut, with lines

    @property
    def rows_used(self) -> int:
        return sum(k.stats.count for k in self.kernels)


_LISTS = ((INPUT_SHAPES, INPUT_DTYPES, UNDEFINED_DTYPE), (INPUT_SHAPES, INPUT_FORMATS, NULL_FORMAT),
          (OUTPUT_SHAPES, OUTPUT_DTYPES, UNDEFINED_DTYPE),
          (OUTPUT_SHAPES, OUTPUT_FORMATS, NULL_FORMAT))


def _aligned(tokens: tuple[str, ...], slots: int, filler: str) -> tuple[str, ...] | None:
    """A dtype/format list with one entry per shape slot: missing trailing entries are the
    absent slots' filler (as signatures read them); extra entries may only be empty ones.
    None when real entries would have to be dropped."""
    if tokens == ("",):
        tokens = ()  # an empty cell: nothing listed
    if len(tokens) <= slots:
        return tokens + (filler,) * (slots - len(tokens)) if slots else tokens
    extra = tokens[slots:]
    if all(normalize_dtype(t) == UNDEFINED_DTYPE and normalize_format(t) == NULL_FORMAT
           for t in extra):
        return tokens[:slots]
    return None


_DTYPE_COLUMNS = (INPUT_DTYPES, OUTPUT_DTYPES)


def _identity_cells(row: dict[str, str]) -> dict[str, str]:
    """Cells of a new database row: shapes in canonical form (a shape the profiler did not
    record is written as an empty cell token, never an empty cell), dtypes and formats in the
    spelling of current profiler output (older exports' `DT_FLOAT`, `FORMAT_ND` become
    `FLOAT`, `ND`), lists aligned with the shape slots (what validate checks)."""
    cells = {}
    for column in (OP_STATE, ACCELERATOR_CORE):
        cells[column] = row.get(column, "").strip()
    # A shape the profiler did not record (`N/A`) is written as one empty slot: pandas reads
    # `N/A` as NaN, which the simulator's shape parser fails on.
    shapes = {c: parse_shapes(row[c]) or (None,) for c in (INPUT_SHAPES, OUTPUT_SHAPES)}
    for column, slots in shapes.items():
        cells[column] = format_shapes(slots)
    for shape_column, column, filler in _LISTS:
        tokens = split_list(row.get(column, ""))
        if column == OUTPUT_FORMATS and column not in row:
            cells[column] = ""
            continue
        aligned = _aligned(tokens, len(shapes[shape_column]), filler) or tokens
        cells[column] = dtype_cell(aligned) if column in _DTYPE_COLUMNS else format_cell(aligned)
    return cells


def _misaligned(cells: dict[str, str]) -> bool:
    for shape_column, column, filler in _LISTS:
        if column in cells and _aligned(split_list(cells[column]),
                                        len(parse_shapes(cells[shape_column])), filler) is None:
            return True
    return False


def _skip_reason(kernel_type: str, core: str, in_shapes: str) -> str | None:
    if kernel_type.strip().upper() in _NO_TYPE_TOKENS:
        return SKIP_NO_TYPE
    if core.strip().upper() == "HCCL" or kernel_type.lower().startswith("hcom_"):
        return SKIP_HCCL
    if not strip_cell(in_shapes) or parse_shapes(in_shapes) == ():
        return SKIP_NO_SHAPE
    return None


def _factorize_rows(chunk: pd.DataFrame, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """A dense code per distinct combination of `columns`, and the first row of each code."""
    codes: np.ndarray | None = None
    for column in columns:
        col_codes, uniques = pd.factorize(chunk[column], use_na_sentinel=False)
        col_codes = col_codes.astype(np.int64)
        codes = col_codes if codes is None else codes * len(uniques) + col_codes
        codes, _ = pd.factorize(codes)
        codes = codes.astype(np.int64)
    assert codes is not None
    _, first = np.unique(codes, return_index=True)
    return codes, first


class KernelAggregator:
    def __init__(self, chunk_rows: int = DEFAULT_CHUNK_ROWS, *, strict: bool = False) -> None:
        self.chunk_rows = chunk_rows
        self.strict = strict
        self.notes: list[str] = []
        self._combo_gid: dict[tuple[str, ...], int] = {}
        self._group_of_sig: dict[tuple[str, Signature], int] = {}
        self._groups: list[tuple[str, Signature, dict[str, str]]] = []
        self._sources: list[set[str]] = []
        self._counter_names: list[str] = []
        self._counter_at: dict[str, int] = {}  # a table may have 10^5 columns: no list.index
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]] = []
        self.fia_rows: dict[Path, np.ndarray] = {}
        self.files: list[Path] = []
        self.level0_files: list[Path] = []
        self.rows_read = 0
        self.skipped: Counter = Counter()

    # -- per file ---------------------------------------------------------------------------
    def add_file(self, path: Path, on_rows: Callable[[int], None] | None = None,
                 source: str | None = None) -> KernelTableHeader:
        info = read_kernel_header(path)
        if info.level0:
            self.level0_files.append(path)
            return info
        self.files.append(path)
        source = source or path.parent.name
        counter_idx = [self._counter_index(c) for c in info.counters]
        gids, durations, counters, launch_keys = [], [], [], []
        reader = KernelDetailsReader(info, self.chunk_rows, strict=self.strict)
        for offset, chunk in reader:
            gid = self._group_ids(chunk, info, offset, reader)
            gids.append(gid)
            durations.append(chunk[RAW_DURATION].to_numpy(dtype=np.float64))
            counters.append(chunk[info.counters].to_numpy(dtype=np.float64)
                            if info.counters else np.empty((len(chunk), 0)))
            if info.launch_key:
                launch_keys.append(np.column_stack(
                    [gid.astype(np.float64), *(chunk[c].to_numpy(dtype=np.float64)
                                              for c in info.launch_key)]))
            self.rows_read += len(chunk)
            if on_rows:
                on_rows(len(chunk))
        layout = reader.check()
        if layout.short_count:
            self.skipped[SKIP_SHORT] += layout.short_count
            self.rows_read += layout.short_count
            self.notes.append(f"{path}: {layout.describe('short')}: skipped (truncated or "
                              f"older export; --strict makes this an error)")
        if layout.long_count:
            self.notes.append(f"{path}: {layout.describe('long')}: the extra trailing fields "
                              f"were ignored (--strict makes this an error)")
        if not sum(len(g) for g in gids):
            # A header without rows is a failed or truncated export, not an empty profile.
            if layout.short_count:
                raise ContractError(f"{path}: no complete data row: {layout.describe('short')}")
            raise ContractError(f"{path}: header only, no data rows (truncated or failed export?)")
        gid = np.concatenate(gids)
        duration = np.concatenate(durations)
        matrix = np.concatenate(counters)
        if launch_keys:
            gid = self._drop_repeated_launches(path, gid, np.concatenate(launch_keys))
        self._add_part(path, gid, duration, matrix, counter_idx, source)
        return info

    def _drop_repeated_launches(self, path: Path, gid: np.ndarray, keys: np.ndarray
                                ) -> np.ndarray:
        """Same stream, task, start time and (type, signature): one launch exported twice.
        A record without one of these (`N/A`) cannot be told from another launch: kept.
        (`keys`: the group id, then LAUNCH_KEY, then a Context ID that is often N/A.)"""
        known = np.isfinite(keys[:, 1:1 + len(LAUNCH_KEY)]).all(axis=1)
        dup = np.zeros(len(gid), bool)
        dup[known] = pd.DataFrame(keys[known]).duplicated().to_numpy()
        dup &= gid >= 0
        self.skipped[SKIP_DUPLICATE] += int(dup.sum())
        unknown = int((~known & (gid >= 0)).sum())
        if unknown:
            self.notes.append(f"{path}: {unknown:,} row(s) without a stream, task or start time: "
                              f"kept, not checked for a second export of the same launch")
        return np.where(dup, -4, gid)

    def add_rows(self, path: Path, rows: pd.DataFrame, source: str) -> None:
        """Rows that are not a kernel table's (a trace's calls): the key columns, `Duration(us)`."""
        self.files.append(path)
        self.rows_read += len(rows)
        if not len(rows):
            return
        gid = self._group_ids(rows, KernelTableHeader(path, list(rows.columns)), 0, None)
        self._add_part(path, gid, rows[RAW_DURATION].to_numpy(dtype=np.float64),
                       np.empty((len(rows), 0)), [], source)

    def _add_part(self, path: Path, gid: np.ndarray, duration: np.ndarray, matrix: np.ndarray,
                  counter_idx: list[int], source: str) -> None:
        for reason, code in _SKIP_CODES.items():
            self.skipped[reason] += int((gid == code).sum())
        fia = [g for g, (kernel_type, _, _) in enumerate(self._groups) if kernel_type == FIA_KERNEL]
        if fia:
            self.fia_rows[path] = gid[np.isin(gid, fia)]
        usable = gid >= 0
        finite = usable & np.isfinite(duration) & (duration > 0)
        valid = finite & (duration <= MAX_DURATION_US)
        self.skipped[SKIP_BAD_DURATION] += int((usable & ~finite).sum())
        self.skipped[SKIP_HUGE_DURATION] += int((finite & ~valid).sum())
        for g in np.unique(gid[valid]):
            self._sources[g].add(source)
        self._parts.append((gid[valid], duration[valid], matrix[valid], counter_idx))

    def _counter_index(self, name: str) -> int:
        index = self._counter_at.get(name)
        if index is None:
            index = self._counter_at[name] = len(self._counter_names)
            self._counter_names.append(name)
        return index

    def _group_ids(self, chunk: pd.DataFrame, info: KernelTableHeader, offset: int,
                   reader: KernelDetailsReader | None) -> np.ndarray:
        codes, first = _factorize_rows(chunk, list(KEY_COLUMNS))
        lookup = np.empty(len(first), dtype=np.int64)
        key_values = [chunk[c].to_numpy() for c in KEY_COLUMNS]
        extra = [c for c in (OP_STATE, ACCELERATOR_CORE, OUTPUT_FORMATS) if c in chunk.columns]
        for code, row in enumerate(first):
            combo = tuple(str(values[row]) for values in key_values)
            gid = self._combo_gid.get(combo)
            if gid is None:
                cells = dict(zip(KEY_COLUMNS, combo))
                cells.update({c: str(chunk[c].iat[row]) for c in extra})
                try:
                    gid = self._new_combo(combo, cells)
                except CellError as exc:
                    line = reader.row(int(row), offset) if reader is not None else int(row) + 1
                    raise exc.located(path=str(info.path), row=line) from None
            lookup[code] = gid
        return lookup[codes]

    def _new_combo(self, combo: tuple[str, ...], cells: dict[str, str]) -> int:
        raw_type = cells[TYPE]
        # Shape cells are the only ones that can fail to parse. Each is parsed on its own
        # first so that the error names the right column (the signature cannot tell which).
        try:
            reason = _skip_reason(raw_type, cells.get(ACCELERATOR_CORE, ""), cells[INPUT_SHAPES])
        except CellError as exc:
            raise exc.located(column=INPUT_SHAPES) from None
        if reason is None:
            try:
                parse_shapes(cells[OUTPUT_SHAPES])
            except CellError as exc:
                raise exc.located(column=OUTPUT_SHAPES) from None
            if _misaligned(cells):
                reason = SKIP_MISALIGNED
        if reason is not None:
            gid = _SKIP_CODES[reason]
        else:
            kernel_type = normalize_kernel_type(raw_type)
            sig = signature(kernel_type, *(cells[c] for c in KEY_COLUMNS[1:]))
            key = (kernel_type, sig)
            gid = self._group_of_sig.get(key)
            if gid is None:
                gid = self._new_group(key, _identity_cells(cells))
        self._combo_gid[combo] = gid
        return gid

    def _new_group(self, key: tuple[str, Signature], identity: dict[str, str]) -> int:
        if sum(map(len, identity.values())) > MAX_IDENTITY_CHARS:
            return _SKIP_CODES[SKIP_OVERSIZED]
        gid = self._group_of_sig[key] = len(self._groups)
        self._groups.append((*key, identity))
        self._sources.append(set())
        return gid

    # -- result -----------------------------------------------------------------------------
    def result(self) -> AggregateResult:
        kernels: list[ProfiledKernel] = []
        if self._parts:
            gid = np.concatenate([p[0] for p in self._parts])
            duration = np.concatenate([p[1] for p in self._parts])
            counters = np.full((len(gid), len(self._counter_names)), np.nan)
            start = 0
            for _, part_dur, matrix, idx in self._parts:
                stop = start + len(part_dur)
                if idx:
                    counters[start:stop, idx] = matrix
                start = stop
            frame = pd.DataFrame({"g": gid, "d": duration})
            stats = frame.groupby("g", sort=True)["d"].agg(
                ["count", "mean", "median", "min", "max"])
            # Population std, as the reference parser wrote it; pandas' grouped variance
            # is a Welford update, stable for large offsets with small spread.
            stats["std"] = frame.groupby("g", sort=True)["d"].std(ddof=StdConvention.POPULATION)
            means = pd.DataFrame(counters, columns=self._counter_names).groupby(gid).mean() \
                if self._counter_names else None
            for g, row in stats.iterrows():
                kernel_type, sig, identity = self._groups[int(g)]
                counter_means = {}
                if means is not None:
                    counter_means = {name: float(v) for name, v in means.loc[g].items()
                                     if not np.isnan(v)}
                kernels.append(ProfiledKernel(
                    kernel_type=kernel_type, signature=sig, identity=dict(identity),
                    stats=GroupStats(std_convention=StdConvention.POPULATION,
                                     count=int(row["count"]), mean=float(row["mean"]),
                                     median=float(row["median"]), std=float(row["std"]),
                                     min=float(row["min"]), max=float(row["max"])),
                    counters=counter_means, sources=sorted(self._sources[int(g)])))
        return AggregateResult(kernels=kernels, files=list(self.files),
                               level0_files=list(self.level0_files), rows_read=self.rows_read,
                               skipped=self.skipped, notes=list(self.notes))

    def fia_rows_in_order(self) -> dict[Path, list[tuple[Signature, str]]]:
        """Per file, its FusedInferAttentionScore rows in launch order: (signature, Input Shapes)."""
        return {path: [(self._groups[g][1], self._groups[g][2][INPUT_SHAPES]) for g in gids.tolist()]
                for path, gids in self.fia_rows.items()}
