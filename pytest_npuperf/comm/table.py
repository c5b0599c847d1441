"""The hcom tables: `<DEVICE>/hccl/<version>/hcom_<op>_.csv` (docs/format.md §1, §7).

Contract columns first (`message_bytes, num_devices, dtype, topology_tier, Duration(us),
bandwidth_gbps`), then this project's. A row is identified by (message_bytes, num_devices,
dtype, topology_tier): writing a point replaces the row that holds it (and any duplicate of it),
sets every column this project writes, and leaves other rows, unknown columns and their cells
as they were. Writes go through one transaction (`Database.transaction`) on the directory that
holds them all: every table, report and op_mapping.yaml of a run lands together, or none does.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..db.database import Database
from ..db.errors import NpuperfError
from ..db.layout import FRAMEWORK_DIR, HCCL_DIR
from ..db.op_mapping import version_dirs_for_hccl
from ..db.shapes import normalize_dtype
from ..db.table import empty_table, read_table
from ..db.transaction import FileStamp
from ..kernels.mapping_writer import ensure_op_mapping

CONTRACT_COLUMNS = ("message_bytes", "num_devices", "dtype", "topology_tier", "Duration(us)",
                    "bandwidth_gbps")
EXTRA_COLUMNS = (
    "busbw_gbps",  # nccl-tests' bus bandwidth (comm/ops.py)
    "statistic",  # what Duration(us) is: the slowest rank's median (or mean), per op
    "min_rank_us", "median_rank_us", "max_rank_us",  # each rank's statistic: over ranks
    "straggler_rank",  # the global rank whose statistic is Duration(us)
    "samples", "ops_per_sample", "timed_calls", "warmup", "precision", "spread", "stop_reason",
    "method", "ranks", "backend", "device", "stack", "check", "source", "run_id", "time",
    "inplace_duration_us", "inplace_busbw_gbps",  # nccl-tests imports: the in-place columns
)
COLUMNS = CONTRACT_COLUMNS + EXTRA_COLUMNS
KEY_COLUMNS = CONTRACT_COLUMNS[:4]


def cell(value: object, digits: int | None = None) -> str:
    """A cell's text: empty for None/NaN, a float to `digits` decimals (6 significant
    digits without)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        return f"{value:.{digits}f}" if digits is not None else f"{value:.6g}"
    return str(value)


def row_key(message_bytes: object, num_devices: object, dtype: object,
            tier: object) -> tuple[int, int, str, int] | None:
    """The normalised identity of a row; None when a cell does not parse (such rows are kept
    and never matched)."""
    try:
        key = (int(str(message_bytes).strip()), int(str(num_devices).strip()),
               normalize_dtype(str(dtype)), int(str(tier).strip()))
    except ValueError:
        return None
    return key


@dataclass
class UpsertStats:
    file: str
    updated: int = 0
    added: int = 0
    duplicates_dropped: int = 0
    kept: int = 0
    notes: list[str] = field(default_factory=list)


def upsert(frame: pd.DataFrame, rows: Iterable[Mapping[str, str]], name: str = ""
           ) -> tuple[pd.DataFrame, UpsertStats]:
    """`frame` (cells as text) with `rows` written in: see the module doc."""
    stats = UpsertStats(name)
    columns = list(frame.columns)
    for column in COLUMNS:  # an existing table keeps its order; ours go after its own
        if column not in columns:
            columns.append(column)
    frame = frame.reindex(columns=columns, fill_value="")
    missing_key = [c for c in KEY_COLUMNS if c not in frame.columns]
    assert not missing_key  # reindex added them
    keys = [row_key(*values) for values in zip(*(frame[c].tolist() for c in KEY_COLUMNS))]
    positions: dict[tuple, list[int]] = {}
    for position, key in enumerate(keys):
        if key is not None:
            positions.setdefault(key, []).append(position)
    records = frame.to_dict("records")
    drop: set[int] = set()
    added: list[dict[str, str]] = []
    added_at: dict[tuple, int] = {}
    for row in rows:
        key = row_key(row["message_bytes"], row["num_devices"], row["dtype"],
                      row["topology_tier"])
        if key is None:
            raise ValueError(f"row without a valid key: {dict(row)}")
        values = {c: str(row.get(c, "")) for c in COLUMNS}
        where = positions.get(key)
        if key in added_at:  # a point given twice: the later replaces the earlier
            added[added_at[key]].update(values)
        elif where:
            records[where[0]].update(values)
            stats.updated += 1
            drop.update(where[1:])
            stats.duplicates_dropped += len(where) - 1
            positions[key] = where[:1]
        else:
            added_at[key] = len(added)
            added.append({**dict.fromkeys(columns, ""), **values})
    if stats.duplicates_dropped:
        stats.notes.append(f"{name}: {stats.duplicates_dropped} duplicate row(s) of a rewritten "
                           f"point removed (one row per message_bytes, num_devices, dtype, "
                           f"topology_tier)")
    kept = [r for i, r in enumerate(records) if i not in drop]
    stats.added = len(added)
    stats.kept = len(kept) - stats.updated
    added.sort(key=lambda r: row_key(*(r[c] for c in KEY_COLUMNS)) or (0, 0, "", 0))
    out = pd.DataFrame(kept + added, columns=columns, dtype=object).fillna("")
    out.attrs.update(frame.attrs)
    return out, stats


