"""Errors raised by the data-contract layer.

Every error carries a one-line message meant for the user: the CLI prints it as is and
exits non-zero, the plugin turns it into a usage error or a failed case.
"""

from __future__ import annotations


class NpuperfError(Exception):
    """Base class: a problem the user can fix, described in one line."""


class ContractError(NpuperfError):
    """A cell, header or file does not follow CONTRACT.md."""


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
