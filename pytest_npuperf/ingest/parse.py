"""`npuperf parse`: profiler kernel tables -> `Profiling ...` columns of the database.

Merge, never overwrite: a row whose signature exists gets its profiling columns updated; new
signatures are appended; replay columns, theory rows and unknown columns survive. All files
are staged first and committed together through the database's transaction (lock, journal,
all-or-nothing renames), so a failure at any point leaves the database exactly as it was.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..db.columns import (
    DISPATCH_FFN_COMBINE,
    EP_SIZE,
    FIA_KERNEL,
    PROFILING_AVERAGE_DURATION,
    PROFILING_COUNT,
    PROFILING_MAX_DURATION,
    PROFILING_MEDIAN_DURATION,
    PROFILING_MIN_DURATION,
    PROFILING_SOURCE,
    PROFILING_STD_DURATION,
    PROFILING_TRUST,
    PROFILING_UPDATED,
    TRUST_OK,
    profiling_counter,
    trusted_profile,
)
from ..db.database import Database, walk_files
from ..db.errors import CellError, ContractError, NpuperfError, clip
from ..db.layout import OP_MAPPING_FILE, kernel_file_name
from ..db.lock import DatabaseLock
from ..db.op_mapping import KEPT, load_op_mapping
from ..db.progress import Progress
from ..db.provenance import collection_entry, stage_provenance
from ..db.signature import Signature, signature
from ..db.table import check_writable_dir
from ..db.upsert import RowUpdate, apply_updates, format_number
from ..kernels import sparse_runtime
from ..kernels.case import case_from_row
from ..kernels.mapping_writer import ensure_op_mapping
from ..kernels.module_kinds import ModuleKinds, load_kinds
from ..kernels.torch_ops import TorchOperators
from .aggregate import AggregateResult, KernelAggregator, ProfiledKernel
from .fia_runtime import runtime_for_file
from .kernel_details import DEFAULT_CHUNK_ROWS, existing_path, find_kernel_details
from .trace import KIND_NPU
from .trace_rows import TraceSummary, trace_rows

_MAX_SOURCES = 3


@dataclass
class FileChange:
    path: Path
    added: int = 0
    updated: int = 0
    created: bool = False
    renamed: dict[str, str] = field(default_factory=dict)


@dataclass
class ParseSummary:
    database: Path
    aggregate: AggregateResult
    changes: list[FileChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    dry_run: bool = False
    op_mapping: str = ""  # what happened to op_mapping.yaml: kept, generated, regenerated
    traces: list[TraceSummary] = field(default_factory=list)

    @property
    def rows_added(self) -> int:
        return sum(c.added for c in self.changes)

    @property
    def rows_updated(self) -> int:
        return sum(c.updated for c in self.changes)

    def render(self) -> str:
        agg = self.aggregate
        verb = "would write" if self.dry_run else "wrote"
        tables = len(agg.files) - len(self.traces)
        read = [f"{tables} kernel table(s)"] * bool(tables or not self.traces) \
            + [f"{len(self.traces)} trace(s)"] * bool(self.traces)
        lines = [f"read {' and '.join(read)}, {agg.rows_read:,} rows; "
                 f"{agg.rows_used:,} rows in {len(agg.kernels)} (kernel type, signature) groups"]
        for trace in self.traces:
            lines += [f"  {line}" for line in trace.lines()]
        lines += [f"  {note}" for note in agg.notes]
        for path in agg.level0_files:
            lines.append(f"  {path}: level-0 kernel table (no Input Shapes column): no shapes to "
                         f"aggregate; profile with profiler_level=Level1 and record_shapes=True")
        skipped = sum(agg.skipped.values())
        if skipped:
            reasons = ", ".join(f"{n:,} {r}" for r, n in sorted(agg.skipped.items(),
                                                               key=lambda kv: -kv[1]) if n)
            lines.append(f"skipped {skipped:,} rows: {reasons}")
        lines.append(f"{verb} {len(self.changes)} file(s) in {self.database}: "
                     f"{self.rows_added} rows added, {self.rows_updated} rows updated")
        for change in sorted(self.changes, key=lambda c: c.path.name):
            tag = " (new file)" if change.created else ""
            lines.append(f"  {change.path.name}: +{change.added} added, {change.updated} "
                         f"updated{tag}")
            if change.renamed:
                lines.append(f"    migrated legacy columns: "
                             f"{', '.join(f'{a} -> {b}' for a, b in change.renamed.items())}")
        if self.op_mapping and self.op_mapping != KEPT:
            lines.append(f"  op_mapping.yaml: {self.op_mapping} (what the simulator maps to "
                         f"these tables)")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def source_label(path: Path) -> str:
    """The run a kernel table belongs to: its `*_ascend_pt` directory, else its parent."""
    for parent in path.parents:
        if parent.name.endswith("_ascend_pt"):
            return parent.name
    return path.parent.name or str(path)


def _profiling_values(kernel: ProfiledKernel, stamp: str) -> dict[str, str]:
    stats = kernel.stats
    values = {
        PROFILING_AVERAGE_DURATION: format_number(stats.mean),
        PROFILING_MEDIAN_DURATION: format_number(stats.median),
        PROFILING_STD_DURATION: format_number(stats.std),
        PROFILING_COUNT: str(stats.count),
        PROFILING_MIN_DURATION: format_number(stats.min),
        PROFILING_MAX_DURATION: format_number(stats.max),
        PROFILING_SOURCE: _sources_text(kernel.sources),
        PROFILING_UPDATED: stamp,
    }
    values.update({profiling_counter(m): format_number(v) for m, v in kernel.counters.items()})
    return values


def _sources_text(sources: list[str]) -> str:
    shown = ";".join(sources[:_MAX_SOURCES])
    more = len(sources) - _MAX_SOURCES
    return f"{shown} (+{more} more)" if more > 0 else shown


def _attach_fia_runtime(aggregator: KernelAggregator, result: AggregateResult,
                        notes: list[str]) -> None:
    first: dict[Signature, dict[str, str]] = {}
    for path, rows in aggregator.fia_rows_in_order().items():
        runtimes, note = runtime_for_file(path, [shapes for _, shapes in rows], source_label(path))
        if note:
            notes.append(note)
        for (sig, _), runtime in zip(rows, runtimes):
            first.setdefault(sig, runtime)
    for kernel in result.kernels:
        if kernel.kernel_type == FIA_KERNEL and kernel.signature in first:
            kernel.runtime = first[kernel.signature]


def _attach_sparse_runtime(result: AggregateResult) -> None:
    """The Runtime cells of sparse-attention rows that their shapes tell (the lengths are in
    no profiler table: the rows stay `inferred_only`)."""
    for kernel in result.kernels:
        if kernel.kernel_type in sparse_runtime.KERNELS and not kernel.runtime:
            try:
                case = case_from_row(kernel.kernel_type, kernel.identity)
            except CellError:
                continue
            kernel.runtime = sparse_runtime.from_shapes(
                case, source=";".join(kernel.sources[:_MAX_SOURCES]))


def _ep_signature(kernel: ProfiledKernel, ep_size: str) -> Signature:
    identity = kernel.identity
    return signature(kernel.kernel_type, identity["Input Shapes"], identity["Input Data Types"],
                     identity["Input Formats"], identity["Output Shapes"],
                     identity["Output Data Types"], ep_size)


def _clearing_stale_counters(frame, updates: dict[Signature, RowUpdate]
                             ) -> dict[Signature, RowUpdate]:
    """A new aggregate replaces the old one whole: counters the new profile does not have
    (another CANN's counter set) are emptied, not left beside durations of another run."""
    counters = [c for c in frame.columns
                if c.startswith("Profiling Average ") and c != PROFILING_AVERAGE_DURATION]
    if not counters:
        return updates
    return {sig: RowUpdate(identity=u.identity,
                           values={**dict.fromkeys(counters, ""), **u.values},
                           fill_empty=u.fill_empty)
            for sig, u in updates.items()}


def _cells_or_blank(frame, column: str) -> list[str]:
    return frame[column].tolist() if column in frame.columns else [""] * len(frame)


def _replaced_profiles(table, updates: dict[Signature, RowUpdate]) -> list[str]:
    """Rows that held another parse's statistics: this profile's replace them whole (a
    median cannot be combined from two medians), which the output says."""
    if PROFILING_AVERAGE_DURATION not in table.frame.columns:
        return []
    durations = table.frame[PROFILING_AVERAGE_DURATION].tolist()
    sources = _cells_or_blank(table.frame, PROFILING_SOURCE)
    positions = table.positions()
    replaced = [p for sig in updates for p in positions.get(sig, ()) if durations[p].strip()]
    if not replaced:
        return []
    earlier = _sources_text(sorted({sources[p] for p in replaced if sources[p].strip()}))
    return [f"{table.name}: {len(replaced)} row(s) held profiling statistics of an earlier parse"
            f"{f' ({earlier})' if earlier else ''}: replaced by this profile's, not combined "
            f"(parse the profiles together to aggregate them as one)"]


def _keeping_trusted(table, updates: dict[Signature, RowUpdate], why: str) -> list[str]:
    """An untrusted profile (an oversubscribed or preempting host) never replaces in-model
    values that were taken on a quiet host: those rows keep theirs."""
    if PROFILING_AVERAGE_DURATION not in table.frame.columns:
        return []
    durations = table.frame[PROFILING_AVERAGE_DURATION].tolist()
    marks = _cells_or_blank(table.frame, PROFILING_TRUST)
    positions = table.positions()
    kept = [sig for sig in updates for p in positions.get(sig, ())[:1]
            if str(durations[p]).strip() and trusted_profile(marks[p])]
    for sig in kept:
        del updates[sig]
    return [f"{table.name}: {len(kept)} row(s) keep their trusted in-model values: this "
            f"profile's are {why}"] if kept else []


MAX_KERNEL_TYPES = 10_000
"""A real profile has tens to hundreds of kernel types, each a file of the database (and a
few milliseconds of writing): a Type column of 10^5 distinct names is a damaged table."""


def _check_type_count(kernel_types) -> None:
    if len(kernel_types) > MAX_KERNEL_TYPES:
        shown = ", ".join(clip(name, 40) for name in sorted(kernel_types)[:3])
        raise ContractError(f"the profile names {len(kernel_types):,} kernel types ({shown}, "
                            f"...), more than the {MAX_KERNEL_TYPES:,} files one parse writes: "
                            f"a damaged Type column? (parse fewer tables at a time otherwise)")


def _check_file_names(kernel_types) -> None:
    """Two type names that sanitise to one file name would overwrite each other's rows."""
    owners: dict[str, list[str]] = defaultdict(list)
    for kernel_type in kernel_types:
        owners[kernel_file_name(kernel_type)].append(kernel_type)
    clashes = {name: types for name, types in owners.items() if len(types) > 1}
    if clashes:
        name, types = next(iter(clashes.items()))
        raise NpuperfError(f"kernel types {', '.join(map(repr, types))} would share the file "
                           f"{name}; rename them in the profile before parsing")


def find_profiles(paths: str | Path | Sequence[str | Path]
                  ) -> tuple[list[Path], list[Path], list[str]]:
    """Kernel tables and traces at each of `paths` (a file, or a directory searched
    recursively), each once, and notes. A `trace_view.json` beside a kernel table of the same
    torch_npu run is left out: the table holds the same kernels, with the kernels' own shapes
    and counters."""
    tables: dict[Path, None] = {}
    traces: dict[Path, None] = {}
    for path in [paths] if isinstance(paths, (str, Path)) else paths:
        found_tables, found_traces = _profiles_at(existing_path(path))
        tables.update(dict.fromkeys(found_tables))
        traces.update(dict.fromkeys(found_traces))
    with_tables = {t.parent for t in tables}
    kept = [t for t in traces if t.parent not in with_tables]
    notes = [f"{t}: left out: the kernel table beside it holds the same kernels"
             for t in traces if t.parent in with_tables]
    return list(tables), kept, notes


TRACE_SUFFIXES = (".json", ".json.gz")  # torch's tensorboard handler: *.pt.trace.json.gz


def _profiles_at(path: Path) -> tuple[list[Path], list[Path]]:
    if path.is_file() and path.name.lower().endswith(TRACE_SUFFIXES):
        return [], [path]
    if not path.is_dir():
        return find_kernel_details(path), []
    tables = walk_files(path, lambda parts: parts[-1].endswith(".csv")
                        and "kernel_details" in parts[-1][:-4])
    traces = walk_files(path, lambda parts: parts[-1].lower().endswith(TRACE_SUFFIXES)
                        and "trace" in parts[-1].lower())
    if not tables and not traces:
        raise NpuperfError(f"{path}: no *kernel_details*.csv and no *trace*.json(.gz) found below "
                           f"this directory (torch_npu writes kernel_details.csv to <run>_ascend_pt/"
                           f"ASCEND_PROFILER_OUTPUT/; torch.profiler's export_chrome_trace a "
                           f"trace)")
    return tables, traces


def aggregate_profiles(profiling_path: str | Path | Sequence[str | Path], *,
                       chunk_rows: int = DEFAULT_CHUNK_ROWS,
                       show_progress: bool = True, strict: bool = False,
                       operators: TorchOperators | None = None,
                       kinds: ModuleKinds | None = None
                       ) -> tuple[AggregateResult, list[str], list[TraceSummary]]:
    files, traces, notes = find_profiles(profiling_path)
    progress = Progress("parse", unit=" rows", enabled=show_progress)
    aggregator = KernelAggregator(chunk_rows=chunk_rows, strict=strict)
    for number, path in enumerate(files, start=1):
        def on_rows(_: int, number: int = number) -> None:
            progress.update(aggregator.rows_read, f"(file {number}/{len(files)})")

        aggregator.add_file(path, on_rows=on_rows, source=source_label(path))
    summaries = []
    operators = operators or TorchOperators()
    if traces and kinds is None:
        kinds = load_kinds()
    for path in traces:
        rows, summary = trace_rows(path, operators, kinds)
        aggregator.add_rows(path, rows, source_label(path))
        summaries.append(summary)
        progress.update(aggregator.rows_read, f"(trace {len(summaries)}/{len(traces)})")
    result = aggregator.result()
    _attach_fia_runtime(aggregator, result, notes)
    _attach_sparse_runtime(result)
    progress.finish(f"({result.rows_read:,} rows)")
    return result, notes, summaries


Place = Callable[[str | None], Path]
"""The database to write, given the device the profile's traces were taken on (None: the
profile does not say, e.g. kernel tables only)."""


def parse_profiling(profiling_path: str | Path | Sequence[str | Path], database: str | Path | Place, *,
                    ep_size: str | None = None, dry_run: bool = False,
                    chunk_rows: int = DEFAULT_CHUNK_ROWS, show_progress: bool = True,
                    now: _dt.datetime | None = None, strict: bool = False,
                    lock: DatabaseLock | None = None,
                    module_kinds: Sequence[str | Path] = ()) -> ParseSummary:
    """`database`: a version directory, or how to find it from the traces' device. `lock`: the
    database's lock when the caller holds it (a pytest session). `module_kinds`: files of
    more module kinds than the package's table."""
    known = None if callable(database) else Path(database)
    if known is not None:
        _check_target(known, dry_run)
    operators = TorchOperators(_operator_mappings(known))
    result, notes, traces = aggregate_profiles(profiling_path, chunk_rows=chunk_rows,
                                               show_progress=show_progress, strict=strict,
                                               operators=operators,
                                               kinds=load_kinds(module_kinds))
    devices = _one_device(traces, tables=len(result.files) - len(traces))
    if known is None:
        known = database(devices[0] or None if devices else None)
        _check_target(known, dry_run)
    summary = ParseSummary(database=known, aggregate=result, notes=notes, dry_run=dry_run,
                           traces=traces)
    database = known
    if not result.kernels:
        if not result.files and result.level0_files:
            summary.notes.append("nothing to aggregate: every input is a level-0 kernel table")
        return summary
    stamp = (now or _dt.datetime.now()).isoformat(timespec="seconds")
    by_type: dict[str, dict[Signature, RowUpdate]] = defaultdict(dict)
    ep_text = str(ep_size) if ep_size is not None else ""
    extras: dict = {}
    for trace in traces:
        extras.update(trace.extras)
    for kernel in result.kernels:
        identity = dict(kernel.identity)
        sig = kernel.signature
        if kernel.kernel_type == DISPATCH_FFN_COMBINE:
            identity[EP_SIZE] = ep_text
            sig = _ep_signature(kernel, ep_text)
        values = {**_profiling_values(kernel, stamp),
                  **extras.get((kernel.kernel_type, kernel.signature), {})}
        by_type[kernel.kernel_type][sig] = RowUpdate(
            identity=identity, values=values, fill_empty=kernel.runtime)
    _check_file_names(by_type)
    _check_type_count(by_type)
    if DISPATCH_FFN_COMBINE in by_type and ep_size is None:
        summary.notes.append("DispatchFFNCombine rows were parsed without --ep-size: their EP Size "
                             "is empty, so they match no database row that has one")
    db = Database(database)
    _place_in_alternates(db, by_type, traces)
    with (db.transaction("npuperf parse", lock=lock or True) if not dry_run
          else contextlib.nullcontext()) as tx:
        untrusted = [t.trust for t in traces if t.trust and t.trust != TRUST_OK]
        for kernel_type in sorted(by_type):
            table = db.get_or_new(kernel_type)
            table.check_matchable("npuperf parse")
            if untrusted:
                summary.notes += _keeping_trusted(table, by_type[kernel_type], untrusted[0])
            summary.notes += _replaced_profiles(table, by_type[kernel_type])
            updates = _clearing_stale_counters(table.frame, by_type[kernel_type])
            merged = apply_updates(table.frame, kernel_type, updates, add_new=True,
                                   signatures=table.signatures)
            if table.bad_rows:
                summary.notes.append(f"{table.name}: {table.bad_rows} existing row(s) have "
                                     f"unparsable identity cells and were left as they are "
                                     f"(run npuperf validate)")
            summary.changes.append(FileChange(table.path, merged.added, merged.updated,
                                              not table.exists, table.renamed))
            if tx is not None:
                db.stage(tx, table, merged.frame)
        if tx is not None:
            summary.op_mapping = ensure_op_mapping(tx, database)
            stage_provenance(tx, database, collection=collection_entry(
                database, "parse", {c.path.stem: c.added for c in summary.changes},
                version=__version__, when=now, profiles=_sources_text(
                    sorted({s for k in result.kernels for s in k.sources}))))
            summary.notes[:0] = tx.notes
    summary.notes[:0] = db.notes
    return summary


def _one_device(traces: list[TraceSummary], tables: int) -> list[str]:
    """The database devices the traces name (at most one); an error when the profile mixes
    devices: one database holds one device's numbers, and two devices' calls of a shape
    would be averaged into one row. Kernel tables are torch_npu's (an NPU)."""
    kinds = {t.device.kind for t in traces} | ({KIND_NPU} if tables else set())
    named = {t.database_device for t in traces if t.database_device}
    if len(kinds) > 1 or len(named) > 1:
        seen = sorted({t.database_device or t.device.kind for t in traces}
                      | ({f"{KIND_NPU} (kernel tables)"} if tables else set()))
        raise NpuperfError(f"the profile was taken on {len(seen)} devices ({', '.join(seen)}): "
                           f"one database holds one device's numbers; parse each device's "
                           f"profile on its own")
    devices = sorted({t.database_device or "" for t in traces})
    return devices


def _check_target(database: Path, dry_run: bool) -> None:
    if database.exists() and not database.is_dir():
        raise NpuperfError(f"{database}: not a directory")
    if not dry_run:
        check_writable_dir(database)


def _operator_mappings(database: Path | None) -> dict | None:
    """The database's own operator mappings (op_mapping.yaml), when it has them."""
    path = None if database is None else database / OP_MAPPING_FILE
    if path is None or not path.is_file():
        return None
    mappings = load_op_mapping(path).get("operator_mappings")
    return mappings if isinstance(mappings, dict) else None


def _place_in_alternates(db: Database, by_type: dict[str, dict[Signature, RowUpdate]],
                         traces: list[TraceSummary]) -> None:
    """A trace's call knows its operator, not which kernel of one call space ran (MatMulV2,
    V3, Common): a signature the database already holds in an alternate table goes there."""
    alternates: dict[str, tuple[str, ...]] = {}
    for trace in traces:
        alternates.update(trace.alternates)
    for kernel_type, others in alternates.items():
        updates = by_type.get(kernel_type)
        primary = db.get(kernel_type)
        if not updates:
            continue
        held = set(primary.positions()) if primary is not None else set()
        for other in others:
            table = db.get(other)
            if table is None:
                continue
            for sig in [s for s in updates if s not in held and s in table.positions()]:
                by_type[other][sig] = updates.pop(sig)
        if not updates:
            del by_type[kernel_type]
