"""Session finish: measurements back into the database, in one process, atomically.

- The session's collection snapshot (`db.database.Database`) is updated, not read again: a
  result names its row (file, position) with the short hash of the row's signature as a check;
  a file that changed since collection is read again and matched by signature.
- A row matched by signature gets `Average Duration(us)` (the statistic the session chose,
  the median by default, named in `MicroBench Statistic`) and this project's MicroBench
  columns (median, mean, std, min, samples, precision reached, stop reason, outliers, method,
  status, device, stack, run id, time).
- A case that failed leaves its durations alone and gets the error in its status; so does a
  row the replay could not run here (larger than the host's memory, a kernel of another
  device, no replay yet): `skipped: <why>`. A case pytest skipped (a mark) leaves it alone.
- A result faster than the physical bound (`suspect`) or whose samples are inconsistent with a
  quiet machine (`noisy`) is flagged: its statistics are kept in the MicroBench columns with
  the status and its reason, but not put in `Average Duration(us)`, which readers take as the
  row's latency (an earlier value there stays; missing-only runs measure the row again).
- Pruning (`--npuperf-prune-empty-duration-rows`) deletes only rows whose case ran and did not
  fail and that had no duration before the run and still have none; it says which.
- Under msprof or torch_npu's profiler, the statistics are those of the case's kernels and
  the mean of each hardware counter goes to `MicroBench <counter>`; a case whose kernels could
  not be found (`unattributed`) keeps its own timing in the MicroBench columns, not in
  `Average Duration(us)`.
- MatMulV2/V3/Common: when the device says which of them ran (msprof), the measurement lands
  in that type's file if it holds the signature; replays never add rows.
- Device isolation: a database of another device is never written; the measuring device
  gets its own copy (same files and rows, measurement columns cleared) under the output
  directory, updated on every run. Profiling values the source holds from this very device
  (its `Profiling Device`: a flat database parsed from a profile taken here) are carried into
  the copy, so that they are compared with this device's replays.
- The gap (replay / in-model) leaves out rows whose in-model times are marked untrusted (an
  oversubscribed or preempting host), and says when a row was profiled with another thread
  count than the replay ran with.
"""

from __future__ import annotations

import contextlib
import math
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from ..db.columns import (
    AVERAGE_DURATION,
    COUNTERS,
    INPUT_SHAPES,
    INPUT_STRIDES,
    MICROBENCH_CACHE,
    MICROBENCH_DEVICE,
    MICROBENCH_IMPLEMENTATION,
    MICROBENCH_MEAN_DURATION,
    MICROBENCH_MEDIAN_DURATION,
    MICROBENCH_METHOD,
    MICROBENCH_MIN_DURATION,
    MICROBENCH_OUTLIERS,
    MICROBENCH_PRECISION,
    MICROBENCH_RUN_ID,
    MICROBENCH_SAMPLES,
    MICROBENCH_STACK,
    MICROBENCH_STATISTIC,
    MICROBENCH_STATUS,
    MICROBENCH_STD_DURATION,
    MICROBENCH_STOP_REASON,
    MICROBENCH_TIMESTAMP,
    MICROBENCH_WARMUP,
    OUTPUT_SHAPES,
    PROFILING_AVERAGE_DURATION,
    PROFILING_COUNT,
    PROFILING_DEVICE,
    PROFILING_STD_DURATION,
    PROFILING_THREADS,
    PROFILING_TRUST,
    PROFILING_UPDATED,
    ROOFLINE_COLUMNS,
    microbench_counter,
    parse_duration,
    trusted_profile,
)
from ..db.database import Database, Table
from ..db.errors import NpuperfError
from ..db.layout import PROFILES_DIR, device_of
from ..db.lock import DatabaseLock
from ..db.measured_stack import MEASURED_STACK_FILE, read_measured_stack, updated_measured_stack
from ..db.signature import Signature
from ..db.transaction import Transaction
from ..db.upsert import (
    canonical_order,
    ensure_columns,
    format_number,
    format_numbers,
    migrate_legacy,
    set_columns,
)
from ..kernels.catalog import same_call_types
from ..kernels.mapping_writer import ensure_op_mapping
from ..measure.counters import CounterMatrix, shared_rows
from ..measure.result import (
    FAILING_STATUSES,
    STATUS_NOISY,
    STATUS_OK,
    STATUS_SKIPPED,
    STATUS_SUSPECT,
    STATUS_UNATTRIBUTED,
    CaseResult,
)
from .outcome import FileOutcome, GapRow, WriteOutcome

