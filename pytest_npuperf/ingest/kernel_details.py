"""Reading torch_npu's `kernel_details*.csv` (docs/format.md §5), every variant, in chunks.

Variants handled: level 1 (full header), level 0 (no shapes: nothing to aggregate), CANN 7.x
headers without `OP State`/`HF32 Eligible` and with other counter sets, trailing TABs after
numbers, literal quotes around shapes, a UTF-8 BOM, `N/A` (HCCL) rows.

The bytes are checked before pandas sees them (`db.csvfile.scan_csv`: no NUL byte, no absurd
line, every record's field count). Rows with fewer fields than the header (seen in older CANN
exports) are skipped and counted with their lines, the rest is parsed; rows with more fields
are read with the extra trailing fields ignored, and counted. `strict` makes either an error.
A number that is neither empty, `N/A` nor a float is an error naming the file, row and column;
so is a header that names a column twice.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..db.columns import (
    ACCELERATOR_CORE,
    INPUT_DTYPES,
    INPUT_FORMATS,
    INPUT_SHAPES,
    OP_STATE,
    OUTPUT_DTYPES,
    OUTPUT_FORMATS,
    OUTPUT_SHAPES,
    RAW_DURATION,
)
from ..db.csvfile import CsvLayout, scan_csv
from ..db.database import walk_files
from ..db.errors import CellError, ContractError, NpuperfError, clip, os_error
from ..db.table import read_header

TYPE = "Type"
NAME = "Name"
# Columns that identify one kernel launch within a file. A second record with the same values
# and the same signature is the same launch exported twice (seen in real exports): counted once.
LAUNCH_KEY = ("Stream ID", "Task ID", "Start Time(us)")
# Mixed AIC/AIV tasks export one record per context under one task: part of the key.
CONTEXT_ID = "Context ID"
REQUIRED = (TYPE, RAW_DURATION, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, OUTPUT_SHAPES,
            OUTPUT_DTYPES)
OPTIONAL_TEXT = (OP_STATE, ACCELERATOR_CORE, OUTPUT_FORMATS)
# Columns of the kernel table that are neither identity nor hardware counters.
NON_COUNTER = frozenset({
    "Step Id", "Model ID", "Task ID", "Stream ID", NAME, TYPE, OP_STATE, ACCELERATOR_CORE,
    "Start Time(us)", RAW_DURATION, "Wait Time(us)", "Block Dim", "Mix Block Dim",
    "HF32 Eligible", INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS, OUTPUT_SHAPES, OUTPUT_DTYPES,
    OUTPUT_FORMATS, "Context ID", "Device_id", "Model Name", "Infer ID",
})
NA_VALUES = ["", "N/A", "NA", "n/a", "NULL", "null", "None", "-", "nan", "NaN"]
NA_VALUES += [f"{token}\t" for token in NA_VALUES]  # start times end with a TAB, N/A ones too
DEFAULT_CHUNK_ROWS = 200_000
MAX_TABLE_COLUMNS = 1024
"""Real profiler tables have 21 columns plus a few dozen counters. Each column costs pandas a
fixed overhead per chunk, and each counter becomes a database column: a header of 10^5
columns is refused rather than parsed for minutes into a database header no reader accepts."""


@dataclass
class KernelTableHeader:
    path: Path
    raw_columns: list[str]
    level0: bool = False
    counters: list[str] = field(default_factory=list)
    launch_key: tuple[str, ...] = ()

    @property
    def columns(self) -> list[str]:
        return [c.strip() for c in self.raw_columns]

    @property
    def text_columns(self) -> list[str]:
        wanted = [TYPE, *OPTIONAL_TEXT, INPUT_SHAPES, INPUT_DTYPES, INPUT_FORMATS,
                  OUTPUT_SHAPES, OUTPUT_DTYPES]
        present = set(self.columns)
        return [c for c in dict.fromkeys(wanted) if c in present]


def existing_path(path: str | Path) -> Path:
    """`path`, when it exists; else a one-line error saying why it cannot be read."""
    path = Path(path)
    try:
        path.stat()
    except FileNotFoundError:
        raise NpuperfError(f"{path}: no such file or directory") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    return path


def find_kernel_details(path: str | Path) -> list[Path]:
    """`path` itself, or every `kernel_details*.csv` below it (several ranks and runs)."""
    path = existing_path(path)
    if not path.is_dir():
        if not path.is_file():  # read twice (checked, then parsed): a pipe would not do
            raise NpuperfError(f"{path}: not a regular file (a FIFO or device?); give a "
                               f"kernel_details*.csv or a directory of them")
        return [path]
    found = walk_files(path, lambda parts: parts[-1].endswith(".csv")
                       and "kernel_details" in parts[-1][:-4])
    if not found:
        raise NpuperfError(f"{path}: no *kernel_details*.csv found below this directory "
                           f"(torch_npu writes it to <run>_ascend_pt/ASCEND_PROFILER_OUTPUT/)")
    return found


def check_column_count(path: Path, header: list[str]) -> None:
    if len(header) > MAX_TABLE_COLUMNS:
        raise ContractError(f"{path}: the header has {len(header):,} columns; a profiler table "
                            f"has at most {MAX_TABLE_COLUMNS:,} (a corrupted or generated file?)")


def read_kernel_header(path: Path) -> KernelTableHeader:
    info = KernelTableHeader(path=path, raw_columns=read_header(path))
    columns = info.columns
    check_column_count(path, columns)
    present = set(columns)
    twice = sorted(name for name, seen in Counter(columns).items() if name and seen > 1)
    if twice:
        raise ContractError(f"{path}: the header names column(s) {', '.join(map(clip, twice))} "
                            f"more than once; which one holds the data cannot be told")
    if INPUT_SHAPES not in present and TYPE in present and RAW_DURATION in present:
        info.level0 = True
        return info
    missing = [c for c in REQUIRED if c not in present]
    if missing:
        raise ContractError(f"{path}: not a kernel_details table: missing column(s) "
                            f"{', '.join(missing)}")
    info.counters = [c for c in columns if c and c not in NON_COUNTER]
    if all(k in present for k in LAUNCH_KEY):
        info.launch_key = LAUNCH_KEY + ((CONTEXT_ID,) if CONTEXT_ID in present else ())
    return info


# What pandas' C parser says of a cell it cannot read as the float64 asked for (`1_000`
# is "cannot safely convert ... object dtyped data").
_BAD_NUMBER_TEXTS = ("could not convert", "Unable to parse", "cannot safely convert")


@contextlib.contextmanager
def csv_read_errors(path: Path, locate_bad_number: Callable[[], None]) -> Iterator[None]:
    """pandas' failures while reading a table, as one-line errors naming the file; a number
    pandas could not convert is located first (`locate_bad_number` raises a CellError)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}"
                            f" at offset {exc.start}); re-export the file as UTF-8") from None
    except pd.errors.ParserError as exc:
        raise ContractError(f"{path}: malformed CSV: "
                            f"{clip(str(exc).strip().splitlines()[-1], 160)}") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    except ValueError as exc:
        if not any(text in str(exc) for text in _BAD_NUMBER_TEXTS):
            raise
        locate_bad_number()
        raise ContractError(f"{path}: unparsable number: {clip(str(exc), 160)}") from None


