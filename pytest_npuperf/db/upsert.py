"""Merging new values into a table by signature, never overwriting what is not ours.

A row whose signature matches gets only the given columns set; every other cell, every unknown
column and every row without a match stays as it was. Unmatched updates are appended as new
rows (identity cells + values) unless the caller says they must not add rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .columns import (
    EP_SIZE,
    MICROBENCH_EXTRA_COLUMNS,
    PROFILING_EXTRA_COLUMNS,
    SIGNATURE_COLUMNS,
    contract_columns_for,
    legacy_renames,
    merge_column_order,
)
from .errors import CellError
from .signature import Signature, uncached_signature


@dataclass(frozen=True)
class RowUpdate:
    """Cells to set on the row(s) with one signature; `identity` fills a new row."""

    identity: Mapping[str, str]
    values: Mapping[str, str]
    fill_empty: Mapping[str, str] = field(default_factory=dict)
    """Cells set on a matching row only where that row's cell is empty."""


@dataclass
class UpsertResult:
    frame: pd.DataFrame
    added: int = 0
    updated: int = 0
    unmatched: list[Signature] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    bad_rows: int = 0


def format_number(value: float | int | None) -> str:
    """Shortest faithful text for a measured number; "" for missing or not finite (a mean
    that overflowed is no measurement, and readers reject `inf`)."""
    if value is None:
        return ""
    value = float(value)
    if not math.isfinite(value):
        return ""
    return f"{value:.10g}"


_NOT_FINITE = frozenset({"nan", "inf", "-inf"})


def format_numbers(values: Sequence[float | None]) -> list[str]:
    """`[format_number(v) for v in values]`, formatted by one C-level `%` operation: a
    write of 10^5 results formats millions of numbers."""
    if not values:
        return []
    numbers = (tuple(values) if None not in values
               else tuple(math.nan if v is None else v for v in values))
    text = ("%.10g\x1f" * len(numbers))[:-1] % numbers
    texts = text.split("\x1f")
    if "n" in text:  # nan, inf: no measurement
        texts = ["" if t in _NOT_FINITE else t for t in texts]
    return texts


def row_signatures(frame: pd.DataFrame, kernel_type: str
                   ) -> tuple[list[Signature | None], list[tuple[int, CellError]]]:
    """The signature of every row (None where a cell cannot be parsed) and those errors.

    Row numbers in errors are 1-based data rows (line = row + 1 with the header).
    """
    cols = [c if c in frame.columns else None for c in SIGNATURE_COLUMNS]
    ep = EP_SIZE if EP_SIZE in frame.columns else None
    n = len(frame)
    columns = [frame[c].tolist() if c else [""] * n for c in cols]
    columns.append(frame[ep].tolist() if ep else [""] * n)
    sigs: list[Signature | None] = []
    errors: list[tuple[int, CellError]] = []
    # Each distinct identity computed once per read, past the process-wide cache: a table of
    # 10^5 distinct rows would only churn it, and what it kept would outlive the table (and
    # be torn down, object by object, at the process's exit).
    known: dict[tuple, Signature] = {}
    for i, cells in enumerate(zip(*columns)):
        sig = known.get(cells)
        if sig is None:
            try:
                sig = known[cells] = uncached_signature(kernel_type, *cells)
            except CellError as exc:
                errors.append((i + 1, exc))
        sigs.append(sig)
    return sigs, errors


def canonical_order(kernel_type: str) -> tuple[str, ...]:
    return (*contract_columns_for(kernel_type), *PROFILING_EXTRA_COLUMNS,
            *MICROBENCH_EXTRA_COLUMNS)