_STATUS_MAX = 300
_EXAMPLES = 3
# Preference when several results target the same row (duplicate rows, MatMul aliases);
# these statuses also keep their statistics in the MicroBench columns.
_RANK = {STATUS_OK: 0, STATUS_NOISY: 1, STATUS_SUSPECT: 2, STATUS_UNATTRIBUTED: 3}


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


_COUNTER_COLUMNS = {name: microbench_counter(name) for name in COUNTERS}


def _counter_column(name: str) -> str:
    return _COUNTER_COLUMNS.get(name) or microbench_counter(name)


def _values(result: CaseResult, run_id: str) -> dict[str, str]:
    """The MicroBench cells of a result's row (`_columns` of that one result)."""
    return {column: texts[0] for column, texts in _columns([result], run_id).items()
            if texts[0] is not None}


def _columns(results: list[CaseResult], run_id: str) -> dict[str, list[str | None]]:
    """Column -> per result, the text its row gets there (None: the cell is left alone).

    Built column by column for all results at once, every number formatted in one operation:
    a write of 10^5 results would otherwise build a dict per row."""
    count = len(results)
    columns: dict[str, list[str | None]] = {
        MICROBENCH_METHOD: [r.method for r in results],
        MICROBENCH_DEVICE: [r.device for r in results],
        MICROBENCH_STACK: [r.stack for r in results],
        MICROBENCH_RUN_ID: [run_id] * count,
        MICROBENCH_TIMESTAMP: [r.timestamp for r in results],
        MICROBENCH_STATUS: [r.status_text[:_STATUS_MAX] for r in results],
        MICROBENCH_IMPLEMENTATION: [r.implementation for r in results],
        MICROBENCH_CACHE: [r.cache for r in results],
    }
    kept = [r.stats is not None and r.status in _RANK for r in results]
    if any(kept):
        every = all(kept)

        def only(texts) -> list[str | None]:
            return list(texts) if every else [t if k else None for t, k in zip(texts, kept)]

        stats = [r.stats if k else None for r, k in zip(results, kept)]
        # Each number column formatted in one operation, straight from the statistics.
        median, mean, std, low, precision, value = (format_numbers(numbers) for numbers in (
            [s and s.median for s in stats], [s and s.mean for s in stats],
            [s and s.std for s in stats], [s and s.min for s in stats],
            [r.precision if k else None for r, k in zip(results, kept)],
            [s and (s.mean if r.statistic == "mean" else s.median)
             for s, r in zip(stats, results)]))
        columns.update({
            MICROBENCH_STATISTIC: only(r.statistic for r in results),
            MICROBENCH_MEDIAN_DURATION: only(median), MICROBENCH_MEAN_DURATION: only(mean),
            MICROBENCH_STD_DURATION: only(std), MICROBENCH_MIN_DURATION: only(low),
            MICROBENCH_SAMPLES: only(str(s.samples) if k else None for s, k in zip(stats, kept)),
            MICROBENCH_PRECISION: only(precision),
            MICROBENCH_STOP_REASON: only(r.stop_reason for r in results),
            MICROBENCH_OUTLIERS: only(str(s.outliers) if k else None
                                      for s, k in zip(stats, kept)),
            MICROBENCH_WARMUP: only(str(r.warmup) for r in results),
        })
        average = [t if k and r.status == STATUS_OK else None
                   for t, k, r in zip(value, kept, results)]
        if average.count(None) < count:
            columns[AVERAGE_DURATION] = average
    for index, result in enumerate(results):
        for column, text in _roofline_values(result).items():
            columns.setdefault(column, [None] * count)[index] = text
    return columns