class TableStats(list):
    """What `write_tables` did: an `UpsertStats` per table, and `op_mappings`: the
    op_mapping.yaml of each version directory that reads the tables -> kept, generated, ..."""

    def __init__(self) -> None:
        super().__init__()
        self.op_mappings: dict[Path, str] = {}


def mapping_readers(directory: Path, version_dirs: Iterable[Path] = ()) -> list[Path]:
    """The version directories whose op_mapping.yaml names `directory` as their collective
    tables: those of the same CANN beside it (`<DEVICE>/vllm_ascend/*_cann<C>` for
    `<DEVICE>/hccl/v<C>`) and `version_dirs` (the database of a session, or named by the
    user), absolute; none when `directory` is not a `<DEVICE>/hccl/<version>` directory."""
    directory = Path(os.path.abspath(directory))
    if directory.parent.name != HCCL_DIR:
        return []
    device = directory.parent.parent
    found = {Path(os.path.abspath(d)) for d in version_dirs_for_hccl(directory)}
    for version_dir in map(Path, version_dirs):
        absolute = Path(os.path.abspath(version_dir))
        # One transaction (and lock) on the <DEVICE> directory covers them all.
        if absolute.parent != device / FRAMEWORK_DIR:
            raise NpuperfError(f"{version_dir}: not a version directory of {device.name} "
                               f"({device / FRAMEWORK_DIR}/<VERSION>), where the tables are")
        found.add(absolute)
    return sorted(found)


def write_tables(directory: Path, rows_by_file: Mapping[str, list[dict[str, str]]], *,
                 purpose: str,
                 texts: Callable[[list[UpsertStats]], Mapping[Path, str]] | None = None,
                 dry_run: bool = False, version_dirs: Iterable[Path] = ()) -> TableStats:
    """Upsert each file's rows under `directory` (created if needed) and stage the files
    `texts(stats)` returns (reports that say what the upsert did) and the op_mapping.yaml of
    every version directory that reads these tables (`mapping_readers`: generated where
    missing or still npuperf's, so that its `communication_data_ref` names `directory`; a
    hand-edited one is kept) in the same transaction: all land together or none does. With
    readers the transaction (and its lock) covers their common parent, the `<DEVICE>`
    directory."""
    directory = Path(directory)
    results = TableStats()
    if dry_run:
        for name, rows in rows_by_file.items():
            path = directory / name
            frame = read_table(path) if path.is_file() else empty_table(COLUMNS)
            results.append(upsert(frame, rows, name)[1])
        return results
    readers = mapping_readers(directory, version_dirs)
    root = Path(os.path.commonpath([os.path.abspath(directory), *map(str, readers)]))
    with Database(root).transaction(purpose) as tx:
        for name, rows in rows_by_file.items():
            path = directory / name
            stamp = FileStamp.of(path)
            if stamp is not None and not path.is_file():
                raise NpuperfError(f"{path}: not a regular file")
            frame = read_table(path) if stamp is not None else empty_table(COLUMNS)
            merged, stats = upsert(frame, rows, name)
            tx.stage_table(path, merged, expect=stamp)
            results.append(stats)
        for path, text in (texts(results) if texts else {}).items():
            tx.stage_text(path, text)
        for version_dir in readers:
            results.op_mappings[version_dir] = ensure_op_mapping(tx, version_dir,
                                                                 hccl_dir=directory)
    return results


def measured_row(result, run_id: str, *, source: str = "pytest_npuperf") -> dict[str, str]:
    """The table row of a measured `CommResult`."""
    point = result.point
    low, middle, high = result.rank_spread()
    worst = result.slowest()
    return {
        "message_bytes": str(point.message_bytes), "num_devices": str(point.num_devices),
        "dtype": point.dtype, "topology_tier": str(point.topology_tier),
        "Duration(us)": cell(result.duration_us, 3),
        "bandwidth_gbps": cell(result.algbw_gbps()),
        "busbw_gbps": cell(result.busbw_gbps()),
        "statistic": f"slowest rank's {result.statistic} per op",
        "min_rank_us": cell(low, 3), "median_rank_us": cell(middle, 3),
        "max_rank_us": cell(high, 3),
        "straggler_rank": "" if result.straggler_rank is None else str(result.straggler_rank),
        "samples": str(worst.samples) if worst else "",
        "ops_per_sample": str(result.ops_per_sample), "timed_calls": str(result.timed_calls),
        "warmup": str(result.warmup),
        "precision": cell(result.precision), "spread": cell(result.spread()),
        "stop_reason": result.stop_reason, "method": result.method,
        "ranks": ranks_cell(point.ranks), "backend": result.backend, "device": result.device,
        "stack": result.stack, "check": result.check, "source": source, "run_id": run_id,
        "time": result.finished,
    }


def ranks_cell(ranks: Iterable[int]) -> str:
    """`0-7` for consecutive ranks, else `0;8;16`."""
    ranks = list(ranks)
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    return ";".join(map(str, ranks))
