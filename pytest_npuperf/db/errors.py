"""Errors raised by the data-contract layer.

Every error carries a one-line message meant for the user: the CLI prints it as is and
exits with the error's `exit_code` (2: a usage mistake, such as a bad option, a missing file or
a locked database; 1: bad data, such as a malformed CSV or cell), the plugin turns it into a
usage error or a failed case. Messages quote user text through `clip`, so that a hostile cell
(a megabyte of NUL bytes) never becomes a megabyte-long message.
"""

from __future__ import annotations

import unicodedata

EXIT_USAGE = 2
EXIT_DATA = 1
_CLIP = 80


def clip(text: object, limit: int = _CLIP) -> str:
    """`repr(text)`, cut to about `limit` characters: safe to put in a one-line message."""
    shown = repr(text)
    if len(shown) <= limit:
        return shown
    return f"{shown[:limit]}... ({len(shown):,} characters)"


def printable(text: object) -> str:
    """`text` with its control characters escaped (`\\x1b`): a terminal escape or a bell in a
    name from a hostile file is shown, never sent to the terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if unicodedata.category(c)[0] != "C" or c in " \t\n" else repr(c)[1:-1]
                   for c in text)


class NpuperfError(Exception):
    """Base class: a problem the user can fix, described in one line."""

    exit_code = EXIT_USAGE


class ContractError(NpuperfError):
    """A cell, header or file does not follow the format (docs/format.md)."""

    exit_code = EXIT_DATA


class CellError(ContractError):
    """One cell could not be parsed; says which file, row and column when known."""

    def __init__(self, message: str, *, column: str | None = None, row: int | None = None,
                 path: str | None = None) -> None:
        self.column = column
        self.row = row
        self.path = path
        self.reason = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.path:
            where.append(str(self.path))
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column:
            where.append(f"column '{self.column}'")
        return f"{', '.join(where)}: {self.reason}" if where else self.reason

    def located(self, *, path: str | None = None, row: int | None = None,
                column: str | None = None) -> CellError:
        """A copy of this error with the location filled in where it was unknown."""
        return CellError(self.reason, column=self.column or column,
                         row=self.row if self.row is not None else row,
                         path=self.path or path)


class LfsPointerError(ContractError):
    """A Git LFS pointer file stands where a CSV with data should be."""


class VersionError(NpuperfError):
    """A version component or version directory is invalid or cannot be detected."""


class UnsafeNameError(NpuperfError):
    """A device, version or kernel name that would not be a safe path component."""


def os_error(path: object, exc: OSError, action: str = "cannot read") -> NpuperfError:
    """One line for an OSError on `path` (permission denied, I/O error, ...)."""
    reason = exc.strerror or type(exc).__name__
    return NpuperfError(f"{path}: {action}: {reason}")
