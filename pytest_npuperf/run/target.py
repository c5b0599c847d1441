"""What a run writes its results to: a database (this device's, or the source itself), nothing
at all (grid cases, measured to explore shapes before they enter a database), or the
collective tables of a device (a collective session's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..replay.outcome import WriteOutcome

if TYPE_CHECKING:
    from ..db.database import Database
    from ..db.lock import DatabaseLock
    from ..report.collectives import RunInfo
    from .finish import RunFacts
    from .model_profile import DemoProfile

_FAILED = "the database write failed, the database was left as it was"
_INTERRUPTED = "interrupted during the database write: the database was left as it was"


@dataclass
class DatabaseTarget:
    """The database a run writes: `target` (the source itself when `native`, else this
    device's copy), through the write-back of replay/write.py."""

    source: Path
    target: Path
    native: bool
    reports_dir: Path
    inside: Path | None = None
    prune_empty: bool = False
    dry_run: bool = False
    snapshot: Database | None = None  # the source as read at collection
    own: Database | None = None  # this device's database as read at collection
    lock: DatabaseLock | bool = True  # the lock the caller holds, else True: take it
    purpose: str = ""
    demo: DemoProfile | None = None  # profiled into `target` before the write (finish.py)
    failed: str = _FAILED
    interrupted: str = _INTERRUPTED

    def write(self, results: list, facts: RunFacts) -> WriteOutcome:
        from ..replay.write import write_results

        snapshot, own = self.snapshot, self.own
        # Written once: the tables are not kept through the history and the reports (a
        # database of 10^5 rows is hundreds of MB).
        self.snapshot = self.own = None
        return write_results(self.source, self.target, results, native=self.native,
                        prune_empty=self.prune_empty, dry_run=self.dry_run,
                        run_id=facts.run_id, stamp=facts.stamp, snapshot=snapshot,
                        own=own, lock=self.lock, purpose=self.purpose or f"run {facts.run_id}")


@dataclass
class NoDatabase:
    """Grid cases: measured and reported, written to no database."""

    source: Path
    reports_dir: Path
    inside: Path | None = None
    dry_run: bool = False
    demo: None = None
    failed: str = _FAILED
    interrupted: str = _INTERRUPTED

    def write(self, results: list, facts: RunFacts) -> WriteOutcome:
        outcome = WriteOutcome(source=self.source, target=None, native=False,
                                  dry_run=self.dry_run, run_id=facts.run_id, stamp=facts.stamp)
        outcome.notes.append("grid cases: measured, not written to any database")
        return outcome


@dataclass
class Written:
    """What the collective tables' write did: the table directory, and every file written."""

    target: Path | None
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class CollectiveTables:
    """The collective tables of a device and stack (`hcom_<op>_.csv` in `table_dir`), with the
    run's reports in its reports directory, named as report/names.py names them, all in one
    transaction; the op_mapping.yaml of `version_dirs` names the tables.

    `run_info`: the reports' description of the run, given the stamp they are written under
    (its own, or `<stamp>_2`... when another run's reports hold that one)."""

    table_dir: Path
    version_dirs: list[Path]
    run_info: Callable[[str], RunInfo]
    reports_dir = None  # the reports are written with the tables, in one transaction
    inside = None
    demo = None  # no demo model: it belongs to a kernel database
    failed: str = "collective results not written"
    interrupted: str = "interrupted while writing the collective tables: nothing was written"

    def write(self, results: list, facts: RunFacts) -> Written:
        from ..comm.ops import OPS
        from ..comm.table import measured_row, write_tables
        from ..db.layout import OP_MAPPING_FILE, REPORTS_DIR
        from ..db.op_mapping import KEPT
        from ..report.collectives import render_json, render_markdown
        from ..report.names import comm_report_paths, free_stamp

        rows: dict[str, list[dict[str, str]]] = {}
        for result in results:
            if result.measured:
                rows.setdefault(OPS[result.point.op].file_name, []).append(
                    measured_row(result, facts.run_id))
        reports = self.table_dir / REPORTS_DIR
        stamp = free_stamp(reports, facts.stamp, comm_report_paths)
        info = self.run_info(stamp)
        report, run = comm_report_paths(reports, stamp)

        def texts(stats):
            info.tables = stats
            return {report: render_markdown(results, info), run: render_json(results, info)}

        stats = write_tables(self.table_dir, rows, purpose=f"pytest collectives {facts.run_id}",
                             texts=texts, version_dirs=self.version_dirs)
        files = [self.table_dir / name for name in rows] + [report, run]
        files += [d / OP_MAPPING_FILE for d, done in stats.op_mappings.items() if done != KEPT]
        return Written(self.table_dir, files)
