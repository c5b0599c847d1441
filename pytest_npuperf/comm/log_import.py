"""`npuperf import-nccl-tests`: logs to hcom tables, through the same upsert as pytest runs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..db.errors import NpuperfError
from ..db.layout import HCCL_DIR, OP_MAPPING_FILE
from ..measure.clock import mint_run
from .importers import ImportedLog, ImportOptions, import_log
from .sweep import check_grid
from .table import row_key, write_tables


def import_logs(logs: list[Path], directory: Path, *, op: str | None = None,
                num_devices: int | None = None, topology_tier: int | None = None,
                grid_shape: str | None = None, dtype: str | None = None,
                dry_run: bool = False, version_dirs: Sequence[Path] = ()) -> str:
    """Import every log (all read before anything is written) and say what was done."""
    grid = None
    if grid_shape:
        try:
            grid = check_grid(int(t) for t in grid_shape.replace(",", " ").split())
        except ValueError as exc:
            raise NpuperfError(f"--grid-shape {grid_shape!r}: {exc}") from None
    options = ImportOptions(op=op, num_devices=num_devices, topology_tier=topology_tier,
                            grid=grid, dtype=dtype,
                            run_id=mint_run(prefix="import-").run_id)
    try:
        imported = [import_log(path, options) for path in logs]
    except ValueError as exc:  # an unknown --op, a bad grid
        raise NpuperfError(str(exc)) from None
    rows: dict[str, list[dict[str, str]]] = {}
    lines = []
    seen: dict[tuple, Path] = {}
    for log in imported:
        rows.setdefault(log.file_name, []).extend(log.rows)
        lines.append(f"{log.path}: {log.format} {log.op}, {log.num_devices} rank(s), topology "
                     f"tier {log.topology_tier}: {len(log.rows)} row(s)")
        lines += [f"  note: {note}" for note in log.notes]
        lines += [f"  note: {note}" for note in _measured_again(log, seen)]
    if not any(rows.values()):
        raise NpuperfError("no row to import (see the notes above)" if lines else "no log")
    stats = write_tables(directory, rows, purpose=f"npuperf import-nccl-tests {options.run_id}",
                         dry_run=dry_run, version_dirs=version_dirs)
    if Path(directory).resolve().parent.name != HCCL_DIR:
        lines.append(f"  note: {directory} is not a <DEVICE>/{HCCL_DIR}/<version> directory, "
                     f"where simulators look for hcom tables")
    verb = "would be" if dry_run else "were"
    for item in stats:
        lines.append(f"{directory / item.file}: {item.updated} row(s) {verb} replaced, "
                     f"{item.added} added, {item.kept} other row(s) kept")
        lines += [f"  note: {note}" for note in item.notes]
    for version_dir, done in stats.op_mappings.items():
        lines.append(f"{version_dir / OP_MAPPING_FILE}: {done}")
    if not dry_run and not stats.op_mappings and Path(directory).resolve().parent.name == HCCL_DIR:
        lines.append(f"  note: no kernel database names these tables in its {OP_MAPPING_FILE} "
                     f"(none of the same CANN version beside them): pass --version-dir DIR "
                     f"for the one the simulator reads")
    return "\n".join(lines)


def _measured_again(log: ImportedLog, seen: dict[tuple, Path]) -> list[str]:
    """Points an earlier log of this import measured too: one row each, the later log's."""
    again: dict[Path, int] = {}
    for row in log.rows:
        key = (log.file_name, row_key(row["message_bytes"], row["num_devices"], row["dtype"],
                                      row["topology_tier"]))
        earlier = seen.get(key)
        if earlier is not None:
            again[earlier] = again.get(earlier, 0) + 1
        seen[key] = log.path
    return [f"{count} point(s) {earlier} measured too: this log's kept (one row per point)"
            for earlier, count in again.items()]
