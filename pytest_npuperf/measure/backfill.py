"""Session finish: measurements back into the database, in one process, atomically.

- A row matched by signature gets `Average Duration(us)` (the mean) and this project's
  MicroBench columns (median, std, min, samples, method, status, device, run id, time).
- A case that failed leaves its durations alone and gets the error in its status.
- A result faster than the physical bound is flagged: its statistics are kept in the
  MicroBench columns with a `suspect` status, but not put in `Average Duration(us)`, which
  readers take as the row's latency.
- MatMulV2/V3/Common: when the device says which of them ran (msprof), the measurement lands
  in that type's file if it holds the signature; replays never add rows.
- Device isolation: a database of another device is never written; the measuring device
  gets its own copy (same files and rows, measurement columns cleared) under the output
  directory, updated on every run.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from ..db.columns import (
    AVERAGE_DURATION,
    INPUT_SHAPES,
    MICROBENCH_DEVICE,
    MICROBENCH_IMPLEMENTATION,
    MICROBENCH_MEDIAN_DURATION,
    MICROBENCH_METHOD,
    MICROBENCH_MIN_DURATION,
    MICROBENCH_RUN_ID,
    MICROBENCH_SAMPLES,
    MICROBENCH_STACK,
    MICROBENCH_STATUS,
    MICROBENCH_STD_DURATION,
    MICROBENCH_TIMESTAMP,
    MICROBENCH_WARMUP,
    OUTPUT_SHAPES,
    PROFILING_AVERAGE_DURATION,
    parse_duration,
)
from ..db.layout import OP_MAPPING_FILE, kernel_type_of_file
from ..db.merge import (
    RowUpdate,
    apply_updates,
    canonical_order,
    ensure_columns,
    format_number,
    migrate_legacy,
    row_signatures,
)
from ..db.signature import MATMUL_FAMILY, Signature
from ..db.table import WriteBatch, read_table
from .cases import kernel_csvs
from .outcome import BackfillOutcome, FileOutcome, GapRow
from .result import STATUS_OK, STATUS_SKIPPED, STATUS_SUSPECT, CaseResult

_STATUS_MAX = 300
_EXAMPLES = 3
# Preference when several results target the same row (duplicate rows, MatMul aliases).
_RANK = {STATUS_OK: 0, STATUS_SUSPECT: 1}


def is_measurement_column(column: str) -> bool:
    return (column == AVERAGE_DURATION or column.startswith("MicroBench ")
            or column.startswith("Profiling "))


def seed_frame(source: pd.DataFrame) -> pd.DataFrame:
    """The source rows for another device's database: identity and metadata kept, every
    measurement (durations, counters, profiling) cleared. Legacy names are migrated first:
    the old fixture schema keeps profiling values under `Median Duration(us)` and the like."""
    source, _ = migrate_legacy(source)
    frame = source.copy()
    for column in frame.columns:
        if is_measurement_column(column):
            frame[column] = ""
    frame.attrs.update(source.attrs)
    return frame


def _values(result: CaseResult, run_id: str) -> dict[str, str]:
    values = {MICROBENCH_METHOD: result.method, MICROBENCH_DEVICE: result.device,
              MICROBENCH_STACK: result.stack, MICROBENCH_RUN_ID: run_id,
              MICROBENCH_TIMESTAMP: result.timestamp}
    status = result.status if not result.error else f"{result.status}: {result.error}"
    values[MICROBENCH_STATUS] = " ".join(status.split())[:_STATUS_MAX]
    values[MICROBENCH_IMPLEMENTATION] = result.implementation
    stats = result.stats
    if stats is not None and result.status in _RANK:
        values.update({
            MICROBENCH_MEDIAN_DURATION: format_number(stats.median),
            MICROBENCH_STD_DURATION: format_number(stats.std),
            MICROBENCH_MIN_DURATION: format_number(stats.min),
            MICROBENCH_SAMPLES: str(stats.samples),
            MICROBENCH_WARMUP: str(result.warmup),
        })
        if result.status == STATUS_OK:
            values[AVERAGE_DURATION] = format_number(stats.mean)
    return values


def _better(new: CaseResult, old: CaseResult | None) -> bool:
    """Which of two results for one row wins: the better status, then the earlier row, so
    that the outcome does not depend on the order xdist workers report in."""
    if old is None:
        return True
    def key(r):
        return (_RANK.get(r.status, 9), r.row if r.row is not None else 1 << 62,
                         r.case_id)
    return key(new) < key(old)


class _Target:
    """One file of the database being written, with its row signatures."""

    def __init__(self, name: str, frame: pd.DataFrame) -> None:
        self.name = name
        self.kernel_type = kernel_type_of_file(Path(name))
        # Old schemas are read under today's names (they are written so if the file changes).
        self.frame, _ = migrate_legacy(frame)
        self.sigs, _ = row_signatures(frame, self.kernel_type)
        self.texts = [repr(s) if s is not None else "" for s in self.sigs]
        self.by_text: dict[str, Signature] = {t: s for t, s in zip(self.texts, self.sigs) if t}
        self.counts = Counter(self.texts)
        self.changed = False


def _load_targets(source: Path, target: Path | None, native: bool) -> dict[str, _Target]:
    targets = {}
    for path in kernel_csvs(source):
        frame = read_table(path)
        if not native:
            own = target / path.name if target is not None else None
            seeded = seed_frame(frame)
            if own is not None and own.is_file():
                frame = _with_new_source_rows(read_table(own), seeded, path.name)
            else:
                frame = seeded
        targets[path.name] = _Target(path.name, frame)
        if not native and not (target is not None and (target / path.name).is_file()):
            targets[path.name].changed = True  # a new file of the device's database
    return targets


def _with_new_source_rows(own: pd.DataFrame, seeded: pd.DataFrame, name: str) -> pd.DataFrame:
    """The device's file plus source rows it does not have yet (the source grew)."""
    kernel_type = kernel_type_of_file(Path(name))
    have = {repr(s) for s in row_signatures(own, kernel_type)[0] if s is not None}
    source_sigs = row_signatures(seeded, kernel_type)[0]
    new = [i for i, s in enumerate(source_sigs) if s is not None and repr(s) not in have]
    if not new:
        return own
    attrs = dict(own.attrs)
    extra = seeded.iloc[new]
    own = ensure_columns(own, kernel_type, list(extra.columns))
    merged = pd.concat([own, extra.reindex(columns=own.columns, fill_value="")],
                       ignore_index=True)
    merged.attrs.update(attrs)
    merged.attrs["grew"] = len(new)
    return merged


