"""The front door of a database directory: read it once, write it through one transaction.

```python
db = Database(version_dir)                 # nothing read yet
with db.transaction("npuperf parse") as tx:  # lock; an interrupted write is rolled back first
    table = db.table("MatMulV2.csv")       # read under the lock: cells, typed signatures, stamp
    merged = apply_updates(table.frame, table.kernel_type, updates, signatures=table.signatures)
    db.stage(tx, table, merged.frame)      # the commit checks the file did not change since
    tx.stage_text(db.path / "op_mapping.yaml", text)   # any text file under the root
# leaving the block commits every staged file together (or none, on an error)
```

A session reads a snapshot without the lock (`Database(path).read()`), takes the lock later,
and `refresh`es the tables it writes (a table that changed since is read again, so matches go
by signature, not by stale positions). Writers of other directories of the same database root
(collective tables under `<DEVICE>/hccl/<version>/`, op_mapping.yaml) open
`Database(directory).transaction(...)` on a directory that holds everything they write, and
stage with `stage_table`, `stage_text` or `stage_with`, each with the `expect=` stamp of what
they read; `append.stage_rows` appends rows to a table keeping its bytes (`npuperf grid`).
Reports and caches are written with `table.write_texts`, under their own directory's lock.
No writer outside this package constructs a `Transaction`, and every one holds a lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

from .columns import SIGNATURE_COLUMNS, contract_columns_for
from .errors import CellError, ContractError, NpuperfError, os_error
from .layout import kernel_file_name, kernel_type_of_file
from .lock import DatabaseLock
from .signature import Signature, short_hash, signature_text
from .table import empty_table, read_table
from .transaction import FileStamp, Transaction, recover_if_free
from .upsert import migrate_legacy, row_signatures


@dataclass
class Table:
    """One kernel CSV as read: cell texts (legacy column names migrated), the typed signature
    of every row (None where a cell cannot be parsed) and the file's stamp at read time."""

    path: Path
    frame: pd.DataFrame
    stamp: FileStamp | None  # None: the file did not exist (a new table)
    kernel_type: str = ""
    renamed: dict[str, str] = field(default_factory=dict)
    signatures: list[Signature | None] = field(default_factory=list)
    errors: list[tuple[int, CellError]] = field(default_factory=list)
    _positions: dict[Signature, list[int]] | None = field(default=None, repr=False)
    _checks: list[str] | None = field(default=None, repr=False)

    @classmethod
    def read(cls, path: str | Path) -> Table:
        path = Path(path)
        stamp = FileStamp.of(path)  # before reading: a write during the read shows later
        frame = read_table(path)
        return cls.of_frame(path, frame, stamp)

    @classmethod
    def of_frame(cls, path: Path, frame: pd.DataFrame, stamp: FileStamp | None) -> Table:
        kernel_type = kernel_type_of_file(path)
        frame, renamed = migrate_legacy(frame)
        sigs, errors = row_signatures(frame, kernel_type)
        return cls(path, frame, stamp, kernel_type, renamed, sigs, errors)

    @classmethod
    def new(cls, directory: Path, kernel_type: str) -> Table:
        path = Path(directory) / kernel_file_name(kernel_type)
        return cls(path, empty_table(contract_columns_for(kernel_type)), None, kernel_type)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def exists(self) -> bool:
        return self.stamp is not None

    @property
    def bad_rows(self) -> int:
        return len(self.errors)

    def check_matchable(self, writer: str) -> None:
        """Refuse to add rows to a table whose header lacks a column of the signature (removed
        by hand): its rows read that cell as empty, so none would match and `writer` would
        append a duplicate of each, silently."""
        missing = [c for c in SIGNATURE_COLUMNS if c not in self.frame.columns]
        if missing and len(self.frame):
            raise ContractError(
                f"{self.path}: no {', '.join(map(repr, missing))} column: part of every row's "
                f"identity, so no row can be matched and {writer} would add a duplicate of "
                f"each; restore the column (npuperf validate lists what is missing)")

    def positions(self) -> dict[Signature, list[int]]:
        """Signature -> row positions holding it (several for duplicate rows)."""
        if self._positions is None:
            index: dict[Signature, list[int]] = {}
            for position, sig in enumerate(self.signatures):
                if sig is not None:
                    index.setdefault(sig, []).append(position)
            self._positions = index
        return self._positions

    def checks(self) -> list[str]:
        """Per row, the short hash of its signature ("" when it has none): case ids carry it,
        and a result is matched to its row only when the row still has it."""
        if self._checks is None:
            self._checks = [short_hash(signature_text(s)) if s is not None else ""
                            for s in self.signatures]
        return self._checks

    def set_checks(self, checks: list[str]) -> None:
        self._checks = checks

    def replace(self, frame: pd.DataFrame, signatures: list[Signature | None]) -> None:
        """New rows for this table (rows added or removed): the indexes are rebuilt."""
        self.frame, self.signatures = frame, list(signatures)
        self._positions = None
        self._checks = None


