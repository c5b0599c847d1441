"""Appending rows to database CSVs (`npuperf grid`'s theory rows), keeping what is there byte
for byte.

A file that exists gets its new rows appended after its own bytes (its header, BOM, quoting
and line ends untouched; a missing final line end is added first), staged in the database's
transaction (`Database.transaction`) with the stamp it was read with, so a file changed
meanwhile is never overwritten. Only when the new rows need a column the file does not have
(e.g. the `Runtime ...` columns of an old FusedInferAttentionScore file) is the file rewritten
with that column added: every existing value is kept, its quoting may be normalised. A file
without `OP State`, `Accelerator Core` or `Output Formats` (not part of the signature) gets its
new rows without those cells. A file that does not exist is created with the contract columns
of its kernel type.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .columns import (
    ACCELERATOR_CORE,
    FIA_RUNTIME_COLUMNS,
    OP_STATE,
    OUTPUT_FORMATS,
    RUNTIME_KERNELS,
    contract_columns_for,
)
from .database import Table
from .errors import ContractError, NpuperfError, os_error
from .signature import Signature
from .table import check_not_lfs
from .transaction import FileStamp, Transaction, check_table_text
from .upsert import ensure_columns


@dataclass
class ExistingFile:
    path: Path
    data: bytes
    frame: pd.DataFrame
    signatures: list[Signature | None] = field(default_factory=list)
    bad_rows: int = 0
    stamp: FileStamp | None = None  # when it was read: the commit checks it is still so

    @property
    def header(self) -> list[str]:
        return list(self.frame.columns)

    @property
    def line_terminator(self) -> str:
        return self.frame.attrs.get("lineterminator", "\n")


# Cells a hand-written file may do without: not part of the signature, so new rows simply
# follow the file's own header there instead of forcing a rewrite.
OPTIONAL_COLUMNS = frozenset({OP_STATE, ACCELERATOR_CORE, OUTPUT_FORMATS})


def read_existing(path: Path, kernel_type: str) -> ExistingFile | None:
    """The file's bytes, table and row signatures; None when there is no such file."""
    if not path.exists():
        return None
    if not path.is_file():
        raise NpuperfError(f"{path}: not a file")
    check_not_lfs(path)
    table = Table.read(path)  # its stamp is taken first: a change after it shows at commit
    table.check_matchable("npuperf grid")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise os_error(path, exc) from None
    return ExistingFile(path, data, table.frame, table.signatures, table.bad_rows, table.stamp)


def _csv_lines(rows: list[dict[str, str]], header: list[str], terminator: str) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator=terminator)
    for row in rows:
        writer.writerow([row.get(column, "") for column in header])
    return buffer.getvalue()


def new_file_text(kernel_type: str, rows: list[dict[str, str]]) -> str:
    header = list(contract_columns_for(kernel_type))
    for row in rows:
        header.extend(c for c in row if c not in header)
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow(header)
    return buffer.getvalue() + _csv_lines(rows, header, "\n")


def stage_rows(tx: Transaction, path: Path, kernel_type: str, rows: list[dict[str, str]],
               existing: ExistingFile | None) -> str:
    """Stage `path` with `rows` added; returns how: created, appended or rewritten."""
    if existing is None:
        text = new_file_text(kernel_type, rows)
        check_table_text(path, text)
        tx.stage_text(path, text, expect=None)
        return "created"
    header = existing.header
    needed = [c for row in rows for c, v in row.items()
              if v != "" and c not in header and c not in OPTIONAL_COLUMNS]
    if needed and kernel_type in RUNTIME_KERNELS:
        # The simulator tells "unknown" (an empty cell) from "this file cannot say" (no
        # column): every Runtime column comes along, empty where the rows have no value.
        needed += [c for c in FIA_RUNTIME_COLUMNS if c not in header and c not in needed]
    if not needed:
        try:
            text = existing.data.decode("utf-8")
        except UnicodeDecodeError:
            raise ContractError(f"{path}: not UTF-8 text") from None
        terminator = existing.line_terminator
        if text and not text.endswith(("\n", "\r")):
            text += terminator
        added = _csv_lines(rows, header, terminator)
        check_table_text(path, added)
        tx.stage_text(path, text + added, expect=existing.stamp)
        return "appended"
    frame = ensure_columns(existing.frame, kernel_type, dict.fromkeys(needed))
    attrs = dict(frame.attrs)
    added = pd.DataFrame([{c: row.get(c, "") for c in frame.columns} for row in rows],
                         columns=frame.columns, dtype=object)
    frame = pd.concat([frame, added], ignore_index=True)
    frame.attrs.update(attrs)
    tx.stage_table(path, frame, expect=existing.stamp)
    return "rewritten"


def unchanged_since(existing: ExistingFile | None, path: Path) -> bool:
    """True when the file is still as it was read (or still absent)."""
    return FileStamp.of(path) == (existing.stamp if existing is not None else None)
