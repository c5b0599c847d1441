"""Reading and writing database CSVs without losing anything.

Tables are read with every cell as its exact text (no NaN, no type guessing), so that a
rewrite keeps unknown columns, column order and untouched values as they were. Writes go
through `transaction.Transaction`: staged beside the target, renamed into place together with
the other files of the same write, or not at all, under the lock of the directory written in
(`write_table`, `write_text`, `write_texts`: files outside a database's tables, such as
reports and caches; tables go through `database.Database`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

import pandas as pd

from .csvfile import header_fields, read_first_line, scan_csv
from .errors import ContractError, NpuperfError, clip, os_error
from .files import LFS_MAGIC, check_not_lfs, is_lfs_pointer
from .transaction import Transaction, write_frame

__all__ = ["LFS_MAGIC", "check_not_lfs", "check_writable_dir", "directory_transaction",
           "empty_table", "is_lfs_pointer", "read_header", "read_table", "write_table",
           "write_text", "write_texts"]


def _decode_error(path: str | Path, exc: UnicodeDecodeError) -> ContractError:
    return ContractError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                         f"{exc.start}); re-export the file as UTF-8")


def read_header(path: str | Path) -> list[str]:
    """Column names of a CSV (BOM tolerated; a bounded read). Raises ContractError on an
    empty file."""
    path = Path(path)
    check_not_lfs(path)
    header = header_fields(path)
    if not header or not any(h.strip() for h in header):
        raise ContractError(f"{path}: empty file (no header line)")
    return header


def _line_terminator(path: Path) -> str:
    return "\r\n" if read_first_line(path).endswith(b"\r\n") else "\n"


def read_table(path: str | Path) -> pd.DataFrame:
    """A database CSV as a frame of strings, exactly as written (empty cells are "").

    The bytes are checked first (`csvfile.scan_csv`): a NUL byte, an absurdly long line or a
    row with more fields than the header is an error naming its line. A row with fewer fields
    reads as "" in the missing cells; `frame.attrs["short_rows"]` says which (validate
    reports them).
    """
    path = Path(path)
    if not path.is_file():
        raise NpuperfError(f"{path}: not a regular file" if os.path.exists(path)
                           else f"{path}: no such file")
    header = read_header(path)
    duplicates = sorted(name for name, seen in Counter(header).items() if seen > 1)
    if duplicates:
        raise ContractError(f"{path}: duplicate column name(s) {', '.join(map(repr, duplicates))}")
    layout = scan_csv(path)
    if layout.long_count:
        first = layout.long[0]
        raise ContractError(f"{path}: row {first.row} (line {first.line}) has {first.fields} "
                            f"fields but the header has {layout.header_fields}" + (
                                f" ({layout.long_count} such rows)" if layout.long_count > 1
                                else ""))
    placeholders = [f"c{i}" for i in range(len(header))]
    try:
        frame = pd.read_csv(path, header=None, skiprows=1, names=placeholders, dtype=str,
                            keep_default_na=False, na_filter=False, encoding="utf-8-sig",
                            skip_blank_lines=True, index_col=False)
    except UnicodeDecodeError as exc:
        raise _decode_error(path, exc) from None
    except (pd.errors.ParserError, ValueError) as exc:
        raise ContractError(f"{path}: malformed CSV: "
                            f"{clip(str(exc).strip().splitlines()[-1], 160)}") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    frame.columns = header
    frame.attrs["lineterminator"] = _line_terminator(path)
    if layout.short_count:
        frame.attrs["short_rows"] = layout
    return frame


def empty_table(columns: list[str] | tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=object) for c in columns})


def write_table(frame: pd.DataFrame, path: str | Path, *, purpose: str = "write") -> None:
    """Write a table atomically, keeping its line terminator; empty cells stay empty."""
    with directory_transaction(Path(path).parent, purpose) as tx:
        tx.stage_with(path, lambda handle: _to_csv(frame, handle))


def write_text(path: str | Path, text: str, *, purpose: str = "write") -> None:
    write_texts(Path(path).parent, {Path(path): text}, purpose=purpose)


def write_texts(directory: str | Path,
                texts: Mapping[Path, str | Sequence[str] | Callable[[TextIO], object]], *,
                purpose: str = "write") -> None:
    """Text files under `directory` (reports, a cache), put in place together or none. A
    file's text may come in pieces, written one after another, or from a function that
    writes it to the file's text handle (a large run's JSON: one string of it, and its
    encoding, would each be another copy in memory)."""
    with directory_transaction(directory, purpose) as tx:
        for path, text in texts.items():
            if isinstance(text, str):
                tx.stage_text(path, text)
            elif callable(text):
                tx.stage_with(path, text)
            else:
                tx.stage_with(path, lambda handle, pieces=text: handle.writelines(pieces))


def directory_transaction(directory: str | Path, purpose: str) -> Transaction:
    """A transaction under the lock of the directory the files are written in: not of the
    database above it, whose lock the writing session may hold itself (reports go to
    `<db>/reports`). Two processes writing there at once: the second is refused.

    The directory is made here rather than by the lock, which would remove it again after a
    failed write: staging always made it, and it stays made."""
    with contextlib.suppress(OSError):  # the lock says why, naming the directory
        Path(directory).mkdir(parents=True, exist_ok=True)
    return Transaction(directory, purpose)


def _to_csv(frame: pd.DataFrame, handle) -> None:
    write_frame(frame, handle)


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
        fd, name = tempfile.mkstemp(prefix=f".npuperf-probe.{os.getpid()}.", dir=probe)
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise NpuperfError(f"cannot write to {path}: {exc.strerror or exc}") from None