def _route(results: Iterable[CaseResult], targets: dict[str, _Target]
           ) -> tuple[dict[str, dict[str, CaseResult]], dict[str, dict[int, CaseResult]]]:
    """file -> signature text -> the result that lands there; and, for rows whose cells
    cannot be parsed (no signature), file -> row position -> result."""
    family_files = [n for n, t in targets.items() if t.kernel_type in MATMUL_FAMILY]
    routed: dict[str, dict[str, CaseResult]] = defaultdict(dict)
    by_position: dict[str, dict[int, CaseResult]] = defaultdict(dict)
    for result in results:
        if result.status == STATUS_SKIPPED:
            continue  # nothing was attempted: the row is left exactly as it was
        if not result.signature:
            target = targets.get(result.file)
            position = (result.row or 0) - 1
            if target is not None and 0 <= position < len(target.sigs) \
                    and target.sigs[position] is None:
                by_position[result.file][position] = result
            continue
        name = result.file
        ran = result.measured_kernel_type
        if ran and ran != result.kernel_type and result.kernel_type in MATMUL_FAMILY:
            # The device ran another member of the family: the measurement belongs to that
            # type's row, if its file has one; never a new row.
            alias = next((n for n in family_files if targets[n].kernel_type == ran
                          and result.signature in targets[n].by_text), None)
            name = alias or name
        if name not in targets or result.signature not in targets[name].by_text:
            continue
        if _better(result, routed[name].get(result.signature)):
            routed[name][result.signature] = result
    return routed, by_position


def _shape_text(frame: pd.DataFrame, position: int) -> str:
    row = frame.iloc[position]
    return f"{row.get(INPUT_SHAPES, '')} -> {row.get(OUTPUT_SHAPES, '')}"


def _durations(frame: pd.DataFrame, column: str) -> list[float | None]:
    """Valid durations of a column, None where a row has none (or no such column)."""
    if column not in frame.columns:
        return [None] * len(frame)
    return [parse_duration(v) for v in frame[column].tolist()]


def _prune(target: _Target, outcome: FileOutcome, attempted: set[str],
           attempted_positions: set[int]) -> None:
    """Delete the rows this session tried to measure that still have neither a replay nor a
    profiling duration. Rows of other kernel types, rows not selected and rows without a
    replay are never touched."""
    frame = target.frame
    mb, prof = _durations(frame, AVERAGE_DURATION), _durations(frame, PROFILING_AVERAGE_DURATION)
    empty = pd.Series([a is None and b is None and (t in attempted or i in attempted_positions)
                       for i, (a, b, t) in enumerate(zip(mb, prof, target.texts))],
                      index=frame.index, dtype=bool)
    if empty.any():
        outcome.deleted = int(empty.sum())
        outcome.examples["deleted"] = [_shape_text(frame, int(i))
                                       for i in list(empty[empty].index)[:_EXAMPLES]]
        attrs = dict(frame.attrs)
        keep = (~empty).to_numpy()
        target.frame = frame.loc[keep].reset_index(drop=True)
        target.frame.attrs.update(attrs)
        target.sigs = [s for s, k in zip(target.sigs, keep) if k]
        target.texts = [t for t, k in zip(target.texts, keep) if k]
        target.changed = True


