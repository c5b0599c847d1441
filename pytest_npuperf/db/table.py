"""Reading and writing database CSVs without losing anything.

Tables are read with every cell as its exact text (no NaN, no type guessing), so that a
rewrite keeps unknown columns, column order and untouched values as they were. Writes go to a
temporary file in the same directory and are renamed over the target, so a killed process
leaves either the old file or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import tempfile
import warnings
from pathlib import Path

import pandas as pd

from .errors import ContractError, LfsPointerError, NpuperfError

LFS_MAGIC = b"version https://git-lfs.github.com/spec/v1"
_BOM = b"\xef\xbb\xbf"


def is_lfs_pointer(path: str | Path) -> bool:
    with open(path, "rb") as handle:
        head = handle.read(len(_BOM) + len(LFS_MAGIC))
    return head.removeprefix(_BOM).startswith(LFS_MAGIC)


def check_not_lfs(path: str | Path) -> None:
    if is_lfs_pointer(path):
        raise LfsPointerError(
            f"{path}: this is a Git LFS pointer, not CSV data; fetch the real file "
            f"(git lfs pull) and try again")


def _decode_error(path: str | Path, exc: UnicodeDecodeError) -> ContractError:
    return ContractError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}); re-export the file as UTF-8")


def read_header(path: str | Path) -> list[str]:
    """Column names of a CSV (BOM tolerated). Raises ContractError on an empty file."""
    path = Path(path)
    check_not_lfs(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            header = next(csv.reader(handle), None)
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    if not header or not any(h.strip() for h in header):
        raise ContractError(f"{path}: empty file (no header line)")
    return header


def _long_row_error(path: Path, expected: int) -> ContractError:
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)
        for number, row in enumerate(reader, start=1):
            if len(row) > expected:
                return ContractError(f"{path}: row {number} has {len(row)} fields but the "
                                     f"header has {expected}")
    return ContractError(f"{path}: malformed CSV: a row has more fields than the header")


def _line_terminator(path: Path) -> str:
    with open(path, "rb") as handle:
        first = handle.readline()
    return "\r\n" if first.endswith(b"\r\n") else "\n"


def read_table(path: str | Path) -> pd.DataFrame:
    """A database CSV as a frame of strings, exactly as written (empty cells are "")."""
    path = Path(path)
    if not path.is_file():
        raise NpuperfError(f"{path}: no such file")
    header = read_header(path)
    duplicates = sorted({h for h in header if header.count(h) > 1})
    if duplicates:
        raise ContractError(f"{path}: duplicate column name(s) {', '.join(map(repr, duplicates))}")
    placeholders = [f"c{i}" for i in range(len(header))]
    try:
        # Rows longer than the header would otherwise either shift every value into the
        # wrong column (pandas takes the extra leading field as an index) or lose the
        # extra fields with only a warning; a rewrite would then destroy data.
        with warnings.catch_warnings():
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, header=None, skiprows=1, names=placeholders, dtype=str,
                                keep_default_na=False, na_filter=False, encoding="utf-8-sig",
                                skip_blank_lines=True, index_col=False)
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    except pd.errors.ParserWarning:
        raise _long_row_error(path, len(header)) from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise ContractError(f"{path}: malformed CSV: {str(exc).strip().splitlines()[-1]}") from None
    frame.columns = header
    frame.attrs["lineterminator"] = _line_terminator(path)
    return frame


def empty_table(columns: list[str] | tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_table(frame: pd.DataFrame, path: str | Path) -> None:
    """Write a table atomically, keeping its line terminator; empty cells stay empty."""
    with WriteBatch() as batch:
        batch.add_table(frame, path)


def _to_csv(frame: pd.DataFrame, handle: io.IOBase) -> None:
    frame.to_csv(handle, index=False, lineterminator=frame.attrs.get("lineterminator", "\n"))


def write_text(path: str | Path, text: str) -> None:
    with WriteBatch() as batch:
        batch.add_text(path, text)


class WriteBatch:
    """Stage several files, then put them all in place; on any error none is replaced.

    Used where one command updates many CSVs of a database: each staged file is complete on
    disk before the first rename, so a failure while writing leaves the database as it was.
    """

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def add_table(self, frame: pd.DataFrame, path: str | Path) -> None:
        self._stage(Path(path), lambda handle: _to_csv(frame, handle))

    def add_text(self, path: str | Path, text: str) -> None:
        self._stage(Path(path), lambda handle: handle.write(text))

    def _stage(self, path: Path, fill) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp",
                                            dir=path.parent)
        except OSError as exc:
            self.abort()
            raise NpuperfError(f"cannot write to {path.parent}: {exc.strerror or exc}") from None
        tmp = Path(tmp_name)
        self._staged.append((tmp, path))
        try:
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                fill(handle)
                handle.flush()
                os.fsync(handle.fileno())
            mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()
            os.chmod(tmp, mode)
        except OSError as exc:
            self.abort()
            raise NpuperfError(f"cannot write {path}: {exc.strerror or exc}") from None
        except BaseException:
            self.abort()
            raise

    def commit(self) -> list[Path]:
        """Rename every staged file into place. Renames within a directory do not fail in
        practice once the data is on disk; if one does, the rest are dropped and the error
        names the files that were already replaced."""
        done: list[Path] = []
        try:
            for tmp, path in self._staged:
                os.replace(tmp, path)
                done.append(path)
        except OSError as exc:
            self._staged = self._staged[len(done):]
            self.abort()
            replaced = ", ".join(p.name for p in done) or "none"
            raise NpuperfError(f"cannot put {exc.filename} in place ({exc.strerror or exc}); "
                               f"already replaced: {replaced}") from None
        self._staged = []
        return done

    def abort(self) -> None:
        for tmp, _ in self._staged:
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._staged = []

    def __enter__(self) -> WriteBatch:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def check_writable_dir(directory: str | Path) -> None:
    """Fail early, before any work, when `directory` (or the nearest existing parent it
    would be created in) cannot be written. Probes with a real file: permission bits say
    nothing for root or on read-only mounts."""
    path = Path(directory)
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise NpuperfError(f"cannot write to {path}: {probe} is not a directory")
    try:
        fd, name = tempfile.mkstemp(prefix=".npuperf-probe.", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise NpuperfError(f"cannot write to {path}: {exc.strerror or exc}") from None
