"""A database's measured rows as the simulator's points, kernel type by kernel type.

A row counts when it has a latency the simulator reads: the first finite value > 0 of the
table's preferred column (`Average Duration(us)` when the table has it, else `Profiling
Average Duration(us)`, else `Duration(us)`), then `Profiling Average Duration(us)`,
`Profiling Median Duration(us)`, `Average Duration(us)`, `Median Duration(us)`,
`Duration(us)`. Zero, empty, `N/A` and junk never count (the density standard counts only
positive finite latencies); rows without one are theory rows still to measure.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..db.columns import (
    AVERAGE_DURATION,
    EP_SIZE,
    IDENTITY_COLUMNS,
    PROFILING_AVERAGE_DURATION,
    PROFILING_MEDIAN_DURATION,
    RAW_DURATION,
    parse_float,
)
from ..db.database import Database, Table
from ..db.errors import NpuperfError
from ..db.layout import OP_MAPPING_FILE
from ..db.op_mapping import load_op_mapping
from ..db.signature import Signature
from .axes import Family, Policies, Policy, Query, family_of, read_query
from .interpolate import ALTERNATE, PREFERRED, Interpolator, Point

_PREFERRED_ORDER = (AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, RAW_DURATION)
_FALLBACK_ORDER = (PROFILING_AVERAGE_DURATION, PROFILING_MEDIAN_DURATION, AVERAGE_DURATION,
                   "Median Duration(us)", RAW_DURATION)


def preferred_column(columns) -> str:
    return next((c for c in _PREFERRED_ORDER if c in columns), _PREFERRED_ORDER[-1])


def latencies(table: Table) -> list[tuple[float, int] | None]:
    """Per row, (latency, PREFERRED or ALTERNATE) as the simulator reads it, or None."""
    frame = table.frame
    preferred = preferred_column(frame.columns)
    order = [preferred] + [c for c in _FALLBACK_ORDER if c != preferred]
    columns = [(c, frame[c].tolist()) for c in order if c in frame.columns]
    out: list[tuple[float, int] | None] = []
    for i in range(len(frame)):
        found = None
        for name, cells in columns:
            value = parse_float(str(cells[i]))
            if value is not None and math.isfinite(value) and value > 0:
                found = (value, PREFERRED if name == preferred else ALTERNATE)
                break
        out.append(found)
    return out


@dataclass
class KernelPoints:
    kernel_type: str
    family: Family
    policy: Policy
    table: Table
    points: list[Point] = field(default_factory=list)
    theory: list[Point] = field(default_factory=list)  # rows without a latency (to measure)
    measured: int = 0  # rows with a latency
    rejected: Counter = field(default_factory=Counter)  # why measured rows are no point
    measured_signatures: dict[Signature, list[int]] = field(default_factory=dict)
    records: list[dict[str, str]] = field(default_factory=list)  # the cells a query reads
    _interpolator: Interpolator | None = None

    @property
    def rows(self) -> int:
        return len(self.table.frame)

    @property
    def interpolator(self) -> Interpolator:
        if self._interpolator is None:
            self._interpolator = Interpolator(self.family, self.points)
        return self._interpolator

    def row_cells(self, row: int) -> dict[str, str]:
        """The identity, `EP Size` and `Runtime ...` cells of a row."""
        return {c: str(v) for c, v in self.records[row].items()}


@dataclass
class DatabasePoints:
    path: Path
    policies: Policies
    op_mapping: dict
    kernels: dict[str, KernelPoints]
    notes: list[str] = field(default_factory=list)

    def query(self, kernel_type: str, cells) -> Query | str:
        return read_query(kernel_type, cells, self.policies.of(kernel_type))


def read_op_mapping(database: Path) -> dict:
    path = Path(database) / OP_MAPPING_FILE
    return load_op_mapping(path) if path.is_file() else {}


def kernel_points(table: Table, policies: Policies) -> KernelPoints:
    kernel_type = table.kernel_type
    policy = policies.of(kernel_type)
    found = KernelPoints(kernel_type, family_of(kernel_type, policy), policy, table)
    wanted = [c for c in table.frame.columns
              if c in IDENTITY_COLUMNS or c == EP_SIZE or c.startswith("Runtime ")
              or c == "avg_seq_len"]
    records = table.frame[wanted].to_dict("records")
    found.records = records
    for row, latency in enumerate(latencies(table)):
        if latency is None:
            query = read_query(kernel_type, records[row], policy)
            if not isinstance(query, str):
                found.theory.append(Point(query, math.nan, ALTERNATE, row, kernel_type))
            continue
        found.measured += 1
        sig = table.signatures[row] if row < len(table.signatures) else None
        if sig is not None:
            found.measured_signatures.setdefault(sig, []).append(row)
        query = read_query(kernel_type, records[row], policy)
        if isinstance(query, str):
            found.rejected[query] += 1
            continue
        found.points.append(Point(query, latency[0], latency[1], row, kernel_type))
    return found


def read_points(database: str | Path, kernel_types: list[str] | None = None) -> DatabasePoints:
    """Every kernel table of a version directory (or those of `kernel_types`) as points."""
    database = Path(database)
    if not database.is_dir():
        raise NpuperfError(f"{database}: no such database directory")
    db = Database(database).read(strict=False)
    if not db.tables and not db.failed:
        raise NpuperfError(f"{database}: no kernel tables (*.csv) here; give a version "
                           f"directory, <root>/<DEVICE>/vllm_ascend/<VERSION>")
    doc = read_op_mapping(database)
    policies = Policies.from_op_mapping(doc)
    kernels = {}
    for table in sorted(db.tables.values(), key=lambda t: t.kernel_type):
        if kernel_types and table.kernel_type not in kernel_types:
            continue
        kernels[table.kernel_type] = kernel_points(table, policies)
    notes = list(db.notes) + [f"{name}: not read: {exc}" for name, exc in db.failed.items()]
    if not doc:
        notes.append(f"no {OP_MAPPING_FILE}: every kernel type is read with the simulator's "
                     f"defaults (no interpolation policy)")
    return DatabasePoints(database, policies, doc, kernels, notes)