def _roofline_values(result: CaseResult) -> dict[str, str]:
    """The roofline columns (set, or cleared, with every result that has a bound)."""
    if result.bound_us is None:
        return {}
    numbers = (result.bound_us, result.compute_bound_us, result.memory_bound_us)
    return {
        **{column: format_number(value) for column, value in
           zip(ROOFLINE_COLUMNS[:3], numbers)},
        ROOFLINE_COLUMNS[3]: result.memory_level,
        ROOFLINE_COLUMNS[4]: format_number(result.hbm_bound_us),
        ROOFLINE_COLUMNS[5]: result.bound_by,
        **{column: format_number(value) for column, value in
           zip(ROOFLINE_COLUMNS[6:10], (result.achieved_tflops, result.achieved_gbps,
                                        result.mfu, result.mbu))},
        ROOFLINE_COLUMNS[10]: result.bound_derivation,
    }


_COUNTER_BLOCK = 10_000  # results whose counters are formatted together


def _counter_columns(results: list[CaseResult]) -> dict[str, list[str | None]]:
    """`MicroBench <counter>` of the rows whose result carries hardware counters (msprof),
    as `_columns`: 10^5 rows x 25 counters formatted a block of rows at a time, in one
    operation each (in the order the numbers lie in memory; only one block's temporary
    texts exist at once)."""
    shared = shared_rows([r.counters for r in results])
    if shared is not None:
        return _matrix_counter_columns(results, *shared)
    measured = [i for i, r in enumerate(results) if r.counters and r.status in _RANK]
    if not measured:
        return {}
    counters = [results[i].counters for i in measured]
    key_sets = {tuple(c) for c in counters}
    present = {n for keys in key_sets for n in keys}
    names = [n for n in COUNTERS if n in present] + sorted(present - set(COUNTERS))
    width = len(names)
    complete = key_sets == {tuple(names)}  # every result has every counter, in this order
    texts: list[list[str | None]] = [[] for _ in names]
    for at in range(0, len(counters), _COUNTER_BLOCK):
        block = counters[at:at + _COUNTER_BLOCK]
        flat = format_numbers([v for c in block for v in c.values()] if complete else
                              [c.get(n) for c in block for n in names])
        for j, column in enumerate(texts):
            column += flat[j::width]
    if len(measured) < len(results):
        for j, column in enumerate(texts):
            cells: list[str | None] = [None] * len(results)
            for i, text in zip(measured, column):
                cells[i] = text
            texts[j] = cells
    return {_counter_column(name): column for name, column in zip(names, texts)}


def _matrix_counter_columns(results: list[CaseResult], matrix: CounterMatrix,
                            rows: np.ndarray) -> dict[str, list[str | None]]:
    """`_counter_columns` of results whose counters are rows of one matrix: each column
    formatted from the matrix at once, no per-result mapping looked at."""
    ranked = np.fromiter((r.status in _RANK for r in results), bool, len(results))
    values = matrix.values[np.where(rows >= 0, rows, 0)]
    measured = ranked & (rows >= 0) & ~np.isnan(values).all(axis=1)
    if not measured.any():
        return {}
    values = values[measured]
    every = bool(measured.all())
    positions = np.flatnonzero(measured)
    columns = {}
    for j, name in enumerate(matrix.names):
        column = values[:, j]
        if np.isnan(column).all():
            continue  # no result has this counter: the column is not touched
        texts = format_numbers(column.tolist())  # NaN (a counter this result lacks): ""
        if not every:
            cells = np.full(len(results), None, object)
            cells[positions] = texts
            texts = cells.tolist()
        columns[_counter_column(name)] = texts
    return columns


def _better(new: CaseResult, old: CaseResult | None) -> bool:
    """Which of two results for one row wins: the better status, then the earlier row, then
    (implementations of one row, --npuperf-impl all) the faster, so that the outcome does not
    depend on the order xdist workers report in."""
    if old is None:
        return True

    def key(r):
        value = r.value if r.status == STATUS_OK and r.value is not None else math.inf
        return (_RANK.get(r.status, 9), r.row if r.row is not None else 1 << 62, value,
                r.case_id)
    return key(new) < key(old)