def kernel_csvs(directory: str | Path) -> list[Path]:
    """The kernel CSVs of a version directory (collective tables, hidden files and reports
    excluded)."""
    directory = Path(directory)
    try:
        names = sorted(os.listdir(directory))
    except NotADirectoryError:
        raise NpuperfError(f"{directory}: not a directory") from None
    except FileNotFoundError:
        raise NpuperfError(f"{directory}: no such directory") from None
    except OSError as exc:
        raise os_error(directory, exc) from None
    # Anything but a directory: a FIFO or a link to a device named like a table is read, and
    # refused there with its name, rather than left out without a word.
    return [directory / n for n in names
            if n.endswith(".csv") and not n.startswith(("hcom_", ".")) and not (directory / n).is_dir()]


def walk_files(path: Path, keep) -> list[Path]:
    """Files below `path` for which `keep(relative parts)` holds; a directory that cannot be
    read is an error naming it (never skipped silently). Hidden and symlinked directories
    are not entered (a link cycle would never end). Entries that are not regular files (a
    FIFO, a link to a device) are kept: their readers refuse them by name, never silently."""
    found: list[Path] = []
    problems: list[OSError] = []
    for directory, dirs, files in os.walk(path, onerror=problems.append):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .git and the like
        for name in files:
            candidate = Path(directory) / name
            if keep(candidate.relative_to(path).parts):
                found.append(candidate)
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise NpuperfError(f"{first.filename}: cannot read this directory: "
                           f"{first.strerror or first}{more}; fix its permissions or leave it "
                           f"out")
    return sorted(found)


class Database:
    """One database (version) directory: its kernel tables, read once, and its writes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.tables: dict[str, Table] = {}
        self.failed: dict[str, NpuperfError] = {}  # files that could not be read, by name
        self.notes: list[str] = []
        self._recovered = False

    def _recover(self) -> None:
        if not self._recovered:
            self.notes += recover_if_free(self.path)
            self._recovered = True

    def read(self, *, strict: bool = True) -> Database:
        """Read every kernel CSV. With `strict`, the first unreadable file is an error;
        otherwise unreadable files are kept in `failed` and the rest is read."""
        self._recover()
        for path in kernel_csvs(self.path):
            if path.name in self.tables:
                continue
            try:
                self.tables[path.name] = Table.read(path)
            except NpuperfError as exc:
                if strict:
                    raise
                self.failed[path.name] = exc
        return self

    def table(self, name: str) -> Table:
        """The table of file `name`, read now if it was not yet."""
        if name not in self.tables:
            self._recover()
            self.tables[name] = Table.read(self.path / name)
        return self.tables[name]

    def get(self, kernel_type: str) -> Table | None:
        """The table of a kernel type if its file exists (read now if needed), else None."""
        name = kernel_file_name(kernel_type)
        if name in self.tables:
            return self.tables[name]
        path = self.path / name
        if not os.path.lexists(path):
            return None
        if not path.is_file():
            raise NpuperfError(f"{path}: not a file")
        return self.table(name)

    def get_or_new(self, kernel_type: str) -> Table:
        table = self.get(kernel_type)
        return table if table is not None else Table.new(self.path, kernel_type)

    def refresh(self, name: str) -> Table:
        """The table of `name` as it is on disk now: the snapshot when the file did not change
        since it was read, else a new read (call it with the lock held)."""
        table = self.tables.get(name)
        if table is not None and FileStamp.of(table.path) == table.stamp:
            return table
        fresh = Table.read(self.path / name)
        self.tables[name] = fresh
        return fresh

    def lock(self, purpose: str) -> DatabaseLock:
        """This directory's lock, taken (an interrupted write is rolled back first); notes go
        to `self.notes`. For a session that holds the lock while it runs."""
        from .transaction import recover

        lock = DatabaseLock(self.path, purpose)
        self.notes += lock.acquire()
        try:
            self.notes += recover(self.path)
        except BaseException:
            lock.release()
            raise
        self._recovered = True
        return lock

    def transaction(self, purpose: str, *, lock: Literal[True] | DatabaseLock = True
                    ) -> Transaction:
        """A transaction rooted at this directory, under its lock: taken here (True) or the
        one `lock` returned, which the caller holds (a session, while it runs)."""
        self._recovered = True  # the transaction recovers when it takes the lock
        return Transaction(self.path, purpose, lock=lock)

    def stage(self, tx: Transaction, table: Table, frame: pd.DataFrame | None = None) -> Path:
        """Stage `frame` (default: the table's own) as `table`'s file, checked at commit
        against the stamp the table was read with."""
        frame = table.frame if frame is None else frame
        return tx.stage_table(table.path, frame, expect=table.stamp)
