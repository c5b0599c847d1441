"""Merge the replay measurements of several copies of one database into one (`npuperf merge`).

A nightly job that splits a database over hosts (`--npuperf-shard i/n`) ends with n copies of
the device's database, each holding the measurements of its shard. Merging takes, for every
row (matched by signature), the replay measurement (`Average Duration(us)` and every
`MicroBench ...` column, one unit: they came from one case of one run) with the newest
`MicroBench Timestamp` among the target and the sources; rows a source has and the target
lacks are appended whole; kernel files only a source has are copied. Profiling columns,
unknown columns and rows without a newer measurement stay as they are. Everything is written
through the target's transaction: all files or none.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .columns import AVERAGE_DURATION, MICROBENCH_TIMESTAMP
from .database import Database, Table, kernel_csvs
from .errors import NpuperfError
from .merge import RowUpdate, apply_updates, canonical_order, ensure_columns
from .signature import Signature


@dataclass
class CombineSummary:
    target: Path
    sources: list[Path]
    updated: dict[str, int] = field(default_factory=dict)  # file -> rows given a newer measurement
    added: dict[str, int] = field(default_factory=dict)  # file -> rows appended
    new_files: list[str] = field(default_factory=list)

    def render(self) -> str:
        lines = [f"merged {len(self.sources)} database(s) into {self.target}"]
        for name in sorted(set(self.updated) | set(self.added)):
            lines.append(f"  {name}: {self.updated.get(name, 0)} row(s) updated, "
                         f"{self.added.get(name, 0)} added"
                         + (" (new file)" if name in self.new_files else ""))
        if len(lines) == 1:
            lines.append("  nothing newer in the sources: the database is unchanged")
        return "\n".join(lines)


def is_measurement(column: str) -> bool:
    return column == AVERAGE_DURATION or column.startswith("MicroBench ")


def _measured_rows(table: Table) -> dict[Signature, tuple[str, dict[str, str]]]:
    """signature -> (timestamp, measurement cells) of the rows holding a replay measurement."""
    frame = table.frame
    if MICROBENCH_TIMESTAMP not in frame.columns:
        return {}
    columns = [c for c in frame.columns if is_measurement(c)]
    found: dict[Signature, tuple[str, dict[str, str]]] = {}
    records = frame[columns].to_dict("records")
    for sig, cells in zip(table.signatures, records):
        stamp = str(cells.get(MICROBENCH_TIMESTAMP, "")).strip()
        if sig is None or not stamp:
            continue
        if sig not in found or stamp > found[sig][0]:
            found[sig] = (stamp, {k: str(v) for k, v in cells.items()})
    return found


def combine_databases(target: Path, sources: list[Path], *, dry_run: bool = False,
                      purpose: str = "npuperf merge") -> CombineSummary:
    target = Path(target)
    summary = CombineSummary(target, [Path(s) for s in sources])
    for source in summary.sources:
        if source.resolve() == target.resolve():
            raise NpuperfError(f"{source}: a source is the target itself")
        if not kernel_csvs(source):
            raise NpuperfError(f"{source}: no kernel CSV in this directory (expected a database "
                               f"version directory)")
    readings = [Database(s).read() for s in summary.sources]
    db = Database(target)
    if not target.is_dir():
        raise NpuperfError(f"{target}: no such database directory (copy one shard's database "
                           f"there first, or name an existing one)")
    with db.transaction(purpose) as tx:
        db.read()
        names = sorted({n for r in readings for n in r.tables})
        for name in names:
            table = db.tables.get(name)
            newest: dict[Signature, tuple[str, dict[str, str], dict[str, str]]] = {}
            for reading in readings:
                source_table = reading.tables.get(name)
                if source_table is None:
                    continue
                identity_rows = source_table.frame.to_dict("records")
                for position, sig in enumerate(source_table.signatures):
                    if sig is None or sig in newest:
                        continue
                    row = {str(k): str(v) for k, v in identity_rows[position].items()}
                    newest[sig] = ("", {}, row)
                for sig, (stamp, cells) in _measured_rows(source_table).items():
                    if stamp > newest[sig][0]:
                        newest[sig] = (stamp, cells, newest[sig][2])
            kernel_type = next(r.tables[name].kernel_type for r in readings if name in r.tables)
            if table is None:
                frame = pd.DataFrame(columns=list(next(r.tables[name].frame.columns
                                                       for r in readings if name in r.tables)),
                                     dtype=object)
                table = Table(target / name, frame, None, kernel_type, {}, [], [])
                summary.new_files.append(name)
            have = _measured_rows(table)
            positions = table.positions()
            updates = {}
            updated = added = 0
            for sig, (stamp, cells, row) in newest.items():
                if sig in positions:
                    if stamp and stamp > have.get(sig, ("", {}))[0]:
                        updates[sig] = RowUpdate(identity={}, values=cells)
                        updated += len(positions[sig])
                else:
                    identity = {c: row.get(c, "") for c in row if not is_measurement(c)}
                    updates[sig] = RowUpdate(identity=identity, values=cells)
                    added += 1
            if not updates:
                continue
            merged = apply_updates(table.frame, kernel_type, updates, add_new=True,
                                   signatures=table.signatures)
            frame = ensure_columns(merged.frame, kernel_type, canonical_order(kernel_type))
            summary.updated[name], summary.added[name] = updated, added
            if not dry_run:
                tx.stage_table(target / name, frame, expect=table.stamp)
    return summary