class _Target:
    """One file of the database being written: its table and whether it must be written."""

    def __init__(self, table: Table, *, changed: bool = False, grew: int = 0) -> None:
        self.table = table
        self.changed = changed
        self.grew = grew

    @property
    def name(self) -> str:
        return self.table.name

    @property
    def kernel_type(self) -> str:
        return self.table.kernel_type

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.frame


def _load_targets(snapshot: Database, target: Path | None, native: bool,
                  own: Database | None) -> dict[str, _Target]:
    """The tables to update. Native: the snapshot's, read again only where the file changed
    since (the lock is held by now). Otherwise this device's copy, grown by new source rows,
    or seeded from the source where it has no such file yet, with the source's profiling
    values taken on this device."""
    device = device_of(target) if target is not None and not native else None
    targets = _targets(snapshot, target, native, own)
    if device:
        for name, target_file in targets.items():
            if _carry_own_profiles(snapshot.tables[name], target_file.table, device):
                target_file.changed = True
    return targets


_CARRIED = (INPUT_STRIDES,)


def _carry_own_profiles(source: Table, own: Table, device: str) -> int:
    """Copy into this device's table the profiling columns (and the model's input strides)
    of the source rows profiled on `device`; returns the rows changed."""
    frame = source.frame
    if PROFILING_DEVICE not in frame.columns:
        return 0
    devices = frame[PROFILING_DEVICE].tolist()
    rows = [i for i, d in enumerate(devices) if str(d).strip() == device
            and source.signatures[i] is not None]
    if not rows:
        return 0
    columns = [c for c in frame.columns if c.startswith("Profiling ") or c in _CARRIED]
    positions = own.positions()
    target = ensure_columns(own.frame, own.kernel_type, columns)
    changed = 0
    updated = columns.index(PROFILING_UPDATED) if PROFILING_UPDATED in columns else None
    for i in rows:
        values = [str(frame.iat[i, frame.columns.get_loc(c)]) for c in columns]
        for position in positions.get(source.signatures[i], ()):
            current = [str(target.iat[position, target.columns.get_loc(c)]) for c in columns]
            # A profile parsed into this copy after the source's stays (ISO times compare).
            newer = updated is not None and current[updated].strip() > values[updated].strip()
            if current != values and not newer:
                for column, value in zip(columns, values):
                    target.iat[position, target.columns.get_loc(column)] = value
                changed += 1
    own.frame = target
    return changed


def _targets(snapshot: Database, target: Path | None, native: bool,
             own: Database | None) -> dict[str, _Target]:
    targets = {}
    for name in snapshot.tables:
        if native:
            targets[name] = _Target(snapshot.refresh(name))
            continue
        source = snapshot.tables[name]
        mine = own.refresh(name) if own is not None and (own.path / name).is_file() else None
        if mine is None:
            path = (target if target is not None else snapshot.path) / name
            table = Table(path, seed_frame(source.frame), None, source.kernel_type, {},
                          list(source.signatures), list(source.errors))
            targets[name] = _Target(table, changed=True)  # a new file of the device's database
        else:
            targets[name] = _Target(mine, grew=_add_new_source_rows(mine, source))
    return targets


def _add_new_source_rows(own: Table, source: Table) -> int:
    """Append to the device's table the source rows it does not have yet (the source grew)."""
    have = own.positions()
    new = [i for i, s in enumerate(source.signatures) if s is not None and s not in have]
    if not new:
        return 0
    attrs = dict(own.frame.attrs)
    extra = seed_frame(source.frame).iloc[new]
    frame = ensure_columns(own.frame, own.kernel_type, list(extra.columns))
    merged = pd.concat([frame, extra.reindex(columns=frame.columns, fill_value="")],
                       ignore_index=True)
    merged.attrs.update(attrs)
    own.replace(merged, [*own.signatures, *(source.signatures[i] for i in new)])
    return len(new)


