"""Checking database files against the contract (`npuperf validate`), and against what the
simulator reading them needs (`consumer_check`: warnings, or problems with `--consumer`)."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .columns import (
    AVERAGE_DURATION,
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    FORMAT_COLUMNS,
    IDENTITY_COLUMNS,
    MICROBENCH_MEDIAN_DURATION,
    MICROBENCH_MIN_DURATION,
    MICROBENCH_STD_DURATION,
    PROFILING_AVERAGE_DURATION,
    PROFILING_MAX_DURATION,
    PROFILING_MEDIAN_DURATION,
    PROFILING_MIN_DURATION,
    PROFILING_STD_DURATION,
    SHAPE_COLUMNS,
    is_legacy_profiling_schema,
    legacy_renames,
    parse_duration,
    parse_float,
)
from .consumer_check import kernel_table_warnings, op_mapping_warnings
from .database import walk_files
from .errors import CellError, NpuperfError
from .layout import OP_MAPPING_FILE, REPORTS_DIR, kernel_type_of_file
from .measured_stack import MEASURED_STACK_FILE
from .provenance import (
    PROVENANCE_FILE,
    measured_lines,
    reuse_problems,
    summary_lines,
)
from .shapes import is_known_dtype, parse_shapes, split_list
from .table import read_table
from .transaction import pending_journals, recover_if_free
from .upsert import row_signatures

# Durations that must be > 0 when present; spreads that must be >= 0.
_POSITIVE = (AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, PROFILING_MEDIAN_DURATION,
             PROFILING_MIN_DURATION, PROFILING_MAX_DURATION, MICROBENCH_MEDIAN_DURATION,
             MICROBENCH_MIN_DURATION)
_NON_NEGATIVE = (PROFILING_STD_DURATION, MICROBENCH_STD_DURATION)
_NO_VALUE = frozenset({"", "N/A", "NA", "NAN"})
# A format name, with the sub-format suffix real exports carry (`NC1HWC0:1`, `FRACTAL_Z:1`).
_FORMAT_TOKEN = re.compile(r"^[A-Za-z0-9_]+(?::[0-9]+)?$")
_COLLECTIVE_REQUIRED = ("message_bytes", "num_devices")
_COLLECTIVE_DURATIONS = ("Duration(us)", "Average Duration(us)")
_MAX_SHOWN = 20


@dataclass
class Problem:
    message: str
    row: int | None = None
    column: str | None = None

    def render(self) -> str:
        where = []
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.column:
            where.append(f"column '{self.column}'")
        return f"{', '.join(where)}: {self.message}" if where else self.message


@dataclass
class FileReport:
    path: Path
    rows: int = 0
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # What the simulator reading the database would miss (`--consumer` makes them problems).
    warnings: list[Problem] = field(default_factory=list)
    what: str = ""  # shown instead of the row count (op_mapping.yaml)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        head = f"{'OK  ' if self.ok else 'FAIL'} {self.path} ({self.what or f'{self.rows} rows'}"
        head += ")" if self.ok else f", {len(self.problems)} problem(s))"
        lines = [head]
        lines += [f"     note: {n}" for n in self.notes]
        lines += [f"     {p.render()}" for p in self.problems[:_MAX_SHOWN]]
        if len(self.problems) > _MAX_SHOWN:
            lines.append(f"     ... and {len(self.problems) - _MAX_SHOWN} more")
        lines += [f"     warning: {p.render()}" for p in self.warnings[:_MAX_SHOWN]]
        if len(self.warnings) > _MAX_SHOWN:
            lines.append(f"     ... and {len(self.warnings) - _MAX_SHOWN} more warnings")
        return "\n".join(lines)


def _check_duration_cells(frame: pd.DataFrame, report: FileReport) -> None:
    for column in (*_POSITIVE, *_NON_NEGATIVE):
        if column not in frame.columns:
            continue
        strictly = column in _POSITIVE
        for i, text in enumerate(frame[column].tolist(), start=1):
            stripped = text.strip()
            if stripped.upper() in _NO_VALUE:
                continue
            value = parse_float(stripped)
            if value is None:
                report.problems.append(Problem(f"unparsable duration {text!r}", i, column))
                continue
            if not math.isfinite(value) or value < 0 or (strictly and value == 0):
                bound = "> 0" if strictly else ">= 0"
                report.problems.append(Problem(
                    f"invalid duration {text!r} (must be a finite number {bound}; "
                    f"leave the cell empty when there is no measurement)", i, column))


def _check_slots(frame: pd.DataFrame, report: FileReport) -> None:
    pairs = ((SHAPE_COLUMNS[0], "Input Data Types", "Input Formats"),
             (SHAPE_COLUMNS[1], "Output Data Types", "Output Formats"))
    for shape_col, dtype_col, format_col in pairs:
        if shape_col not in frame.columns:
            continue
        lists = [(c, frame[c].tolist()) for c in (dtype_col, format_col) if c in frame.columns]
        seen: dict[tuple[str, ...], list[Problem]] = {}
        for i, shape_text in enumerate(frame[shape_col].tolist(), start=1):
            key = (shape_text, *(values[i - 1] for _, values in lists))
            if key in seen:
                report.problems.extend(Problem(p.message, i, p.column) for p in seen[key])
                continue
            found = _slot_problems(shape_col, shape_text, lists, i - 1)
            seen[key] = found
            report.problems.extend(Problem(p.message, i, p.column) for p in found)


def _slot_problems(shape_col: str, shape_text: str, lists: list[tuple[str, list[str]]],
                   index: int) -> list[Problem]:
    try:
        slots = parse_shapes(shape_text)
    except CellError as exc:
        return [Problem(exc.reason, column=shape_col)]
    found = []
    for column, values in lists:
        tokens = split_list(values[index])
        if len(tokens) != len(slots) and not (not slots and not tokens):
            found.append(Problem(f"{len(tokens)} entries for {len(slots)} shape slot(s) of "
                                 f"{shape_col!r}", column=column))
        for token in tokens:
            if column in FORMAT_COLUMNS:
                if not _FORMAT_TOKEN.match(token.strip() or "NULL"):
                    found.append(Problem(f"unparsable format {token!r}", column=column))
            elif not is_known_dtype(token):
                found.append(Problem(f"unknown dtype {token!r}", column=column))
    return found


def _check_duplicates(frame: pd.DataFrame, kernel_type: str, report: FileReport) -> None:
    sigs, _ = row_signatures(frame, kernel_type)
    rows_by_sig: dict[object, list[int]] = defaultdict(list)
    for i, sig in enumerate(sigs, start=1):
        if sig is not None:
            rows_by_sig[sig].append(i)
    for rows in rows_by_sig.values():
        if len(rows) > 1:
            shown = ", ".join(map(str, rows[:5])) + (" ..." if len(rows) > 5 else "")
            report.problems.append(Problem(f"duplicate signature: rows {shown} describe the same "
                                           f"kernel call", rows[0]))


def _open(path: Path) -> tuple[FileReport, pd.DataFrame | None]:
    """The file's report, and its table unless it cannot be read (then that is the problem)."""
    report = FileReport(path)
    try:
        frame = read_table(path)
    except NpuperfError as exc:
        report.problems.append(Problem(str(exc).removeprefix(f"{path}: ")))
        return report, None
    report.rows = len(frame)
    short = frame.attrs.pop("short_rows", None)
    if short is not None:  # a row of just `hello` in a 62-column table is not a row
        for bad in short.short[:_MAX_SHOWN]:
            report.problems.append(Problem(f"line {bad.line} has {bad.fields} field(s), the "
                                           f"header has {short.header_fields} (truncated or "
                                           f"hand-edited row?)", bad.row))
        if short.short_count > _MAX_SHOWN:
            report.problems.append(Problem(f"... {short.short_count - _MAX_SHOWN} more row(s) "
                                           f"with fewer fields than the header"))
    return report, frame


