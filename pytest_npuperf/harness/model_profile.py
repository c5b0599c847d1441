"""The other half of the gap report on a CPU or a GPU: the demo model (profiling/demo_model.py)
profiled on this device and parsed into this device's copy of the embedded database, once per
device, so that every replay of that database's GEMMs is compared with the same GEMM inside a
model, profiled the same way (`npuperf profile` -> `npuperf parse`).

Only for the embedded default database (the demo's shapes are its rows), on a device that
writes its own copy of it (an NPU's database holds profiles from real models), and not in a
dry run. The trace is kept in `<database>/profiles/demo_model.json`; while it is there, and
its in-model times were taken on a quiet host, the device is not profiled again (delete it to
profile anew). A profile taken on an oversubscribed or preempting host is marked untrusted
(its rows too: the gap leaves them out) and profiled again on the next run, until a quiet one
replaces it. It is written after the parse, so an interrupted run profiles again next time
rather than never.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..db.columns import trusted_profile
from ..db.errors import NpuperfError
from ..db.layout import PROFILES_DIR
from ..db.table import write_text
from ..profiling.demo_model import DESCRIPTION, NAME, demo_step

if TYPE_CHECKING:
    from ..db.lock import DatabaseLock
    from .context import RunContext

PROFILED_STEPS = 3


def _trusted(trace: Path) -> bool:
    """Whether a kept profile's in-model times were taken on a quiet host (a trace from
    before such marks, or unreadable, counts as kept: it is not profiled again)."""
    from ..ingest.trace_rows import profile_metadata

    try:
        return trusted_profile(profile_metadata(trace).get("trust"))
    except NpuperfError:
        return True


def kept_trace(target: Path) -> Path:
    return target / PROFILES_DIR / f"{NAME}.json"


def wanted(context: RunContext) -> bool:
    settings = context.settings
    return (settings.model_profile and settings.embedded and not settings.grid
            and not settings.dry_run and context.backend.kind in ("cpu", "cuda")
            and not context.destination.native)


def profile_demo_once(context: RunContext, lock: DatabaseLock | None) -> bool:
    """Profile the demo model here and parse it into this device's database, unless done.
    False when Ctrl-C stopped it (what was committed before stays: each write is whole)."""
    if not wanted(context):
        return True
    target = context.destination.target
    if kept_trace(target).is_file() and _trusted(kept_trace(target)):
        return True
    from ..ingest.parse import parse_profiling
    from ..profiling.workload import trace_workload
    from ..replay.writeback import backfill

    backend = context.backend
    try:
        if not any(target.glob("*.csv")):
            # The device's copy first: a GEMM's row is found in the table of the kernel that
            # holds it (MatMulV3), which the parse can only see in an existing database.
            backfill(context.destination.source, target, [], native=False, lock=lock or True,
                     run_id=context.run_id, stamp=context.identity.stamp,
                     purpose=f"pytest run {context.run_id}: the device's database")
        with tempfile.TemporaryDirectory(prefix="npuperf_demo_") as scratch:
            trace = trace_workload(demo_step(backend.device), Path(scratch) / f"{NAME}.json",
                                   kind=backend.kind, warmup=1, steps=PROFILED_STEPS)
            summary = parse_profiling(trace, target, show_progress=False, lock=lock)
            write_text(kept_trace(target), trace.read_text(encoding="utf-8"),
                       purpose=f"pytest run {context.run_id}: the demo model's trace")
    except NpuperfError as exc:
        context.notes.append(f"the demo model was not profiled here: {exc}; the gap report has "
                             f"no in-model times to compare with")
        return True
    except KeyboardInterrupt:
        context.notes.append("interrupted while profiling the demo model: the database was "
                             "left as it was")
        return False
    traced = summary.traces[0] if summary.traces else None
    share = (f"; {traced.mapped_us / traced.total_us:.1%} of its time maps to kernel tables"
             if traced is not None and traced.total_us else "")
    if traced is not None and not trusted_profile(traced.trust):
        share += (f"; its in-model times are {traced.trust}: kept out of the gap, profiled "
                  f"again on the next run")
    context.notes.append(f"model profile: the demo model ({DESCRIPTION}) profiled on this "
                         f"device, {PROFILED_STEPS} steps after a warm-up, {summary.rows_updated} "
                         f"row(s) of {target} updated, {summary.rows_added} added{share}; "
                         f"trace kept in {kept_trace(target)}")
    return True