class _Routes:
    """Where results land, per file: `best[sig]`, the result every row of a signature gets;
    `own[position]`, the result of the case collected from that row, where the row is still
    there; `unparsed[position]`, results of rows whose cells cannot be parsed (no signature)."""

    def __init__(self) -> None:
        self.best: dict[Signature, CaseResult] = {}
        self.own: dict[int, CaseResult] = {}
        self.unparsed: dict[int, CaseResult] = {}

    def groups(self, index: dict[Signature, list[int]]) -> list[tuple[CaseResult, list[int]]]:
        """(result, row positions) to write: each signature's best result on its rows, except
        a row whose own case ended otherwise (it failed beside a passing duplicate of the same
        signature), which gets its own result: a failure is never written as `ok`."""
        groups = []
        for sig, best in self.best.items():
            shared = []
            for position in index.get(sig, ()):
                mine = self.own.get(position)
                if mine is not None and mine.status != best.status:
                    groups.append((mine, [position]))
                else:
                    shared.append(position)
            if shared:
                groups.append((best, shared))
        return groups


def _route(results: Iterable[CaseResult], collected: dict[str, Table],
           targets: dict[str, _Target], notes: list[str]) -> dict[str, _Routes]:
    """file -> where its results land (`_Routes`).

    A result names the row it was collected from (file, position) and carries the short hash
    of that row's signature: the signature is taken from the collection snapshot, checked
    against the hash, and matched in the table being written (which may have been read again).
    """
    family_files = [n for n, t in targets.items() if len(same_call_types(t.kernel_type)) > 1]
    routes: dict[str, _Routes] = defaultdict(_Routes)
    stale = 0
    for result in results:
        if result.status == STATUS_SKIPPED and not result.method:
            continue  # skipped by pytest (a mark, -m): the row is left exactly as it was
        source = collected.get(result.file)
        position = (result.row or 0) - 1
        if source is None or not 0 <= position < len(source.signatures):
            stale += source is not None
            continue
        sig = source.signatures[position]
        if not result.signature:
            target = targets.get(result.file)
            if sig is None and target is not None and position < len(target.table.signatures) \
                    and target.table.signatures[position] is None:
                routes[result.file].unparsed[position] = result
            continue
        if sig is None or source.checks()[position] != result.signature:
            stale += 1
            continue
        name = result.file
        ran = result.measured_kernel_type
        if ran and ran != result.kernel_type and ran in same_call_types(result.kernel_type):
            # The device ran another member of the family: the measurement belongs to that
            # type's row, if its file has one; never a new row.
            alias = next((n for n in family_files if targets[n].kernel_type == ran
                          and sig in targets[n].table.positions()), None)
            name = alias or name
        target = targets.get(name)
        if target is None:
            continue
        written = target.table.signatures
        # The row it was collected from, still in place (the usual case: the table was not
        # read again, the very signature object is there): no lookup of the signature.
        own = name == result.file and position < len(written) and (
            written[position] is sig or written[position] == sig)
        if not own and sig not in target.table.positions():
            continue
        route = routes[name]
        if _better(result, route.best.get(sig)):
            route.best[sig] = result
        if own:
            route.own[position] = result
    if stale:
        notes.append(f"{stale} result(s) no longer match the row they were collected from "
                     f"(the file changed during the session); they were not written")
    return routes


def _shape_text(frame: pd.DataFrame, position: int) -> str:
    # Two cells, not the row: a row of a wide object frame is a new Series (ms each, once
    # per gap row of every file at each write). A file with a column twice: as the row has it.
    if not frame.columns.is_unique:
        row = frame.iloc[position]
        return f"{row.get(INPUT_SHAPES, '')} -> {row.get(OUTPUT_SHAPES, '')}"

    def cell(column: str) -> object:
        return frame[column].iat[position] if column in frame.columns else ""
    return f"{cell(INPUT_SHAPES)} -> {cell(OUTPUT_SHAPES)}"


def _durations(frame: pd.DataFrame, column: str) -> list[float | None]:
    """Valid durations of a column, None where a row has none (or no such column)."""
    if column not in frame.columns:
        return [None] * len(frame)
    cells = frame[column].tolist()
    # A column repeats few texts (empty, mostly) or is new numbers: each text parsed once.
    parsed = {text: parse_duration(text) for text in set(cells)}
    return [parsed[text] for text in cells]


def _empty_rows(frame: pd.DataFrame) -> list[bool]:
    """Per row: neither a replay nor a profiling duration."""
    mb, prof = _durations(frame, AVERAGE_DURATION), _durations(frame, PROFILING_AVERAGE_DURATION)
    return [a is None and b is None for a, b in zip(mb, prof)]


