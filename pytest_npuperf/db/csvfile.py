"""Bounded, streamed checks of a CSV file before a parser builds anything from it.

A parser handed hostile bytes (a table padded with a gigabyte of NUL bytes, a binary file, a
line with no end) buffers the whole "cell" before it can complain, and then quotes it in its
error. `scan_csv` reads the file once in blocks of `BLOCK` bytes, with numpy on each block, and
stops at the first NUL byte or at a line longer than `MAX_LINE_BYTES`, naming the line: memory
stays at a few blocks whatever the file holds.

The same pass counts the fields of every record (commas outside double quotes, records ending at
newlines outside quotes, as the csv module and pandas' C parser split them), so that rows with
fewer or more fields than the header are found with their line numbers, which a parser cannot
report (pandas fills a missing trailing field with "" and drops extra ones). A quote that opens
in the middle of an unquoted field (where parsers take it literally) makes the counts
ambiguous: the file is then counted again with the csv module, exactly.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ContractError, clip, os_error
from .files import MAX_HEADER_BYTES, MAX_LINE_BYTES, open_binary

BLOCK = 1 << 20
_EXAMPLES = 20
_BOM = b"\xef\xbb\xbf"
_QUOTE, _COMMA, _NL, _CR = 34, 44, 10, 13


@dataclass
class BadRecord:
    line: int  # physical line where the record starts (the header is line 1)
    fields: int
    row: int = 0  # data row (1-based, blank lines not counted), as tables number them


@dataclass
class CsvLayout:
    """Records of a CSV file by field count. Record 0 is the header."""

    path: Path
    header_fields: int = 0
    records: int = 0  # data records, blank lines excluded
    short: list[BadRecord] = field(default_factory=list)  # first few
    long: list[BadRecord] = field(default_factory=list)
    short_count: int = 0
    long_count: int = 0
    skip: list[int] = field(default_factory=list)  # record indices (pandas' skiprows), short rows
    skipped_rows: list[int] = field(default_factory=list)  # their data row numbers

    def data_row(self, kept: int) -> int:
        """The file's data row number of the `kept`-th row read when the short rows are
        skipped (1-based both)."""
        import bisect

        row = kept
        while True:
            skipped = bisect.bisect_right(self.skipped_rows, row)
            if row - skipped == kept:
                return row
            row = kept + skipped

    def describe(self, kind: str) -> str:
        """`3 row(s) with fewer fields than the header (lines 5, 9, 12)`."""
        count, examples = ((self.short_count, self.short) if kind == "short"
                           else (self.long_count, self.long))
        what = "fewer" if kind == "short" else "more"
        lines = ", ".join(str(r.line) for r in examples[:5])
        more = " ..." if count > 5 else ""
        return (f"{count:,} row(s) with {what} fields than the header's {self.header_fields} "
                f"(line{'s' if count > 1 else ''} {lines}{more})")


def _nul_error(path: Path, offset: int, line: int) -> ContractError:
    return ContractError(f"{path}: NUL byte at line {line} (byte offset {offset:,}): a binary "
                         f"or corrupted file, not CSV text")


def _long_line_error(path: Path, line: int) -> ContractError:
    return ContractError(f"{path}: line {line} is longer than {MAX_LINE_BYTES // 2 ** 20} MiB: "
                         f"not a CSV table (binary or corrupted file?)")


def read_first_line(path: str | Path) -> bytes:
    """The header line's bytes (BOM removed), read with a bound: a file without a newline in
    its first MAX_HEADER_BYTES, or with a NUL byte there, is an error."""
    path = Path(path)
    with open_binary(path) as handle:
        try:
            head = handle.read(MAX_HEADER_BYTES + 1)
        except OSError as exc:
            raise os_error(path, exc) from None
    head = head.removeprefix(_BOM)
    if head.startswith(_BOM):  # readers drop one: the header's first name would keep the other
        raise ContractError(f"{path}: starts with two UTF-8 byte-order marks (a file saved "
                            f"with a BOM twice); remove the second and try again")
    end = head.find(b"\n")
    line = head if end < 0 else head[:end + 1]
    if b"\0" in line:
        raise _nul_error(path, line.find(b"\0"), 1)
    if end < 0 and len(head) > MAX_HEADER_BYTES:
        raise ContractError(f"{path}: no line end in the first {MAX_HEADER_BYTES // 2 ** 20} MiB: "
                            f"not a CSV table (binary or corrupted file?)")
    return line


def header_fields(path: str | Path) -> list[str]:
    """Column names of the header line (bounded read; BOM tolerated)."""
    path = Path(path)
    line = read_first_line(path)
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (byte 0x{line[exc.start]:02x} at offset "
                            f"{exc.start}); re-export the file as UTF-8") from None
    try:
        return next(csv.reader(io.StringIO(text)), [])
    except csv.Error as exc:
        raise ContractError(f"{path}: malformed header line: {exc}") from None


class _Counter:
    """Field counts per record across blocks (a record may continue over a block end)."""

    def __init__(self, path: Path, keep_skip: bool) -> None:
        self.path = path
        self.keep_skip = keep_skip
        self.layout = CsvLayout(path)
        self.in_quotes = False
        self.record = 0  # index of the record being read (0: the header)
        self.carry_commas = 0  # of the record being read, before this block
        self.carry_bytes = 0
        self.record_line = 1  # physical line where the record being read starts
        self.lines = 1  # physical line at the start of the block
        self.line_bytes = 0  # bytes of the physical line being read, before this block
        self.offset = 0
        self.prev = _NL  # the byte before the block
        self.ambiguous = False

    def feed(self, block: bytes) -> None:
        nul = block.find(b"\0")
        if nul >= 0:
            line = self.lines + block.count(b"\n", 0, nul)
            raise _nul_error(self.path, self.offset + nul, line)
        arr = np.frombuffer(block, dtype=np.uint8)
        # Quotes and newlines found in one pass, already in order (merging two lists and
        # sorting them took a third of the scan).
        marks = np.flatnonzero((arr == _QUOTE) | (arr == _NL))
        is_nl = arr[marks] == _NL
        all_nl = marks[is_nl]
        self._check_line_lengths(all_nl, len(block))
        nl, before_nl, unquoted_commas = self._outside_quotes(arr, marks, is_nl)
        if len(nl):
            self._records(arr, nl, all_nl, before_nl)
            self.carry_commas = int(unquoted_commas - before_nl[-1])
            self.carry_bytes = len(block) - int(nl[-1]) - 1
            self.record_line = self.lines + int(np.searchsorted(all_nl, nl[-1], side="right"))
        else:
            self.carry_commas += unquoted_commas
            self.carry_bytes += len(block)
        self.lines += len(all_nl)
        self.offset += len(block)
        self.prev = block[-1]

    def _outside_quotes(self, arr: np.ndarray, marks: np.ndarray, is_nl: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, int]:
        """The newlines outside quoted fields, the commas outside quoted fields before each of
        them, and all commas outside quoted fields in the block (`marks`: the positions of
        its quotes and newlines, in order; `is_nl`: which of them are newlines).

        The block is cut at every quote and newline; one `reduceat` counts the commas of each
        piece, and a piece that starts inside a quoted field does not count. (Finding every
        comma's position instead costs several times more: a table is mostly commas.)
        """
        is_quote = ~is_nl
        quotes = marks[is_quote]
        parity = 1 if self.in_quotes else 0
        if len(quotes):
            self._check_openings(arr, quotes, parity)
        upto = np.cumsum(is_quote)  # per mark, the quotes at or before it
        points = marks
        if not len(points) or points[0] != 0:
            points = np.concatenate(([0], marks))
            upto = np.concatenate(([0], upto))  # no quote at byte 0 (else it were a mark)
        pieces = np.add.reduceat(arr == _COMMA, points, dtype=np.int64)
        inside = ((upto + parity) & 1) == 1
        pieces[inside] = 0
        counted = np.cumsum(pieces)
        at = np.flatnonzero(is_nl) + (len(points) - len(marks))  # the newlines in `points`
        at = at[((upto[at] + parity) & 1) == 0]
        nl = points[at]
        before_nl = np.where(at > 0, counted[np.maximum(at - 1, 0)], 0)
        self.in_quotes = bool((len(quotes) + parity) & 1)
        return nl, before_nl, int(counted[-1])

    def _records(self, arr: np.ndarray, nl: np.ndarray, all_nl: np.ndarray,
                 before_nl: np.ndarray) -> None:
        """Classify the records that end in this block (at the unquoted newlines `nl`, with
        `before_nl` unquoted commas before each in the block)."""
        fields = np.diff(before_nl, prepend=0) + 1
        fields[0] += self.carry_commas
        starts = np.concatenate(([0], nl[:-1] + 1))
        lengths = nl - starts
        lengths[0] += self.carry_bytes
        before_end = np.where(nl > 0, arr[np.maximum(nl - 1, 0)], self.prev)
        blank = (lengths == 0) | ((lengths == 1) & (before_end == _CR))
        lines = self.lines + np.searchsorted(all_nl, starts - 1, side="right")
        lines[0] = self.record_line
        first = 0
        layout = self.layout
        if self.record == 0:
            layout.header_fields = int(fields[0])
            first = 1
        data = ~blank[first:]
        counts = fields[first:]
        rows = layout.records + np.cumsum(data)
        layout.records += int(data.sum())
        bad = np.flatnonzero(data & (counts != layout.header_fields)) + first
        for index in bad.tolist():
            record = BadRecord(int(lines[index]), int(fields[index]), int(rows[index - first]))
            if record.fields < layout.header_fields:
                layout.short_count += 1
                examples = layout.short
            else:
                layout.long_count += 1
                examples = layout.long
            if len(examples) < _EXAMPLES:
                examples.append(record)
        if self.keep_skip and len(bad):
            short = bad[fields[bad] < layout.header_fields]
            layout.skip.extend((short + self.record).tolist())
            layout.skipped_rows.extend(rows[short - first].tolist())
        self.record += len(nl)

    def _check_line_lengths(self, all_nl: np.ndarray, size: int) -> None:
        if not len(all_nl):
            self.line_bytes += size
            if self.line_bytes > MAX_LINE_BYTES:
                raise _long_line_error(self.path, self.lines)
            return
        first = int(all_nl[0]) + self.line_bytes
        if first > MAX_LINE_BYTES:
            raise _long_line_error(self.path, self.lines)
        if len(all_nl) > 1:
            gaps = np.diff(all_nl) - 1
            worst = int(np.argmax(gaps))
            if gaps[worst] > MAX_LINE_BYTES:
                raise _long_line_error(self.path, self.lines + worst + 1)
        self.line_bytes = size - int(all_nl[-1]) - 1
        if self.line_bytes > MAX_LINE_BYTES:
            raise _long_line_error(self.path, self.lines + len(all_nl))

    def _check_openings(self, arr: np.ndarray, quotes: np.ndarray, parity: int) -> None:
        """A quote that opens a quoted field must start the field; otherwise parsers take it
        literally and the parity count is wrong: the caller falls back to an exact count."""
        opening = quotes[((np.arange(len(quotes)) + parity) & 1) == 0]
        if not len(opening):
            return
        before = np.where(opening > 0, arr[np.maximum(opening - 1, 0)], self.prev)
        ok = np.isin(before, (_COMMA, _NL, _CR, _QUOTE))  # `""`: an escaped quote
        if self.offset == 0 and arr[:3].tobytes() == _BOM:
            ok |= opening == len(_BOM)
        if not ok.all():
            self.ambiguous = True

    def finish(self) -> CsvLayout:
        if self.carry_bytes:  # a last record without a line end
            blank = self.carry_bytes == 1 and self.prev == _CR
            arr = np.frombuffer(b"\n", dtype=np.uint8)
            if not blank:
                self._records(arr, np.array([0]), np.array([0]), np.array([0]))
        return self.layout


def _exact_layout(path: Path, keep_skip: bool) -> CsvLayout:
    """The same counts with the csv module (slow, exact): for files with literal quotes."""
    layout = CsvLayout(path)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            reader = csv.reader(handle)
            line = 1
            for record, row in enumerate(reader):
                fields = len(row)
                if record == 0:
                    layout.header_fields = fields
                elif row:
                    layout.records += 1
                    if fields != layout.header_fields:
                        bad = BadRecord(line, fields, layout.records)
                        short = fields < layout.header_fields
                        if short:
                            layout.short_count += 1
                        else:
                            layout.long_count += 1
                        examples = layout.short if short else layout.long
                        if len(examples) < _EXAMPLES:
                            examples.append(bad)
                        if keep_skip and short:
                            layout.skip.append(record)
                            layout.skipped_rows.append(layout.records)
                line = reader.line_num + 1
    except csv.Error as exc:
        raise ContractError(f"{path}: malformed CSV: {clip(str(exc), 120)}") from None
    except UnicodeDecodeError as exc:
        raise ContractError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at "
                            f"offset {exc.start}); re-export the file as UTF-8") from None
    except OSError as exc:
        raise os_error(path, exc) from None
    return layout


def scan_csv(path: str | Path, *, keep_skip: bool = False) -> CsvLayout:
    """Check a CSV file's bytes (no NUL, no absurd line) and count the fields of its records.

    With `keep_skip`, the layout lists the record index of every row with fewer fields than the
    header (pandas' `skiprows`); otherwise only counts and a few examples.
    """
    path = Path(path)
    counter = _Counter(path, keep_skip)
    with open_binary(path) as handle:
        try:
            while True:
                block = handle.read(BLOCK)
                if not block:
                    break
                counter.feed(block)
        except OSError as exc:
            raise os_error(path, exc) from None
    layout = counter.finish()
    if counter.ambiguous or counter.in_quotes:
        # A literal quote inside a field, or a quote never closed: count as parsers do.
        return _exact_layout(path, keep_skip)
    return layout
