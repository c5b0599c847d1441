"""Database rows -> pytest cases: readable, stable ids and the row each case replays.

Collection must stay cheap for 10^5 rows: cells are only parsed for the signature (cached
across identical cells), and a case keeps a reference to its row, not a parsed call.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from ..db.columns import AVERAGE_DURATION, is_valid_duration
from ..db.database import Database, Table, kernel_csvs
from ..db.files import check_database_dir
from ..db.layout import device_of, kernel_file_name, kernel_type_of_file
from ..db.signature import Signature, short_hash, signature_text
from ..kernels.catalog import replayable as has_replay
from ..measure.policy import UPDATE_MODES
from ..measure.result import CaseResult

__all__ = ["UPDATE_MODES", "CaseCatalog", "CaseRef", "kernel_csvs", "marker_name"]


@dataclass(frozen=True)
class CaseRef:
    case_id: str
    kernel_type: str
    file: str  # CSV file name in the database
    position: int  # 0-based row position in the file when collected
    signature: str  # short hash of the row's signature: the check that a result still
    # refers to the row at `position` ("" when a cell cannot be parsed)
    replayable: bool
    problem: str = ""  # the file could not be read: the case errors with this message
    impl: str = ""  # --npuperf-impl all: the implementation this case measures

    @property
    def row_number(self) -> int:
        """1-based data row, as validate and error messages count."""
        return self.position + 1


def with_implementations(refs: Iterable[CaseRef], names: Callable[[str], list[str]]
                         ) -> list[CaseRef]:
    """`--npuperf-impl all`: each replayable case once per implementation of its kernel type
    (`names(kernel_type)`), its id suffixed with the implementation's name (`-k compiled`
    selects them); the others as they are."""
    out: list[CaseRef] = []
    for ref in refs:
        found = names(ref.kernel_type) if ref.replayable and not ref.problem else []
        out += [replace(ref, case_id=f"{ref.case_id}-{name}", impl=name) for name in found] \
            or [ref]
    return out


def result_for(ref: CaseRef, nodeid: str, status: str, error: str) -> CaseResult:
    """The result of a case that measured nothing (skipped, crashed, or standing for a file
    that could not be read: that one names no row)."""
    return CaseResult(case_id=ref.case_id, nodeid=nodeid, kernel_type=ref.kernel_type,
                      file=ref.file, signature=ref.signature,
                      row=None if ref.problem else ref.row_number, status=status, error=error,
                      method="", impl=ref.impl)


def marker_name(kernel_type: str) -> str:
    name = re.sub(r"\W", "_", kernel_type)
    return name if name and not name[0].isdigit() else f"k_{name}"


def shape_summary(sig: Signature | None) -> str:
    """A short shape label: MxKxN for a GEMM, else the first input's dims."""
    return "badrow" if sig is None else sig.shape_label()


def dtype_label(sig: Signature | None) -> str:
    return "NA" if sig is None else sig.dtype_label()


def case_id(kernel_type: str, sig: Signature | None, digest: str, raw_key: str) -> str:
    """`<type>-<shape>-<dtype>-<hash>`; `digest` is short_hash(sig), computed once by the
    caller ("" for a row without a signature: its file and position are hashed instead)."""
    digest = digest if sig is not None else short_hash(repr((raw_key,)))
    return f"{kernel_type}-{shape_summary(sig)}-{dtype_label(sig)}-{digest}"


class DatabaseCases:
    """A database directory named on a command line: checked at once, its cases read on first
    use, once (a command that may not need them reads its profiler output first)."""

    def __init__(self, path: Path, option: str) -> None:
        self.path = Path(path)
        check_database_dir(self.path, option)
        self.device = device_of(self.path) or ""
        self._catalog: CaseCatalog | None = None

    @property
    def catalog(self) -> CaseCatalog:
        if self._catalog is None:
            self._catalog = CaseCatalog(self.path)
        return self._catalog

    @property
    def read(self) -> bool:
        return self._catalog is not None

    def release(self) -> None:
        """Forget the catalog (its tables go once nothing else holds them)."""
        self._catalog = None