def _prune(target: _Target, outcome: FileOutcome, measured: set[Signature],
           empty_before: list[bool], notes: list[str], failed_rows: set[int]) -> None:
    """Delete the rows this session measured (a case that ran and did not fail) that had no
    duration before the run and still have none. A row whose case failed, errored, timed out
    or crashed keeps its row (with its status), as do rows not selected and rows without a
    replay."""
    table = target.table
    frame = table.frame
    empty_after = _empty_rows(frame)
    drop = [before and after and sig is not None and sig in measured and i not in failed_rows
            for i, (before, after, sig) in enumerate(zip(empty_before, empty_after,
                                                         table.signatures))]
    if not any(drop):
        return
    positions = [i for i, d in enumerate(drop) if d]
    outcome.deleted = len(positions)
    outcome.examples["deleted"] = [_shape_text(frame, i) for i in positions[:_EXAMPLES]]
    shown = "; ".join(f"row {i + 1} ({_shape_text(frame, i)})" for i in positions[:5])
    more = f" and {len(positions) - 5} more" if len(positions) > 5 else ""
    notes.append(f"{table.name}: pruned {len(positions)} row(s) measured without any duration, "
                 f"before or after this run: {shown}{more}")
    attrs = dict(frame.attrs)
    keep = [not d for d in drop]
    pruned = frame.loc[keep].reset_index(drop=True)
    pruned.attrs.update(attrs)
    table.replace(pruned, [s for s, k in zip(table.signatures, keep) if k])
    target.changed = True


def _numbers(frame: pd.DataFrame, column: str) -> list[float | None]:
    """A column's finite numbers, None where a cell holds none (or no such column)."""
    if column not in frame.columns:
        return [None] * len(frame)
    cells = frame[column].tolist()
    parsed = {}
    for text in set(cells):
        try:
            value = float(str(text).strip())
        except ValueError:
            value = None
        parsed[text] = value if value is not None and np.isfinite(value) else None
    return [parsed[text] for text in cells]


def _column(frame: pd.DataFrame, column: str) -> list[str]:
    return ([str(v).strip() for v in frame[column].tolist()] if column in frame.columns
            else [""] * len(frame))


def _summarize(target: _Target, outcome: FileOutcome, updated: dict[Signature, CaseResult],
               run: WriteOutcome) -> None:
    table = target.table
    frame = table.frame
    outcome.rows = len(frame)
    mb, prof = _durations(frame, AVERAGE_DURATION), _durations(frame, PROFILING_AVERAGE_DURATION)
    counts, stds = _numbers(frame, PROFILING_COUNT), _numbers(frame, PROFILING_STD_DURATION)
    trust, profile_threads = _column(frame, PROFILING_TRUST), _column(frame, PROFILING_THREADS)
    seen: set[Signature | None] = set()
    for position, sig in enumerate(table.signatures):
        if sig is not None and sig in seen:
            outcome.duplicates += 1
            outcome.examples.setdefault("duplicates", [])
            if len(outcome.examples["duplicates"]) < _EXAMPLES:
                outcome.examples["duplicates"].append(_shape_text(frame, position))
        seen.add(sig)
        if prof[position] is not None:
            calls = int(counts[position] or 1)
            run.model_us[target.kernel_type] = (run.model_us.get(target.kernel_type, 0.0)
                                                + prof[position] * calls)
        if mb[position] is None:
            outcome.missing += 1
            missing = outcome.examples.setdefault("missing", [])
            if len(missing) < _EXAMPLES:
                missing.append(_shape_text(frame, position))
        if sig in updated and mb[position] is not None and prof[position] is not None:
            if not trusted_profile(trust[position]):
                run.untrusted[trust[position]] = run.untrusted.get(trust[position], 0) + 1
                continue
            replayed = updated[sig].threads
            if profile_threads[position] and replayed and \
                    profile_threads[position] != str(replayed):
                key = (profile_threads[position], str(replayed))
                run.thread_mismatch[key] = run.thread_mismatch.get(key, 0) + 1
            std = stds[position]
            run.gaps.append(GapRow(target.kernel_type, target.name, mb[position], prof[position],
                                   _shape_text(frame, position), int(counts[position] or 0),
                                   std / prof[position] if std is not None else math.nan))
    outcome.unchanged = max(outcome.rows - outcome.updated - outcome.failed - outcome.flagged, 0)