def validate_kernel_table(path: Path, *, consumer: bool = False) -> FileReport:
    """The contract checks of one kernel CSV, and what the simulator cannot read in it
    (warnings; problems with `consumer`)."""
    report, frame = _open(path)
    if frame is None:
        return report
    found = [Problem(message, row, column or None) for row, column, message
             in kernel_table_warnings(frame, kernel_type_of_file(path))]
    (report.problems if consumer else report.warnings).extend(found)
    kernel_type = kernel_type_of_file(path)
    columns = list(frame.columns)
    required = list(IDENTITY_COLUMNS) + ([EP_SIZE] if kernel_type == DISPATCH_FFN_COMBINE else [])
    missing = [c for c in required if c not in columns]
    if missing:
        report.problems.append(Problem(f"missing column(s): {', '.join(missing)}"))
    renames = legacy_renames(columns)
    if renames:
        kind = "old fixture schema (profiling values under Average/Median/Std)" \
            if is_legacy_profiling_schema(columns) else "legacy column names"
        report.notes.append(f"{kind}: {', '.join(f'{a} -> {b}' for a, b in renames.items())} "
                            f"on the next rewrite")
        frame = frame.rename(columns=renames)
    _check_slots(frame, report)
    _check_duration_cells(frame, report)
    if not missing:
        _check_duplicates(frame, kernel_type, report)
    report.problems.sort(key=lambda p: (p.row or 0))
    return report


def _check_int_column(frame: pd.DataFrame, column: str, report: FileReport) -> None:
    for i, text in enumerate(frame[column].tolist(), start=1):
        stripped = text.strip()
        if not (stripped.isascii() and stripped.isdigit() and int(stripped) > 0):
            report.problems.append(Problem(f"expected a positive integer, got {text!r}", i, column))


