"""What a kernel run writes its results to: a database (this device's, or the source itself),
or nothing at all (grid cases, measured to explore shapes before they enter a database)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..replay.outcome import WriteOutcome

if TYPE_CHECKING:
    from ..db.database import Database
    from ..db.lock import DatabaseLock
    from .finish import RunFacts

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
    failed: str = _FAILED
    interrupted: str = _INTERRUPTED

    def write(self, results: list, facts: RunFacts) -> WriteOutcome:
        outcome = WriteOutcome(source=self.source, target=None, native=False,
                                  dry_run=self.dry_run, run_id=facts.run_id, stamp=facts.stamp)
        outcome.notes.append("grid cases: measured, not written to any database")
        return outcome