def write_results(source: Path, target: Path | None, results: list[CaseResult], *, native: bool,
                prune_empty: bool = False, dry_run: bool = False, run_id: str = "",
                stamp: str = "", snapshot: Database | None = None, own: Database | None = None,
                lock: DatabaseLock | Literal[True] = True, purpose: str = "pytest write"
                ) -> WriteOutcome:
    """Write the session's results; returns what changed. Nothing is written on a dry run.

    `snapshot`: the source database as read at collection (read now when not given); `own`:
    this device's database when it is not the source (read now when needed); `lock`: the
    target's lock when the caller holds it, else True to take it here.
    """
    source, target = Path(source), (Path(target) if target is not None else None)
    outcome = WriteOutcome(source=source, target=None if dry_run else target, native=native,
                              dry_run=dry_run, run_id=run_id, stamp=stamp)
    if snapshot is None:
        snapshot = Database(source).read(strict=False)
    for name, error in snapshot.failed.items():
        outcome.notes.append(f"{name} could not be read, none of its rows was updated: {error}")
    write = not dry_run and target is not None
    tx = Database(target).transaction(purpose, lock=lock) if write else None
    with tx if tx is not None else contextlib.nullcontext():
        if not native and own is None and target is not None and target.is_dir():
            own = Database(target)
        collected = dict(snapshot.tables)  # as the cases saw them (refresh may replace them)
        here = device_of(target) if target is not None else None
        if not native and _profiled(snapshot, here):
            outcome.notes.append(
                f"the source database's profiling values were measured on "
                f"{device_of(source) or 'another device'}: they are not compared with this "
                f"device's replay (profile the model here: npuperf profile --db "
                f"{target})")
        targets = _load_targets(snapshot, target, native, own)
        routes = _route(results, collected, targets, outcome.notes)
        for name, target_file in targets.items():
            _update(target_file, routes.get(name) or _Routes(), outcome, run_id=run_id,
                    prune_empty=prune_empty)
        if target is not None:
            _predict_kept_profiles(target, targets, outcome)
        if tx is not None:
            _stage(tx, source, target, native, targets)  # type: ignore[arg-type]
            if not native:
                outcome.notes += _record_stack(tx, source, target, results, run_id)  # type: ignore[arg-type]
            outcome.notes[:0] = tx.notes
    outcome.notes += _conditions_notes(outcome)
    return outcome


def _predict_kept_profiles(target: Path, targets: dict[str, _Target],
                           outcome: WriteOutcome) -> None:
    """The model-level prediction of each trace kept in the database's profiles/ (the demo
    model's), from the database as this run leaves it."""
    kept = sorted((target / PROFILES_DIR).glob("*.json")) if (target / PROFILES_DIR).is_dir() \
        else []
    if not kept:
        return
    from ..ingest.prediction import predict_tables

    tables = {name: t.table for name, t in targets.items()}
    for trace in kept:
        try:
            outcome.predictions.append(predict_tables(trace, tables, target))
        except NpuperfError as exc:
            outcome.notes.append(f"no model prediction for {trace}: {exc}")


def _conditions_notes(outcome: WriteOutcome) -> list[str]:
    notes = [f"{n} row(s) were not compared with the model: their in-model times are {why} "
             f"(profile the model again on a quiet host)"
             for why, n in sorted(outcome.untrusted.items())]
    notes += [f"{n} compared row(s) were profiled with {profiled} thread(s) and replayed with "
              f"{replayed}: their ratios compare different conditions (--npuperf-threads "
              f"{profiled} replays them as profiled)"
              for (profiled, replayed), n in sorted(outcome.thread_mismatch.items())]
    return notes


