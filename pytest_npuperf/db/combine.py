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

import datetime as _dt
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from .columns import AVERAGE_DURATION, MICROBENCH_TIMESTAMP
from .database import Database, Table, kernel_csvs
from .errors import NpuperfError, clip
from .signature import Signature
from .upsert import RowUpdate, apply_updates, canonical_order, ensure_columns


@dataclass
class CombineSummary:
    target: Path
    sources: list[Path]
    updated: dict[str, int] = field(default_factory=dict)  # file -> rows given a newer measurement
    added: dict[str, int] = field(default_factory=dict)  # file -> rows appended
    new_files: list[str] = field(default_factory=list)
    doubtful: list[str] = field(default_factory=list)  # rows whose stamp cannot be believed

    def render(self) -> str:
        lines = [f"merged {len(self.sources)} database(s) into {self.target}"]
        for name in sorted(set(self.updated) | set(self.added)):
            lines.append(f"  {name}: {self.updated.get(name, 0)} row(s) updated, "
                         f"{self.added.get(name, 0)} added"
                         + (" (new file)" if name in self.new_files else ""))
        if len(lines) == 1:
            lines.append("  nothing newer in the sources: the database is unchanged")
        if self.doubtful:
            shown = "; ".join(self.doubtful[:3]) + (" ..." if len(self.doubtful) > 3 else "")
            lines.append(f"  note: {len(self.doubtful)} measurement(s) with a MicroBench "
                         f"Timestamp that is not a time or lies in the future were never taken "
                         f"over another: {shown}")
        return "\n".join(lines)


def is_measurement(column: str) -> bool:
    return column == AVERAGE_DURATION or column.startswith("MicroBench ")


_FUTURE_SLACK = _dt.timedelta(days=1)  # stamps are local times: hosts may be a zone ahead


def measured_at(text: str, now: _dt.datetime) -> _dt.datetime | None:
    """When a replay measurement was taken, None when its stamp cannot be believed (not a
    time, or later than now: a wrong clock or a hand edit), so that it never wins a merge."""
    try:
        moment = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone().replace(tzinfo=None)
    return moment if moment <= now + _FUTURE_SLACK else None


def _newer(moment: _dt.datetime | None, than: _dt.datetime | None) -> bool:
    return moment is not None and (than is None or moment > than)


@dataclass
class _Measured:
    when: _dt.datetime | None  # None: no believable time (it loses to any that has one)
    cells: dict[str, str]


def _measured_rows(table: Table, now: _dt.datetime, doubtful: list[str]
                   ) -> dict[Signature, _Measured]:
    """signature -> the newest replay measurement of the rows holding one; rows whose stamp
    cannot be believed are listed in `doubtful` (a few)."""
    frame = table.frame
    if MICROBENCH_TIMESTAMP not in frame.columns:
        return {}
    columns = [c for c in frame.columns if is_measurement(c)]
    found: dict[Signature, _Measured] = {}
    records = frame[columns].to_dict("records")
    for position, (sig, cells) in enumerate(zip(table.signatures, records)):
        stamp = str(cells.get(MICROBENCH_TIMESTAMP, "")).strip()
        if sig is None or not stamp:
            continue
        when = measured_at(stamp, now)
        if when is None:
            doubtful.append(f"{table.path} row {position + 1} ({clip(stamp, 40)})")
        if sig not in found or _newer(when, found[sig].when):
            found[sig] = _Measured(when, {k: str(v) for k, v in cells.items()})
    return found


def combine_databases(target: Path, sources: list[Path], *, dry_run: bool = False,
                      purpose: str = "npuperf merge") -> CombineSummary:
    target = Path(target)
    summary = CombineSummary(target, [Path(s) for s in sources])
    now = _dt.datetime.now()
    for source in summary.sources:
        if source.resolve() == target.resolve():
            raise NpuperfError(f"{source}: a source is the target itself")
        if not kernel_csvs(source):
            raise NpuperfError(f"{source}: no kernel CSV in this directory (expected a database "
                               f"version directory)")
    readings = [Database(s).read() for s in summary.sources]
    for reading in readings:
        for source_table in reading.tables.values():
            source_table.check_matchable(purpose)
    db = Database(target)
    if not target.is_dir():
        raise NpuperfError(f"{target}: no such database directory (copy one shard's database "
                           f"there first, or name an existing one)")
    with db.transaction(purpose) as tx:
        db.read()
        names = sorted({n for r in readings for n in r.tables})
        for name in names:
            table = db.tables.get(name)
            newest: dict[Signature, tuple[_Measured | None, dict[str, str]]] = {}
            for reading in readings:
                source_table = reading.tables.get(name)
                if source_table is None:
                    continue
                identity_rows = source_table.frame.to_dict("records")
                for position, sig in enumerate(source_table.signatures):
                    if sig is None or sig in newest:
                        continue
                    row = {str(k): str(v) for k, v in identity_rows[position].items()}
                    newest[sig] = (None, row)
                for sig, measured in _measured_rows(source_table, now, summary.doubtful).items():
                    best, row = newest[sig]
                    if measured.when is not None and (best is None
                                                      or _newer(measured.when, best.when)):
                        newest[sig] = (measured, row)
            kernel_type = next(r.tables[name].kernel_type for r in readings if name in r.tables)
            if table is None:
                frame = pd.DataFrame(columns=list(next(r.tables[name].frame.columns
                                                       for r in readings if name in r.tables)),
                                     dtype=object)
                table = Table(target / name, frame, None, kernel_type, {}, [], [])
                summary.new_files.append(name)
            table.check_matchable(purpose)
            have = _measured_rows(table, now, summary.doubtful)
            positions = table.positions()
            updates = {}
            updated = added = 0
            for sig, (measured, row) in newest.items():
                cells = measured.cells if measured is not None else {}
                if sig in positions:
                    mine = have.get(sig)
                    if measured is not None and _newer(measured.when, mine and mine.when):
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