def validate_collective_table(path: Path) -> FileReport:
    report, frame = _open(path)
    if frame is None:
        return report
    missing = [c for c in _COLLECTIVE_REQUIRED if c not in frame.columns]
    durations = [c for c in _COLLECTIVE_DURATIONS if c in frame.columns]
    if not durations:
        missing.append("Duration(us)")
    if missing:
        report.problems.append(Problem(f"missing column(s): {', '.join(missing)}"))
        return report
    for column in _COLLECTIVE_REQUIRED:
        _check_int_column(frame, column, report)
    for i, text in enumerate(frame[durations[0]].tolist(), start=1):
        if parse_duration(text) is None:
            report.problems.append(Problem(f"invalid duration {text!r}", i, durations[0]))
    if "dtype" in frame.columns:
        for i, text in enumerate(frame["dtype"].tolist(), start=1):
            if not is_known_dtype(text):
                report.problems.append(Problem(f"unknown dtype {text!r}", i, "dtype"))
    if "topology_tier" in frame.columns:
        for i, text in enumerate(frame["topology_tier"].tolist(), start=1):
            if text.strip() not in {"0", "1", "2"}:
                report.problems.append(Problem(f"topology_tier must be 0, 1 or 2, got {text!r}",
                                               i, "topology_tier"))
    report.problems.sort(key=lambda p: (p.row or 0))
    return report


def is_collective_file(path: Path) -> bool:
    return path.name.startswith("hcom_")


def database_files(path: Path) -> Iterator[Path]:
    """Every CSV of a database under `path` (a file or directory), reports and hidden files
    excluded; a directory that cannot be read is an error naming it."""
    if not path.is_dir():
        yield path
        return
    yield from walk_files(path, lambda parts: parts[-1].endswith(".csv")
                          and REPORTS_DIR not in parts[:-1]
                          and not any(p.startswith(".") for p in parts))


def validate_op_mapping(directory: Path, *, consumer: bool = False) -> FileReport:
    """The op_mapping.yaml of a directory holding kernel tables, as the simulator needs it."""
    report = FileReport(directory / OP_MAPPING_FILE, what="operator mappings")
    found = [Problem(message) for message in op_mapping_warnings(directory)]
    (report.problems if consumer else report.warnings).extend(found)
    return report


def validate_provenance(directory: Path) -> FileReport:
    """How the directory's rows were collected (collection_meta.yaml, measured_stack.json), as
    notes; a record that cannot be read, or names a table that is not here, is a problem."""
    report = FileReport(directory / PROVENANCE_FILE, what="how the rows were collected")
    report.notes += [line.removeprefix("provenance: ")
                     for line in summary_lines(directory) + measured_lines(directory)]
    report.problems += [Problem(message) for message in reuse_problems(directory)]
    return report


def _interrupted_writes(path: Path) -> list[FileReport]:
    """A write cut mid-commit leaves some files new and some old: rolled back here, as every
    npuperf reader does when its writer is gone, so that what is checked (and what a
    simulator reads next) is one consistent set; a write still being committed (its writer
    alive, or on another host) is a problem, to check again when it is done."""
    if not pending_journals(path):
        return []
    notes = recover_if_free(path)
    reports = []
    if notes:
        report = FileReport(path, what="interrupted write")
        report.notes += notes
        reports.append(report)
    for journal in pending_journals(path):
        report = FileReport(journal)
        report.problems.append(Problem(
            "a write is being committed here (its journal is left and its writer is alive, or "
            "on another host): some files may be the new version, some the old; check again "
            "when it has finished (it is rolled back if its writer died)"))
        reports.append(report)
    return reports


def validate_path(path: str | Path, *, consumer: bool = False) -> list[FileReport]:
    """Every database file under `path`; `consumer`: what the simulator cannot read is a
    problem (by default a warning)."""
    path = Path(path)
    if not path.exists():
        raise NpuperfError(f"{path}: no such file or directory")
    reports = []
    if path.is_dir():
        reports += _interrupted_writes(path)
    table_dirs: list[Path] = []
    for file in database_files(path):
        if is_collective_file(file):
            reports.append(validate_collective_table(file))
            continue
        reports.append(validate_kernel_table(file, consumer=consumer))
        if path.is_dir() and file.parent not in table_dirs:
            table_dirs.append(file.parent)
    reports += [validate_op_mapping(d, consumer=consumer) for d in table_dirs]
    reports += [validate_provenance(d) for d in table_dirs  # where there is a record
                if (d / PROVENANCE_FILE).exists() or (d / MEASURED_STACK_FILE).exists()]
    if not reports:
        raise NpuperfError(f"{path}: no database CSV files found")
    return reports