def _profiled(database: Database, here: str | None = None) -> bool:
    """Whether any table holds a profiled (in-model) duration taken on another device than
    `here` (rows that do not say where were taken elsewhere)."""
    for table in database.tables.values():
        devices = (table.frame[PROFILING_DEVICE].tolist()
                   if PROFILING_DEVICE in table.frame.columns else [""] * len(table.frame))
        for value, device in zip(_durations(table.frame, PROFILING_AVERAGE_DURATION), devices):
            if value is not None and (here is None or str(device).strip() != here):
                return True
    return False


def _update(target: _Target, routes: _Routes, outcome: WriteOutcome, *, run_id: str,
            prune_empty: bool) -> None:
    table = target.table
    file_outcome = FileOutcome(file=table.name, kernel_type=table.kernel_type)
    if target.grew:
        target.changed = True
        outcome.notes.append(f"{table.name}: {target.grew} row(s) new in the source database "
                             f"were added to this device's copy")
    empty_before = _empty_rows(table.frame) if prune_empty else []
    updated = {sig: r for sig, r in routes.best.items() if r.status == STATUS_OK}
    groups = routes.groups(table.positions())
    for result, rows in groups:
        if result.status == STATUS_OK:
            file_outcome.updated += len(rows)
        elif result.status in FAILING_STATUSES:
            file_outcome.failed += len(rows)
        else:
            file_outcome.flagged += len(rows)
    if groups:
        results = [result for result, _ in groups]
        columns = _columns(results, run_id)
        columns.update(_counter_columns(results))
        table.frame = set_columns(table.frame, table.kernel_type, columns,
                                  [rows for _, rows in groups])
        target.changed = True
    if routes.unparsed:
        _set_status_by_position(target, routes.unparsed, run_id)
        unparsed = routes.unparsed.values()
        file_outcome.failed += sum(1 for r in unparsed if r.status in FAILING_STATUSES)
        file_outcome.flagged += sum(1 for r in unparsed if r.status not in FAILING_STATUSES)
    if prune_empty:
        measured = {sig for sig, r in routes.best.items() if r.status not in FAILING_STATUSES}
        failed = {p for p, r in routes.own.items() if r.status in FAILING_STATUSES}
        _prune(target, file_outcome, measured, empty_before, outcome.notes, failed)
    _summarize(target, file_outcome, updated, outcome)
    outcome.files.append(file_outcome)


def _set_status_by_position(target: _Target, positions: dict[int, CaseResult],
                            run_id: str) -> None:
    """Rows whose cells cannot be parsed still get their case's error in their status."""
    table = target.table
    columns = list(_values(next(iter(positions.values())), run_id))
    frame = ensure_columns(table.frame, table.kernel_type, columns)
    for position, result in positions.items():
        for column, text in _values(result, run_id).items():
            frame.iat[position, frame.columns.get_loc(column)] = text
    table.frame = frame
    target.changed = True


def _record_stack(tx: Transaction, source: Path, target: Path, results: list[CaseResult],
                  run_id: str) -> list[str]:
    """A device copy: the stack its measured rows came from, in measured_stack.json beside
    them (db/measured_stack.py says why the directory keeps the source's name)."""
    measured = [r for r in results if r.measured and r.stack]
    if not measured:
        return []
    stacks = sorted({r.stack for r in measured})
    text, notes = updated_measured_stack(
        read_measured_stack(target), source=source.name, version_dir=target.name,
        device=target.parent.parent.name, stacks=stacks, run_id=run_id,
        when=max(r.timestamp for r in measured), rows=len(measured))
    tx.stage_text(target / MEASURED_STACK_FILE, text)
    return notes


def _stage(tx: Transaction, source: Path, target: Path, native: bool,
           targets: dict[str, _Target]) -> None:
    """Every changed file in the transaction, each checked at commit against the stamp it was
    read with, and op_mapping.yaml where the database has none (a device copy gets the
    source's, else one is generated: the simulator reads no table without it)."""
    for name, target_file in targets.items():
        if target_file.changed:
            table = target_file.table
            frame = ensure_columns(table.frame, table.kernel_type,
                                   canonical_order(table.kernel_type))
            tx.stage_table(target / name, frame, expect=table.stamp)
    if tx.staged or not native:  # a run that changes nothing leaves the database as it was
        ensure_op_mapping(tx, target, source=None if native else source)
