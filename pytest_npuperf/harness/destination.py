"""Where a replay run's cases come from and where its results go, decided once per run:

- `DatabaseRun`: the rows of `--npuperf-db`; the results go to that database when it belongs to
  the measuring device, else to this device's copy under `--npuperf-out` (a device only
  writes its own numbers); reports beside the database written. The embedded default
  database is package data and is never written: even its own device gets a copy.
- `GridRun` (`--npuperf-grid`): shape-grid points become cases; nothing is written to any
  database, the reports go under `--npuperf-out`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from ..db.errors import NpuperfError
from ..db.files import no_kernel_tables
from ..db.layout import REPORTS_DIR, check_component, database_dir, device_of
from ..replay.cases import CaseCatalog
from .options import check_db_dir, is_embedded

if TYPE_CHECKING:
    from ..db.database import Database
    from ..db.lock import DatabaseLock
    from ..db.signature import Signature
    from ..devices import Backend
    from ..run.finish import Target
    from ..run.model_profile import DemoProfile
    from .options import Settings


class _Run(Protocol):
    """What a destination reads of its run (harness/context.py)."""

    settings: Settings
    backend: Backend
    catalog: CaseCatalog
    notes: list[str]
    run_id: str


class Destination(Protocol):
    source: Path
    native: bool  # the results go to the source itself

    @property
    def source_device(self) -> str | None: ...
    @property
    def target(self) -> Path | None: ...  # the database written (None: none)
    @property
    def reports_dir(self) -> Path: ...
    @property
    def inside(self) -> Path: ...  # no symlink may lead a write out of this directory
    def catalog(self) -> CaseCatalog: ...
    def measured(self, catalog: CaseCatalog) -> set[tuple[str, Signature]] | None: ...
    def writable_dirs(self) -> list[Path]: ...
    def lock(self, purpose: str, notes: list[str]) -> DatabaseLock | None: ...
    def run_target(self, lock: DatabaseLock | None) -> Target: ...


def destination_for(context: _Run) -> Destination:
    return GridRun(context) if context.settings.grid else DatabaseRun(context)


class _Common:
    def __init__(self, context: _Run) -> None:
        self.context = context
        self.source = context.settings.db

    @property
    def source_device(self) -> str | None:
        return device_of(self.source)


class DatabaseRun(_Common):
    def __init__(self, context: _Run) -> None:
        super().__init__(context)
        self._own: Database | None = None  # this device's database, when not the source

    @property
    def native(self) -> bool:
        """Whether the results go to the source database: it belongs to the measuring device
        and is not the embedded one (an installed package's files stay as pip wrote them)."""
        return (self.context.backend.database_device() == self.source_device
                and not is_embedded(self.source))

    @property
    def target(self) -> Path:
        """The database this run writes: the source if it is ours, else our own copy."""
        if self.native:
            return self.source
        try:
            return database_dir(self.context.settings.out,
                                self.context.backend.database_device(), self.source.name)
        except NpuperfError as exc:
            raise pytest.UsageError(f"npuperf: {exc}") from None

    @property
    def reports_dir(self) -> Path:
        return self.inside / REPORTS_DIR

    @property
    def inside(self) -> Path:
        return self.source if self.native else self.context.settings.out

    def catalog(self) -> CaseCatalog:
        check_db_dir(self.source)
        try:
            check_component(self.source.name, "database directory name")
            catalog = CaseCatalog(self.source)
        except NpuperfError as exc:
            raise pytest.UsageError(f"--npuperf-db: {exc}") from None
        if not catalog.tables and not catalog.failed:  # a green run that measured nothing
            raise pytest.UsageError(no_kernel_tables(self.source, "--npuperf-db"))
        notes = self.context.notes
        notes += catalog.database.notes
        for name, error in catalog.failed.items():
            notes.append(f"{name} could not be read; its case errors with the reason: {error}")
        return catalog

    def measured(self, catalog: CaseCatalog) -> set:
        """(file, signature) of the rows the written database already holds a duration for."""
        if self.native:
            return catalog.measured()
        target = self.target
        if not target.is_dir():
            return set()
        try:
            own = CaseCatalog(target)
        except NpuperfError as exc:
            raise pytest.UsageError(f"cannot read this device's database {target}: {exc}") from None
        self._own = own.database  # the write-back updates this read, not a new one
        return own.measured()

    def writable_dirs(self) -> list[Path]:
        return [self.target, self.reports_dir]

    def lock(self, purpose: str, notes: list[str]) -> DatabaseLock:
        from ..db.database import Database

        target = Database(self.target)
        lock = target.lock(purpose)
        notes += target.notes
        return lock

    def run_target(self, lock: DatabaseLock | None) -> Target:
        from ..run.target import DatabaseTarget

        context = self.context
        settings = context.settings
        return DatabaseTarget(self.source, self.target, native=self.native,
                              reports_dir=self.reports_dir, inside=self.inside,
                              prune_empty=settings.prune_empty, dry_run=settings.dry_run,
                              snapshot=context.catalog.database, own=self._own,
                              lock=lock or True, purpose=f"pytest run {context.run_id}",
                              demo=self._demo(lock))

    def _demo(self, lock: DatabaseLock | None) -> DemoProfile | None:
        """The demo model to profile into this device's copy of the embedded database
        (run/model_profile.py): on a CPU or a GPU, not in a dry run, unless turned off."""
        settings, backend = self.context.settings, self.context.backend
        if not (settings.model_profile and settings.embedded and not settings.dry_run
                and backend.kind in ("cpu", "cuda") and not self.native):
            return None
        from ..run.model_profile import DemoProfile

        return DemoProfile(kind=backend.kind, device=backend.device,
                           database_device=backend.database_device(), stack=backend.stack(),
                           source=self.source, target=self.target, lock=lock)


class GridRun(_Common):
    native = False
    target = None

    @property
    def reports_dir(self) -> Path:
        return self.inside / REPORTS_DIR

    @property
    def inside(self) -> Path:
        return self.context.settings.out

    def catalog(self) -> CaseCatalog:
        from ..grid import generate_rows

        grid = self.context.settings.grid
        try:
            return CaseCatalog.from_rows(self.source, generate_rows(
                None, config_path=None if grid == "default" else grid))
        except NpuperfError as exc:
            raise pytest.UsageError(f"--npuperf-grid: {exc}") from None

    def measured(self, catalog: CaseCatalog) -> None:
        return None  # grid points have no durations yet

    def writable_dirs(self) -> list[Path]:
        return [self.reports_dir]

    def lock(self, purpose: str, notes: list[str]) -> None:
        return None  # no database is written

    def run_target(self, lock: DatabaseLock | None) -> Target:
        from ..run.target import NoDatabase

        return NoDatabase(self.source, self.reports_dir, inside=self.inside,
                          dry_run=self.context.settings.dry_run)
