"""Hardware counters of many results held as one matrix (results x counters, NaN = the
profile has no such counter for that result).

A profile of 10^5 cases gives each result 25 mean counters: as a dict per result that is
about 1.8 kB each (380 MB at 2 x 10^5 results). Each result's `counters` is instead a
read-only mapping onto its row of the shared matrix; the write formats the counter columns
straight from the matrix (`shared_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np


class CounterMatrix:
    """Counter values of a group of results: `values[row, j]` is counter `names[j]`."""

    __slots__ = ("column", "counts", "names", "values")

    def __init__(self, names: Sequence[str], values: np.ndarray) -> None:
        self.names = tuple(names)
        self.values = np.asarray(values, dtype=np.float64)
        self.column = {name: j for j, name in enumerate(self.names)}
        # Per row, how many counters it has: reports ask every result whether it has any.
        self.counts = (~np.isnan(self.values)).sum(axis=1).tolist()

    def rows(self) -> list[CounterRow]:
        return [CounterRow(self, row) for row in range(len(self.values))]


class CounterRow(Mapping[str, float]):
    """One result's counters: the counters of its matrix row that are not NaN."""

    __slots__ = ("matrix", "row")

    def __init__(self, matrix: CounterMatrix, row: int) -> None:
        self.matrix = matrix
        self.row = row

    def __getitem__(self, name: str) -> float:
        value = float(self.matrix.values[self.row, self.matrix.column[name]])
        if value != value:
            raise KeyError(name)
        return value

    def _present(self) -> list[str]:
        values = self.matrix.values[self.row].tolist()
        return [n for n, v in zip(self.matrix.names, values) if v == v]

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return self.matrix.counts[self.row]

    def __repr__(self) -> str:
        return repr(dict(self))

    # Copies and pickles are plain dicts: a copy must not hold (or deep-copy) the matrix.
    def __copy__(self) -> dict[str, float]:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict[str, float]:
        return dict(self)

    def __reduce__(self):
        return dict, (dict(self),)


def shared_rows(counters: Sequence[Mapping[str, float]]
                ) -> tuple[CounterMatrix, np.ndarray] | None:
    """When every non-empty mapping of `counters` is a row of one matrix: that matrix and,
    per entry, its row (-1 for an empty mapping); else None."""
    matrix = None
    rows = np.full(len(counters), -1, np.intp)
    for index, counter in enumerate(counters):
        if type(counter) is CounterRow:
            if matrix is None:
                matrix = counter.matrix
            elif counter.matrix is not matrix:
                return None
            rows[index] = counter.row
        elif counter:
            return None
    return (matrix, rows) if matrix is not None else None