def _summarize(target: _Target, outcome: FileOutcome, updated_sigs: set[str],
               gaps: list[GapRow]) -> None:
    frame = target.frame
    outcome.rows = len(frame)
    mb, prof = _durations(frame, AVERAGE_DURATION), _durations(frame, PROFILING_AVERAGE_DURATION)
    seen: set[str] = set()
    for position, text in enumerate(target.texts):
        if text and text in seen:
            outcome.duplicates += 1
            outcome.examples.setdefault("duplicates", [])
            if len(outcome.examples["duplicates"]) < _EXAMPLES:
                outcome.examples["duplicates"].append(_shape_text(frame, position))
        seen.add(text)
        if mb[position] is None:
            outcome.missing += 1
            missing = outcome.examples.setdefault("missing", [])
            if len(missing) < _EXAMPLES:
                missing.append(_shape_text(frame, position))
        if text in updated_sigs and mb[position] is not None and prof[position] is not None:
            gaps.append(GapRow(target.kernel_type, target.name, mb[position], prof[position],
                               _shape_text(frame, position)))
    outcome.unchanged = max(outcome.rows - outcome.updated - outcome.failed, 0)


def backfill(source: Path, target: Path | None, results: list[CaseResult], *, native: bool,
             prune_empty: bool = False, dry_run: bool = False, run_id: str = "",
             stamp: str = "") -> BackfillOutcome:
    """Write the session's results; returns what changed. Nothing is written on a dry run."""
    source, target = Path(source), (Path(target) if target is not None else None)
    outcome = BackfillOutcome(source=source, target=None if dry_run else target, native=native,
                              dry_run=dry_run, run_id=run_id, stamp=stamp)
    targets = _load_targets(source, target, native)
    routed, by_position = _route(results, targets)
    for name, target_file in targets.items():
        file_outcome = FileOutcome(file=name, kernel_type=target_file.kernel_type)
        grew = target_file.frame.attrs.pop("grew", 0)
        if grew:
            target_file.changed = True
            outcome.notes.append(f"{name}: {grew} row(s) new in the source database were added "
                                 f"to this device's copy")
        updates: dict[Signature, RowUpdate] = {}
        updated_sigs: set[str] = set()
        for sig_text, result in routed.get(name, {}).items():
            updates[target_file.by_text[sig_text]] = RowUpdate(identity={},
                                                               values=_values(result, run_id))
            rows = target_file.counts[sig_text]
            if result.status == STATUS_OK:
                file_outcome.updated += rows
                updated_sigs.add(sig_text)
            else:
                file_outcome.failed += rows
        if updates:
            merged = apply_updates(target_file.frame, target_file.kernel_type, updates,
                                   add_new=False, signatures=target_file.sigs)
            target_file.frame = merged.frame
            target_file.changed = True
        positions = by_position.get(name, {})
        if positions:
            _set_status_by_position(target_file, positions, run_id)
            file_outcome.failed += len(positions)
        if prune_empty:
            _prune(target_file, file_outcome, set(routed.get(name, {})), set(positions))
        _summarize(target_file, file_outcome, updated_sigs, outcome.gaps)
        outcome.files.append(file_outcome)
    if not dry_run and target is not None:
        _write(source, target, native, targets)
    return outcome


def _set_status_by_position(target: _Target, positions: dict[int, CaseResult],
                            run_id: str) -> None:
    """Rows whose cells cannot be parsed still get their case's error in their status."""
    columns = list(_values(next(iter(positions.values())), run_id))
    target.frame = ensure_columns(target.frame, target.kernel_type, columns)
    for position, result in positions.items():
        for column, text in _values(result, run_id).items():
            target.frame.iat[position, target.frame.columns.get_loc(column)] = text
    target.changed = True


def _write(source: Path, target: Path, native: bool, targets: dict[str, _Target]) -> None:
    """All changed files (and, for a new device copy, op_mapping.yaml) in one batch."""
    with WriteBatch() as batch:
        for name, target_file in targets.items():
            if target_file.changed:
                frame = ensure_columns(target_file.frame, target_file.kernel_type,
                                       canonical_order(target_file.kernel_type))
                batch.add_table(frame, target / name)
        mapping = source / OP_MAPPING_FILE
        if not native and mapping.is_file() and not (target / OP_MAPPING_FILE).exists():
            batch.add_text(target / OP_MAPPING_FILE, mapping.read_text(encoding="utf-8"))