def _bad_number(values: pd.Series) -> int | None:
    """Position of the first cell that is neither a number nor a no-value token."""
    text = values.astype(str).str.strip()
    bad = pd.to_numeric(text, errors="coerce").isna() & ~text.isin(NA_VALUES)
    hits = np.flatnonzero(bad.to_numpy())
    return int(hits[0]) if len(hits) else None


class KernelDetailsReader:
    """Chunks of one kernel table: text columns as str, duration and counters as float64.

    `layout` (after the first chunk, or `check()`) holds the rows with fewer or more fields
    than the header; `row(i, offset)` is the file's data row of the i-th row of the chunk at
    `offset` (skipped short rows counted).
    """

    def __init__(self, info: KernelTableHeader, chunk_rows: int = DEFAULT_CHUNK_ROWS, *,
                 strict: bool = False) -> None:
        self.info = info
        self.chunk_rows = chunk_rows
        self.strict = strict
        self.layout: CsvLayout | None = None
        self.numeric = list(dict.fromkeys((RAW_DURATION, *info.counters, *info.launch_key)))
        self.text = list(info.text_columns)
        self.parsed_numeric = [c for c in self.numeric if c not in self.text]

    def check(self) -> CsvLayout:
        """Scan the file's bytes and field counts (once); under `strict`, a row with another
        field count than the header is an error."""
        if self.layout is None:
            layout = scan_csv(self.info.path, keep_skip=True)
            path = self.info.path
            if self.strict and layout.short_count:
                raise ContractError(f"{path}: {layout.describe('short')} (--strict; without it "
                                    f"such rows are skipped and counted)")
            if self.strict and layout.long_count:
                raise ContractError(f"{path}: {layout.describe('long')} (--strict; without it "
                                    f"the extra fields are ignored and counted)")
            self.layout = layout
        return self.layout

    def row(self, position: int, offset: int) -> int:
        kept = offset + position + 1
        layout = self.layout
        return layout.data_row(kept) if layout is not None and layout.skipped_rows else kept

    def _reader(self, columns: list[str], dtypes: dict, na_values: dict | None):
        raw = {c.strip(): c for c in self.info.raw_columns}
        wanted = {raw[c] for c in columns}
        # index_col=False: rows that all end with an extra delimiter must not make pandas
        # take the first field as an index and shift every value one column left.
        return pd.read_csv(self.info.path, usecols=lambda c: c in wanted,
                           dtype={raw[c]: t for c, t in dtypes.items()}, encoding="utf-8-sig",
                           chunksize=self.chunk_rows, keep_default_na=False,
                           na_values={raw[c]: v for c, v in (na_values or {}).items()},
                           engine="c", index_col=False,
                           skiprows=self.layout.skip if self.layout and self.layout.skip else None)

    def __iter__(self) -> Iterator[tuple[int, pd.DataFrame]]:
        info = self.info
        self.check()
        dtypes: dict[str, object] = dict.fromkeys(self.text, str)
        dtypes.update(dict.fromkeys(self.parsed_numeric, "float64"))
        offset = 0
        with csv_read_errors(info.path, self._raise_bad_number):
            reader = self._reader([*self.text, *self.parsed_numeric], dtypes,
                                  dict.fromkeys(self.parsed_numeric, NA_VALUES))
            for chunk in reader:
                chunk.columns = [c.strip() for c in chunk.columns]
                yield offset, chunk
                offset += len(chunk)

    def _raise_bad_number(self) -> None:
        """The C parser said a number is bad but not where: find it."""
        reader = self._reader(self.parsed_numeric, dict.fromkeys(self.parsed_numeric, str), None)
        offset = 0
        for chunk in reader:
            chunk.columns = [c.strip() for c in chunk.columns]
            for column in self.parsed_numeric:
                pos = _bad_number(chunk[column])
                if pos is not None:
                    raise CellError(f"cannot read {clip(str(chunk[column].iloc[pos]).strip())} "
                                    f"as a number", column=column, row=self.row(pos, offset),
                                    path=str(self.info.path))
            offset += len(chunk)
