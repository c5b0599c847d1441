"""Appending theory rows to database CSVs, keeping what is there byte for byte.

A file that exists gets its new rows appended after its own bytes (its header, BOM, quoting
and line ends untouched; a missing final line end is added first), written atomically through
`db.table.WriteBatch`. Only when the new rows need a column the file does not have (e.g. the
`Runtime ...` columns of an old FusedInferAttentionScore file) is the file rewritten with that
column added: every existing value is kept, its quoting may be normalised. A file without
`OP State`, `Accelerator Core` or `Output Formats` (not part of the signature) gets its new rows
without those cells. A file that does not exist is created with the contract columns of its
kernel type.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..db.columns import ACCELERATOR_CORE, OP_STATE, OUTPUT_FORMATS, contract_columns_for
from ..db.errors import ContractError, NpuperfError
from ..db.merge import ensure_columns, row_signatures
from ..db.signature import Signature
from ..db.table import WriteBatch, check_not_lfs, read_table


@dataclass
class ExistingFile:
    path: Path
    data: bytes
    frame: pd.DataFrame
    signatures: list[Signature | None] = field(default_factory=list)
    bad_rows: int = 0

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
    data = path.read_bytes()
    frame = read_table(path)
    sigs, errors = row_signatures(frame, kernel_type)
    return ExistingFile(path, data, frame, sigs, len(errors))


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


def stage_rows(batch: WriteBatch, path: Path, kernel_type: str, rows: list[dict[str, str]],
               existing: ExistingFile | None) -> str:
    """Stage `path` with `rows` added; returns how: created, appended or rewritten."""
    if existing is None:
        batch.add_text(path, new_file_text(kernel_type, rows))
        return "created"
    header = existing.header
    needed = [c for row in rows for c, v in row.items()
              if v != "" and c not in header and c not in OPTIONAL_COLUMNS]
    if not needed:
        try:
            text = existing.data.decode("utf-8")
        except UnicodeDecodeError:
            raise ContractError(f"{path}: not UTF-8 text") from None
        terminator = existing.line_terminator
        if text and not text.endswith(("\n", "\r")):
            text += terminator
        batch.add_text(path, text + _csv_lines(rows, header, terminator))
        return "appended"
    frame = ensure_columns(existing.frame, kernel_type, dict.fromkeys(needed))
    attrs = dict(frame.attrs)
    added = pd.DataFrame([{c: row.get(c, "") for c in frame.columns} for row in rows],
                         columns=frame.columns, dtype=object)
    frame = pd.concat([frame, added], ignore_index=True)
    frame.attrs.update(attrs)
    batch.add_table(frame, path)
    return "rewritten"


def unchanged_since(existing: ExistingFile | None, path: Path) -> bool:
    """True when the file is still as it was read (or still absent)."""
    if existing is None:
        return not path.exists()
    try:
        return path.read_bytes() == existing.data
    except OSError:
        return False
