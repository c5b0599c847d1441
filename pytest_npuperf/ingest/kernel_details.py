"""Reading torch_npu's `kernel_details*.csv` (CONTRACT.md §5), every variant, in chunks.

Variants handled: level 1 (full header), level 0 (no shapes: nothing to aggregate), CANN 7.x
headers without `OP State`/`HF32 Eligible` and with other counter sets, trailing TABs after
numbers, literal quotes around shapes, a UTF-8 BOM, `N/A` (HCCL) rows.

The reader never guesses: a number that is neither empty, `N/A` nor a float, and a row with
fewer fields than the header, are errors that name the file and the row.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
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
from ..db.errors import CellError, ContractError, NpuperfError
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
DEFAULT_CHUNK_ROWS = 200_000


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

    @property
    def last_column(self) -> str:
        """The last named column. A short row lacks it, so it reads as "" there."""
        return [c for c in self.columns if c][-1]


def find_kernel_details(path: str | Path) -> list[Path]:
    """`path` itself, or every `kernel_details*.csv` below it (several ranks and runs)."""
    path = Path(path)
    if not path.exists():
        raise NpuperfError(f"{path}: no such file or directory")
    if path.is_file():
        return [path]
    found = sorted(p for p in path.rglob("*.csv")
                   if p.is_file() and "kernel_details" in p.stem)
    if not found:
        raise NpuperfError(f"{path}: no *kernel_details*.csv found below this directory "
                           f"(torch_npu writes it to <run>_ascend_pt/ASCEND_PROFILER_OUTPUT/)")
    return found


def read_kernel_header(path: Path) -> KernelTableHeader:
    info = KernelTableHeader(path=path, raw_columns=read_header(path))
    columns = info.columns
    present = set(columns)
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


def _first_short_row(path: Path, expected: int) -> tuple[int, int] | None:
    """(row number, field count) of the first row with fewer fields than the header."""
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for number, row in enumerate(reader, start=1):
            if row and len(row) < expected:
                return number, len(row)
    return None


def _bad_number(values: pd.Series) -> int | None:
    """Position of the first cell that is neither a number nor a no-value token."""
    text = values.astype(str).str.strip()
    bad = pd.to_numeric(text, errors="coerce").isna() & ~text.isin(NA_VALUES)
    hits = np.flatnonzero(bad.to_numpy())
    return int(hits[0]) if len(hits) else None


def _to_float(values: pd.Series, column: str, path: Path, offset: int) -> np.ndarray:
    """Text cells -> float64 (no-value tokens -> NaN); a junk cell is an error naming its row."""
    cells = values.to_numpy(dtype=object)
    cells = np.where(values.isin(NA_VALUES).to_numpy(), "nan", cells)
    try:
        return cells.astype(np.float64)  # float() per cell: tolerates the exporters' TABs
    except ValueError:
        pos = _bad_number(values)
        raise CellError(f"cannot read {str(values.iloc[pos]).strip()!r} as a number",
                        column=column, row=offset + (pos or 0) + 1, path=str(path)) from None


class KernelDetailsReader:
    """Chunks of one kernel table: text columns as str, duration and counters as float64."""

    def __init__(self, info: KernelTableHeader, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> None:
        self.info = info
        self.chunk_rows = chunk_rows
        self._rows_checked = False
        last = info.last_column
        self.numeric = list(dict.fromkeys((RAW_DURATION, *info.counters, *info.launch_key)))
        # The last column is read as text whatever it holds, so that a missing field ("")
        # can be told from an exported "N/A"; it is converted to a number afterwards.
        self.text = list(dict.fromkeys([*info.text_columns, last]))
        self.parsed_numeric = [c for c in self.numeric if c not in self.text]

    def __iter__(self) -> Iterator[tuple[int, pd.DataFrame]]:
        info = self.info
        raw = {c.strip(): c for c in info.raw_columns}
        dtypes: dict[str, object] = {raw[c]: str for c in self.text}
        dtypes.update({raw[c]: "float64" for c in self.parsed_numeric})
        na_values = {raw[c]: NA_VALUES for c in self.parsed_numeric}
        wanted = {raw[c] for c in (*self.text, *self.parsed_numeric)}
        offset = 0
        try:
            # index_col=False: rows that all end with an extra delimiter must not make pandas
            # take the first field as an index and shift every value one column left.
            reader = pd.read_csv(info.path, usecols=lambda c: c in wanted, dtype=dtypes,
                                 encoding="utf-8-sig", chunksize=self.chunk_rows,
                                 keep_default_na=False, na_values=na_values, engine="c",
                                 index_col=False)
            for chunk in reader:
                chunk.columns = [c.strip() for c in chunk.columns]
                self._check_short_rows(chunk)
                for column in self.numeric:
                    if column in self.text:
                        chunk[column] = _to_float(chunk[column], column, info.path, offset)
                yield offset, chunk
                offset += len(chunk)
        except UnicodeDecodeError as exc:
            raise ContractError(f"{info.path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}"
                                f" at offset {exc.start}); re-export the file as UTF-8") from None
        except pd.errors.ParserError as exc:
            raise ContractError(f"{info.path}: malformed CSV: "
                                f"{str(exc).strip().splitlines()[-1]}") from None
        except ValueError as exc:
            if "could not convert" not in str(exc) and "Unable to parse" not in str(exc):
                raise
            self._raise_bad_number(offset)
            raise ContractError(f"{info.path}: unparsable number: {exc}") from None

    def _check_short_rows(self, chunk: pd.DataFrame) -> None:
        if self._rows_checked:
            return
        if (chunk[self.info.last_column].astype(str) == "").any():
            self._rows_checked = True  # one full scan answers for the whole file
            short = _first_short_row(self.info.path, len(self.info.raw_columns))
            if short is not None:
                raise ContractError(f"{self.info.path}: row {short[0]} has {short[1]} fields but "
                                    f"the header has {len(self.info.raw_columns)} "
                                    f"(truncated or corrupted file?)")

    def _raise_bad_number(self, start: int) -> None:
        """The C parser said a number is bad but not where: find it, from `start` on."""
        raw = {c.strip(): c for c in self.info.raw_columns}
        wanted = {raw[c] for c in self.parsed_numeric}
        reader = pd.read_csv(self.info.path, usecols=lambda c: c in wanted, dtype=str,
                             keep_default_na=False, encoding="utf-8-sig", index_col=False,
                             chunksize=self.chunk_rows, skiprows=range(1, start + 1))
        offset = start
        for chunk in reader:
            chunk.columns = [c.strip() for c in chunk.columns]
            for column in self.parsed_numeric:
                pos = _bad_number(chunk[column])
                if pos is not None:
                    raise CellError(f"cannot read {chunk[column].iloc[pos]!r} as a number",
                                    column=column, row=offset + pos + 1, path=str(self.info.path))
            offset += len(chunk)