def migrate_legacy(frame: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    renames = legacy_renames(list(frame.columns))
    if renames:
        attrs = dict(frame.attrs)
        frame = frame.rename(columns=renames)
        frame.attrs.update(attrs)
    return frame, renames


def ensure_columns(frame: pd.DataFrame, kernel_type: str, wanted: Iterable[str]) -> pd.DataFrame:
    order = merge_column_order(list(frame.columns), wanted, canonical_order(kernel_type))
    if order == list(frame.columns):
        return frame
    attrs = dict(frame.attrs)
    frame = frame.reindex(columns=order, fill_value="")
    frame.attrs.update(attrs)
    return frame


def apply_updates(frame: pd.DataFrame, kernel_type: str, updates: Mapping[Signature, RowUpdate],
                  *, add_new: bool = True, signatures: Sequence[Signature | None] | None = None
                  ) -> UpsertResult:
    """Set the update values on matching rows; append the rest when `add_new`."""
    frame, renamed = migrate_legacy(frame)
    if signatures is None:
        signatures, errors = row_signatures(frame, kernel_type)
        bad_rows = len(errors)
    else:
        bad_rows = sum(s is None for s in signatures)
    # Columns in first-seen order; sets, not lists, for membership (10^5 updates).
    key_sets = {(tuple(u.values), tuple(u.fill_empty)) for u in updates.values()}
    value_columns = list(dict.fromkeys(c for values, fill in key_sets for c in (*values, *fill)))
    frame = ensure_columns(frame, kernel_type, value_columns)
    fill_columns = {c for _, fill in key_sets for c in fill}
    current = {c: frame[c].tolist() for c in value_columns if c in fill_columns}

    rows: list[tuple[int, RowUpdate]] = []
    matched: set[Signature] = set()
    for pos, sig in enumerate(signatures):
        update = updates.get(sig) if sig is not None else None
        if update is not None:
            matched.add(sig)
            rows.append((pos, update))
    updated_rows = len(rows)
    all_positions = [pos for pos, _ in rows]
    for col in value_columns:
        texts = [update.values.get(col) for _, update in rows]
        if col in fill_columns:
            texts = [update.fill_empty.get(col) if text is None
                     and not str(current[col][pos]).strip() else text
                     for text, (pos, update) in zip(texts, rows)]
        if None in texts:
            kept = [(pos, text) for pos, text in zip(all_positions, texts) if text is not None]
            positions, new_values = [p for p, _ in kept], [t for _, t in kept]
        else:
            positions, new_values = all_positions, texts
        _assign(frame, col, positions, new_values)

    unmatched = [sig for sig in updates if sig not in matched]
    added = 0
    if add_new and unmatched:
        rows = []
        for sig in unmatched:
            update = updates[sig]
            row = dict.fromkeys(frame.columns, "")
            row.update(update.fill_empty)
            row.update(update.identity)
            row.update(update.values)
            rows.append(row)
        extra_cols = [c for r in rows for c in r if c not in frame.columns]
        frame = ensure_columns(frame, kernel_type, extra_cols)
        attrs = dict(frame.attrs)
        frame = pd.concat([frame, pd.DataFrame(rows, columns=frame.columns, dtype=object)],
                          ignore_index=True)
        frame.attrs.update(attrs)
        added = len(rows)
        unmatched = []
    return UpsertResult(frame=frame, added=added, updated=updated_rows, unmatched=unmatched,
                       renamed=renamed, bad_rows=bad_rows)


def _assign(frame: pd.DataFrame, column: str, positions: list[int], texts: list[str]) -> None:
    """Set the cells of `column` at `positions` (one column operation, not a cell each)."""
    if positions:
        frame[column] = _with(frame, column, positions, texts)


def _with(frame: pd.DataFrame, column: str, positions, texts) -> np.ndarray:
    """The cells of `column` with those at `positions` replaced by `texts`."""
    cells = frame.iloc[:, frame.columns.get_loc(column)].astype(object).to_numpy(copy=True)
    cells[positions] = texts
    return cells


def set_columns(frame: pd.DataFrame, kernel_type: str,
                columns: Mapping[str, Sequence[str | None]],
                rows: Sequence[Sequence[int]]) -> pd.DataFrame:
    """`apply_updates` without adding rows, given column-wise: update i sets, for each
    column, `columns[column][i]` (None: left alone) on the rows at positions `rows[i]`.
    A column no update sets is not added."""
    frame, _ = migrate_legacy(frame)
    # Each column looked through for None once (10^5 cells x tens of columns).
    left = {c: texts.count(None) for c, texts in columns.items()}
    columns = {c: texts for c, texts in columns.items() if left[c] < len(texts)}
    frame = ensure_columns(frame, kernel_type, list(columns))
    if all(len(r) == 1 for r in rows):  # the usual case: one row per update
        owner, positions = None, np.array([r[0] for r in rows], np.intp)
    else:
        pairs = [(i, p) for i, r in enumerate(rows) for p in r]
        owner, positions = [i for i, _ in pairs], np.array([p for _, p in pairs], np.intp)
    # Every row set, in order (a backfill of the whole table): the old cells are not needed.
    whole = len(positions) == len(frame) and bool((positions == np.arange(len(frame))).all())
    changed: dict[str, np.ndarray] = {}
    for column, texts in columns.items():
        if owner is not None:
            texts = [texts[i] for i in owner]
        values = np.fromiter(texts, object, len(texts))
        if left[column] and (owner is None or None in texts):
            kept = np.fromiter((t is not None for t in texts), bool, len(texts))
            changed[column] = _with(frame, column, positions[kept], values[kept])
        elif whole:
            changed[column] = values
        elif len(positions):
            changed[column] = _with(frame, column, positions, values)
    if not changed:
        return frame
    if not frame.columns.is_unique:
        for column, cells in changed.items():
            frame[column] = cells
        return frame
    # One new frame, not a column set at a time: setting a column of a wide frame copies
    # the block holding the others (tens of columns x 10^5 rows, each time).
    rebuilt = pd.DataFrame({c: changed[c] if c in changed else frame[c]
                            for c in frame.columns}, index=frame.index, columns=frame.columns)
    rebuilt.attrs.update(frame.attrs)
    return rebuilt
