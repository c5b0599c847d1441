"""Database rows -> pytest cases: readable, stable ids and the row each case replays.

Collection must stay cheap for 10^5 rows: cells are only parsed for the signature (cached
across identical cells), and a case keeps a reference to its row, not a parsed call.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..db.columns import AVERAGE_DURATION, is_valid_duration
from ..db.layout import REPORTS_DIR, kernel_file_name, kernel_type_of_file
from ..db.merge import migrate_legacy, row_signatures
from ..db.signature import Signature, short_hash
from ..db.table import read_table
from ..kernels.catalog import replayable as has_replay
from .policy import UPDATE_MODES as UPDATE_MODES


@dataclass(frozen=True)
class CaseRef:
    case_id: str
    kernel_type: str
    file: str  # CSV file name in the database
    position: int  # 0-based row position in the file when collected
    signature: str  # repr of the row signature ("" when a cell cannot be parsed)
    replayable: bool

    @property
    def row_number(self) -> int:
        """1-based data row, as validate and error messages count."""
        return self.position + 1


def marker_name(kernel_type: str) -> str:
    name = re.sub(r"\W", "_", kernel_type)
    return name if name and not name[0].isdigit() else f"k_{name}"


def _dims(slot) -> str:
    if slot is None:
        return "none"
    return "x".join(map(str, slot)) if slot else "scalar"


def shape_summary(sig: Signature | None) -> str:
    """A short shape label: MxKxN for a GEMM, else the first input's dims."""
    if sig is None:
        return "badrow"
    kind = sig[0]
    if kind == "gemm":
        return "x".join(map(str, sig[1]))
    if kind in ("index", "slice"):
        first = sig[1] if kind == "index" else (sig[1], sig[2], sig[3])
        return _dims(first[0])
    inputs = sig[1]
    return _dims(inputs[0][0]) if inputs else "noinput"


def dtype_label(sig: Signature | None) -> str:
    if sig is None:
        return "NA"
    kind = sig[0]
    if kind == "gemm":
        dtype = sig[2][0]
    elif kind == "index":
        dtype = sig[1][1]
    elif kind == "slice":
        dtype = sig[2]
    else:
        dtype = next((d for s, d, _ in sig[1] if s is not None), "")
    return (dtype or "NA").removeprefix("DT_")


def case_id(kernel_type: str, sig: Signature | None, sig_text: str, raw_key: str) -> str:
    """`<type>-<shape>-<dtype>-<hash>`; `sig_text` is repr(sig), computed once by the caller."""
    digest = short_hash(sig_text) if sig is not None else short_hash(repr((raw_key,)))
    return f"{kernel_type}-{shape_summary(sig)}-{dtype_label(sig)}-{digest}"


def kernel_csvs(db_dir: Path) -> list[Path]:
    """The kernel CSVs of a version directory (collective tables and reports excluded)."""
    return sorted(p for p in db_dir.glob("*.csv")
                  if p.is_file() and not p.name.startswith(("hcom_", ".")) and p.parent.name != REPORTS_DIR)


class CaseCatalog:
    """The rows of one database version directory, and the cases they become."""

    def __init__(self, db_dir: Path, frames: dict[str, pd.DataFrame] | None = None) -> None:
        self.db_dir = Path(db_dir)
        self.frames: dict[str, pd.DataFrame] = {}
        self.kernel_types: dict[str, str] = {}
        self.signatures: dict[str, list[Signature | None]] = {}
        self.texts: dict[str, list[str]] = {}  # repr of each signature ("" when unparsable)
        if frames is None:
            frames = {path.name: read_table(path) for path in kernel_csvs(self.db_dir)}
        for name, frame in frames.items():
            frame, _ = migrate_legacy(frame)
            kernel_type = kernel_type_of_file(Path(name))
            self.frames[name] = frame
            self.kernel_types[name] = kernel_type
            self.signatures[name], _ = row_signatures(frame, kernel_type)
            self.texts[name] = [repr(s) if s is not None else "" for s in self.signatures[name]]

    @classmethod
    def from_rows(cls, db_dir: Path, rows: dict[str, list[dict[str, str]]]) -> CaseCatalog:
        """A catalog of rows that are in no file (shape-grid points)."""
        frames = {kernel_file_name(kernel_type): pd.DataFrame(kernel_rows, dtype=object).fillna("")
                  for kernel_type, kernel_rows in rows.items() if kernel_rows}
        return cls(db_dir, frames)

    def row(self, ref: CaseRef) -> dict[str, str]:
        frame = self.frames[ref.file]
        return {str(k): str(v) for k, v in frame.iloc[ref.position].items()}

    def measured(self) -> set[tuple[str, str]]:
        """(file, signature) of rows that hold a valid replay duration."""
        done = set()
        for name, frame in self.frames.items():
            if AVERAGE_DURATION not in frame.columns:
                continue
            for text, value in zip(self.texts[name], frame[AVERAGE_DURATION].tolist()):
                if text and is_valid_duration(value):
                    done.add((name, text))
        return done

    def cases(self, skip: set[tuple[str, str]] | None = None) -> Iterator[CaseRef]:
        """One case per row, in file then row order; `skip` holds (file, signature) to leave
        out (missing-only mode)."""
        for name in self.frames:
            kernel_type = self.kernel_types[name]
            replayable = has_replay(kernel_type)
            seen: Counter = Counter()
            for position, (sig, sig_text) in enumerate(zip(self.signatures[name],
                                                           self.texts[name])):
                if skip and sig_text and (name, sig_text) in skip:
                    continue
                ident = case_id(kernel_type, sig, sig_text, f"{name}:{position}")
                seen[ident] += 1
                if seen[ident] > 1:  # duplicate signature rows: keep ids unique and stable
                    ident = f"{ident}-dup{seen[ident]}"
                yield CaseRef(ident, kernel_type, name, position, sig_text, replayable)