class CaseCatalog:
    """The rows of one database version directory, and the cases they become.

    It holds the `Database` snapshot read at collection: the write updates these tables instead
    of reading and signing every CSV again. A file that cannot be read does not stop the
    others: it becomes one case that errors with the file's problem (`failed`).
    """

    def __init__(self, db_dir: Path, frames: dict[str, pd.DataFrame] | None = None, *,
                 database: Database | None = None) -> None:
        self.db_dir = Path(db_dir)
        if frames is not None:
            database = Database(self.db_dir)
            for name, frame in frames.items():
                database.tables[name] = Table.of_frame(self.db_dir / name, frame, None)
        elif database is None:
            database = Database(self.db_dir).read(strict=False)
        self.database = database
        self._cells: dict[str, tuple[pd.DataFrame, list[str], object]] = {}
        for table in database.tables.values():
            # The case-id hash is also the row check: computed once, from the same text.
            table.set_checks([short_hash(signature_text(s)) if s is not None else ""
                              for s in table.signatures])

    @property
    def tables(self) -> dict[str, Table]:
        return self.database.tables

    @property
    def failed(self) -> dict[str, Exception]:
        return self.database.failed

    @classmethod
    def from_rows(cls, db_dir: Path, rows: dict[str, list[dict[str, str]]]) -> CaseCatalog:
        """A catalog of rows that are in no file (shape-grid points)."""
        frames = {kernel_file_name(kernel_type): pd.DataFrame(kernel_rows, dtype=object).fillna("")
                  for kernel_type, kernel_rows in rows.items() if kernel_rows}
        return cls(db_dir, frames)

    def row(self, ref: CaseRef) -> dict[str, str]:
        frame = self.tables[ref.file].frame
        # The frame's cells as one array, made once per frame: a row through `iloc` builds a
        # Series, half a millisecond per case.
        cached = self._cells.get(ref.file)
        if cached is None or cached[0] is not frame:
            cached = (frame, [str(c) for c in frame.columns], frame.to_numpy(dtype=object))
            self._cells[ref.file] = cached
        _, columns, cells = cached
        return {column: str(value) for column, value in zip(columns, cells[ref.position])}

    def measured(self) -> set[tuple[str, Signature]]:
        """(file, signature) of rows that hold a valid replay duration."""
        done = set()
        for name, table in self.tables.items():
            if AVERAGE_DURATION not in table.frame.columns:
                continue
            for sig, value in zip(table.signatures, table.frame[AVERAGE_DURATION].tolist()):
                if sig is not None and is_valid_duration(value):
                    done.add((name, sig))
        return done

    def cases(self, skip: set[tuple[str, Signature]] | None = None) -> Iterator[CaseRef]:
        """One case per row, in file then row order; `skip` holds (file, signature) to leave
        out (missing-only mode). A file that could not be read is one erroring case."""
        names = sorted({*self.tables, *self.failed}) if self.failed else list(self.tables)
        for name in names:
            if name in self.failed:
                kernel_type = kernel_type_of_file(Path(name))
                yield CaseRef(f"{kernel_type}-unreadable", kernel_type, name, 0, "", False,
                              problem=str(self.failed[name]))
                continue
            table = self.tables[name]
            kernel_type = table.kernel_type
            replayable = has_replay(kernel_type)
            seen: Counter = Counter()
            for position, (sig, digest) in enumerate(zip(table.signatures, table.checks())):
                if skip and sig is not None and (name, sig) in skip:
                    continue
                ident = case_id(kernel_type, sig, digest, f"{name}:{position}")
                seen[ident] += 1
                if seen[ident] > 1:  # duplicate signature rows: keep ids unique and stable
                    ident = f"{ident}-dup{seen[ident]}"
                yield CaseRef(ident, kernel_type, name, position, digest, replayable)
