"""`npuperf backfill`: fill a database from existing profiler output (an earlier wrapped run,
another machine, a run whose parent was killed).

What the output holds decides how kernels reach rows:
- a hand-off (`npuperf_handoff.jsonl`, written by a wrapped run's child): exactly what the
  parent of that run would have done (markers, else launch order + type + shapes);
- markers without a hand-off: each marker's text is a case id of this database (cut as the
  marker was); its kernels of the row's types are the samples (the warmup calls cannot be told
  apart without the hand-off: they are included, and the count is not checked);
- neither: the reference behaviour, kernels grouped by kernel type and signature, each group
  written to the row(s) with that signature (MatMulV2/V3/Common: the file of the type that ran,
  if it holds the signature).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import numpy as np

from ..db.columns import COUNTERS
from ..db.layout import REPORTS_DIR
from ..devices.mstx import MSTX_MESSAGE_LIMIT
from ..ingest.kernel_child import ChildRead
from ..ingest.op_summary import ProfileSource, find_sources, read_kernels, read_markers
from ..kernels.catalog import same_call_types
from ..measure.clock import mint_run
from ..measure.counters import CounterMatrix
from ..measure.groupstats import group_means, group_precision, group_stats
from ..measure.overhead import ATTRIBUTION, READ, PartClock
from ..measure.policy import METHOD_MSPROF, METHOD_MSPROF_SIGNATURE
from ..measure.result import STATUS_OK, CaseResult
from ..profiling.attribution import kernel_signature_hashes
from ..profiling.handoff import find_handoffs, read_handoff
from ..profiling.msprof import run_export
from ..profiling.profiled import (
    attribute_results,
    gc_paused,
    launches_of,
    prepare_cases,
    read_kernels_ahead,
)
from ..replay.cases import CaseCatalog, CaseRef, DatabaseCases
from ..replay.outcome import SessionInfo
from .finish import RunEnd, RunFacts, finish_run, summary_lines
from .target import DatabaseTarget, NoDatabase


def _exported(prof_path: Path, notes: list[str]) -> list[ProfileSource]:
    """The run directories, PROF directories msprof did not export exported first (when the
    msprof command is on this machine)."""
    sources = find_sources(prof_path)
    pending = [s for s in sources if s.kind == "msprof" and not s.exported]
    if not pending:
        return sources
    command = shutil.which("msprof")
    for source in pending:
        if command is None:
            notes.append(f"{source.root}: not exported (no op_summary); run `msprof --export=on "
                         f"--output={source.root}` on a machine with CANN, then backfill again")
            continue
        failure = run_export(command, source.root)
        if failure:
            notes.append(f"{source.root}: {failure}")
    return find_sources(prof_path) if command else sources


def _marker_cases(catalog: CaseCatalog, markers, statistic: str) -> list[CaseResult]:
    """A result per marker whose text is a case id of the database (cut text: by prefix)."""
    refs = list(catalog.cases())
    by_id = {ref.case_id: ref for ref in refs}
    results = []
    for index, message in enumerate(markers.message):
        ref = by_id.get(message)
        if ref is None and len(message.encode()) >= MSTX_MESSAGE_LIMIT - 1:  # a cut id
            ref = next((r for r in refs if r.case_id.startswith(message)), None)
        if ref is None or not ref.signature:
            continue
        results.append(_result(ref, statistic, METHOD_MSPROF, profile={
            "marker": message, "pid": int(markers.pid[index]), "device": -1, "calls": None,
            "warmup": 0, "launches": list(launches_of(ref.kernel_type))}))
    return results


def _result(ref: CaseRef, statistic: str, method: str, profile: dict | None = None
            ) -> CaseResult:
    return CaseResult(case_id=ref.case_id, nodeid="", kernel_type=ref.kernel_type,
                      file=ref.file, signature=ref.signature, row=ref.row_number,
                      status=STATUS_OK, method=method, statistic=statistic,
                      profile=profile or {})


def _signature_results(catalog: CaseCatalog, sources: list[ProfileSource], statistic: str,
                       notes: list[str]) -> list[CaseResult]:
    """Kernels grouped by (type, signature) -> the database row with that signature."""
    kernels = read_kernels(sources, with_identity=True)
    notes += kernels.notes
    hashes = kernel_signature_hashes(kernels)
    rows: dict[tuple[str, str], CaseRef] = {}
    for ref in catalog.cases():
        if ref.signature:
            rows.setdefault((ref.kernel_type, ref.signature), ref)
    keys = list(zip(kernels.type_code.tolist(), hashes.tolist()))
    group_of: dict[tuple[int, str], int] = {}
    targets: list[tuple[CaseRef, str]] = []
    group = np.full(len(kernels), -1, np.int64)
    for position, (code, digest) in enumerate(keys):
        key = (code, digest)
        if key not in group_of:
            ran = kernels.types[code]
            family = same_call_types(ran)
            ref = next((rows[(t, digest)] for t in (ran, *family) if (t, digest) in rows), None)
            group_of[key] = len(targets) if ref is not None else -1
            if ref is not None:
                targets.append((ref, ran))
        group[position] = group_of[key]
    used = group >= 0
    stats = group_stats(group[used], kernels.duration[used], len(targets))
    precision = group_precision(group[used], kernels.duration[used], len(targets), stats,
                                statistic)
    means = group_means(group[used], kernels.counters, len(targets), np.flatnonzero(used))
    unmatched = int((~used).sum())
    if unmatched:
        notes.append(f"{unmatched:,} kernel launch(es) match no row of the database by kernel "
                     f"type and signature")
    counters = CounterMatrix(COUNTERS, means).rows()
    results = []
    for index, (ref, ran) in enumerate(targets):
        result = _result(ref, statistic, METHOD_MSPROF_SIGNATURE)
        result.stats = stats.sample_stats(index)
        value = float(precision[index])
        result.precision = value if np.isfinite(value) else None
        result.measured_kernel_type = ran
        result.counters = counters[index]
        results.append(result)
    return results


def _cases(handoffs: list[Path], markers, database: DatabaseCases, statistic: str,
           sources: list[ProfileSource], notes: list[str]) -> tuple[list[CaseResult], str]:
    """The cases the profile is for, and how they were found."""
    if handoffs:
        results: list[CaseResult] = []
        for path in handoffs:
            results += read_handoff(path).results
        return results, "the runs' hand-off files"
    if len(markers):
        return (_marker_cases(database.catalog, markers, statistic),
                "mstx markers (no hand-off: warmup calls included, counts not checked)")
    return (_signature_results(database.catalog, sources, statistic, notes),
            "kernel type and signature (no markers, no hand-off)")


def backfill_profile(prof_path: Path, database: Path, *, update_mode: str = "all",
                     prune_empty: bool = False, dry_run: bool = False,
                     statistic: str = "median", reports: bool = True,
                     run: RunFacts | None = None,
                     hold: Callable[[object], object] | None = None) -> tuple[list[str], int]:
    """Fill `database` from the profiler output at `prof_path`; returns the summary lines and
    the exit status (1: a case SLOWER than the baseline, or the history or the reports not
    written). `run`: the run's identity, history, baseline, threshold and figures (default:
    a run starting now, no history); its other facts are this command's. `reports=False`
    writes the database only (benchmarks time the ingest on its own): no history, no
    reports. `hold`: given the run's results and state before this returns, by a process that
    is about to end: it need not free them, nor its collector traverse them."""
    with gc_paused(leaving=hold is not None):
        return _backfill_profile(Path(prof_path), DatabaseCases(database, "--db"),
                                 update_mode, prune_empty, dry_run, statistic, reports,
                                 run or RunFacts.of(mint_run(), source=""), hold)


def _backfill_profile(prof_path: Path, database: DatabaseCases, update_mode: str, prune_empty: bool,
                      dry_run: bool, statistic: str, reports: bool, run: RunFacts,
                      hold: Callable[[object], object] | None = None
                      ) -> tuple[list[str], int]:
    started = run.started
    clock = PartClock()  # where the command's time went (measure/overhead.py)
    notes: list[str] = []
    reading_started = time.perf_counter()
    sources = _exported(Path(prof_path), notes)
    handoffs = find_handoffs(prof_path)
    with ThreadPoolExecutor(1) as pool, ExitStack() as reading:
        # The longest read first; the markers and the hand-off are read meanwhile.
        kernels = (read_kernels_ahead(pool, sources)
                   if handoffs or any(s.marker_files for s in sources) else None)
        if kernels is not None:
            reading.callback(kernels.cancel)  # a read not waited for (an error below) ends
        markers = read_markers(sources)
        if not handoffs and not len(markers) and kernels is not None:
            # Marker files without a range: matched by signature below, which reads the
            # kernels with their shapes; this read is let end first (memory).
            kernels.result()
            kernels = None
        results, how = _cases(handoffs, markers, database, statistic, sources, notes)
        prepared = prepare_cases(results, markers) if kernels is not None else None
        if isinstance(kernels, ChildRead):
            _ = database.catalog  # the kernels are in the child: the database is read meanwhile
        if kernels is not None:
            # The kernels are freed on return, before the database is read.
            table = kernels.result()
            kernels = None
            clock.add(READ, time.perf_counter() - reading_started)
            with clock.part(ATTRIBUTION):
                outcome = attribute_results(results, sources, markers=markers, kernels=table,
                                            prepared=prepared)
            reading_started = time.perf_counter()
            table = None
            notes += outcome.notes
            notes.append(f"{outcome.attributed} case(s) attributed, {outcome.unattributed} "
                         f"unattributed; {outcome.kernels:,} kernel launch(es), "
                         f"{outcome.markers:,} marker(s)")
    notes.insert(0, f"matched by {how}; {len(results)} case(s) from {prof_path}")
    catalog = database.catalog
    clock.add(READ, time.perf_counter() - reading_started)
    if update_mode == "missing-only":
        done = catalog.measured()
        keep = []
        for result in results:
            table = catalog.tables.get(result.file)
            sig = table.signatures[result.row - 1] if table is not None and result.row else None
            if (result.file, sig) not in done:
                keep.append(result)
        notes.append(f"missing-only: {len(results) - len(keep)} case(s) whose row already has "
                     f"a duration were left out")
        results = keep
    options = {"prof_path": str(prof_path), "update_mode": update_mode,
               "prune_empty": prune_empty, "dry_run": dry_run, "statistic": statistic,
               "history": None if run.history is None else str(run.history),
               "baseline": run.baseline, "regression_threshold": run.threshold,
               "figures": run.figures}
    path = database.path
    keep = reports and not dry_run
    facts = dataclasses.replace(run, source=str(path), options=options, judge=True,
                                record=keep, reports=keep, exit_status=0,
                                device=database.device, write_errors="raise")
    target = DatabaseTarget(path, path, native=True, reports_dir=path / REPORTS_DIR,
                            prune_empty=prune_empty, dry_run=dry_run, snapshot=catalog.database,
                            purpose="npuperf backfill")
    catalog = None
    database.release()  # the target has the tables now, and lets them go once written

    def info() -> SessionInfo:
        return SessionInfo(run_id=facts.run_id, started=facts.started_iso,
                           wall_s=time.time() - started, wall_from="command start",
                           device={"kind": "npu", "name": f"profile {prof_path}",
                                   "database_device": database.device or None},
                           options=options, parts=dict(clock.parts), timed_here=False)
    end = finish_run(facts, results, target, info=info, notes=notes)
    if hold is not None:
        hold(end)
    return summary_lines(end), end.code


def finish_handoff(session: dict, results: list[CaseResult], notes: list[str], wall_s: float,
                   exit_status: int | None = None, parts: dict[str, float] | None = None
                   ) -> RunEnd:
    """The end of a wrapped run, in its parent: the child's results (their kernels attributed)
    written to the database the child chose, then judged, recorded and reported as every run
    is (see finish.py). `parts`: the parent's own overhead so far (its attribution), beside
    the child's."""
    info = SessionInfo(**{k: v for k, v in (session.get("info") or {}).items()
                          if k in SessionInfo.__dataclass_fields__})
    if parts:
        info = dataclasses.replace(info, parts={**info.parts, **parts})
    entered = time.time()
    partial = str(session.get("partial") or "")
    dry_run = bool(session.get("dry_run"))
    device = str((info.device or {}).get("database_device") or "")
    # The child measured no durations under msprof: its cases are judged now, before the
    # write-back stores their verdicts.
    facts = dataclasses.replace(RunFacts.from_handoff(session, info), judge=True,
                                record=not dry_run, reports=not dry_run,
                                exit_status=exit_status, device=device, good=not partial)
    facts.options["partial"] = partial
    source = Path(session["source"])
    reports_dir = Path(session["reports_dir"])
    if session.get("grid"):
        target = NoDatabase(source, reports_dir, dry_run=dry_run)
    else:
        target = DatabaseTarget(source, Path(session["target"]),
                                native=bool(session.get("native")), reports_dir=reports_dir,
                                prune_empty=bool(session.get("prune_empty")), dry_run=dry_run,
                                purpose=f"msprof run {facts.run_id}")

    def final_info() -> SessionInfo:
        return dataclasses.replace(info, wall_s=wall_s + time.time() - entered,
                                   wall_from="the msprof parent's start")
    return finish_run(facts, results, target, info=final_info, notes=notes)
