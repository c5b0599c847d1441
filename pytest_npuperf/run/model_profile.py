"""The other half of the gap report on a CPU or a GPU: the demo model (profiling/demo_model.py)
profiled on this device and parsed into this device's copy of the embedded database, once per
device, so that every replay of that database's GEMMs is compared with the same GEMM inside a
model, profiled the same way (`npuperf profile` -> `npuperf parse`).

A step of the run's end (run/finish.py), before the results are written: the run's target
carries a `DemoProfile` when its run asks for one (the pytest run of the embedded default
database on a CPU or a GPU, writing its own copy of it, not a dry run: the destination
decides, harness/destination.py). The trace is kept in `<database>/profiles/demo_model.json`;
while it is there, and its in-model times were taken on a quiet host, the device is not
profiled again (delete it to profile anew). A profile taken on an oversubscribed or
preempting host is marked untrusted (its rows too: the gap leaves them out) and profiled again
on the next run, until a quiet one replaces it. It is written after the parse, so an
interrupted run profiles again next time rather than never.

A trusted trace is also kept per device (database device name and software stack, CPU
threads included: they decide the in-model times) outside any output directory, in the
user's cache (`$NPUPERF_CACHE_DIR`, else `$XDG_CACHE_HOME/pytest_npuperf`, else
`~/.cache/pytest_npuperf`): a new output directory parses that trace (a fraction of a second)
instead of profiling the model again (seconds).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..db.columns import trusted_profile
from ..db.errors import NpuperfError
from ..db.layout import PROFILES_DIR
from ..db.table import write_text
from ..profiling.demo_model import DESCRIPTION, NAME, demo_step

if TYPE_CHECKING:
    from ..db.lock import DatabaseLock

PROFILED_STEPS = 3


@dataclass(frozen=True)
class DemoProfile:
    """What the demo model's profile needs, as plain values: where it runs and which database
    it goes into."""

    kind: str  # the backend: cpu or cuda
    device: object  # the torch device the model runs on
    database_device: str  # the device's name in the database: the cache's key, with `stack`
    stack: dict[str, str]
    source: Path  # the database replayed (the embedded one)
    target: Path  # this device's copy of it, written
    lock: DatabaseLock | None = None  # the lock the run holds (None: each write takes it)


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


CACHE_ENV = "NPUPERF_CACHE_DIR"


def device_trace(device: str, stack: dict[str, str]) -> Path:
    """Where the demo's trace on this device and stack is kept for every output directory."""
    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME")
                                             or Path.home() / ".cache") / "pytest_npuperf"
    key = "_".join(f"{name}{value}" for name, value in sorted(stack.items()))
    return Path(root) / PROFILES_DIR / _safe(device) / _safe(key) / f"{NAME}.json"


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "_"


def profile_demo(demo: DemoProfile, *, run_id: str, stamp: str, notes: list[str]) -> bool:
    """Profile the demo model here and parse it into this device's database, unless done;
    what happened goes into `notes`. False when Ctrl-C stopped it (what was committed before
    stays: each write is whole)."""
    target = demo.target
    if kept_trace(target).is_file() and _trusted(kept_trace(target)):
        return True
    from ..ingest.parse import parse_profiling
    from ..profiling.workload import trace_workload
    from ..replay.write import write_results

    purpose = f"pytest run {run_id}: the demo model's trace"
    cached = device_trace(demo.database_device, demo.stack)
    try:
        if not any(target.glob("*.csv")):
            # The device's copy first: a GEMM's row is found in the table of the kernel that
            # holds it (MatMulV3), which the parse can only see in an existing database.
            write_results(demo.source, target, [], native=False, lock=demo.lock or True,
                          run_id=run_id,
                          stamp=stamp, purpose=f"pytest run {run_id}: the device's database")
        with tempfile.TemporaryDirectory(prefix="npuperf_demo_") as scratch:
            trace, where = cached, f"kept for this device in {cached}"
            if not (cached.is_file() and _trusted(cached)):
                trace = trace_workload(demo_step(demo.device), Path(scratch) / f"{NAME}.json",
                                       kind=demo.kind, warmup=1, steps=PROFILED_STEPS)
                where = "profiled on this device"
            summary = parse_profiling(trace, target, show_progress=False, lock=demo.lock)
            text = trace.read_text(encoding="utf-8")
            write_text(kept_trace(target), text, purpose=purpose)
            if trace != cached and all(trusted_profile(t.trust) for t in summary.traces[:1]):
                _keep(cached, text, purpose, notes)  # only a quiet host's profile stands for it
    except NpuperfError as exc:
        notes.append(f"the demo model was not profiled here: {exc}; the gap report has "
                     f"no in-model times to compare with")
        return True
    except KeyboardInterrupt:
        notes.append("interrupted while profiling the demo model: the database was left as it "
                     "was")
        return False
    traced = summary.traces[0] if summary.traces else None
    share = (f"; {traced.mapped_us / traced.total_us:.1%} of its time maps to kernel tables"
             if traced is not None and traced.total_us else "")
    if traced is not None and not trusted_profile(traced.trust):
        share += (f"; its in-model times are {traced.trust}: kept out of the gap, profiled "
                  f"again on the next run")
    notes.append(f"model profile: the demo model ({DESCRIPTION}) {where}, {PROFILED_STEPS} "
                 f"steps after a warm-up, {summary.rows_updated} row(s) of {target} updated, "
                 f"{summary.rows_added} added{share}; trace kept in {kept_trace(target)}")
    return True


def _keep(path: Path, text: str, purpose: str, notes: list[str]) -> None:
    """The trace for the next output directory on this device; a cache that cannot be
    written costs the next one a profile, not this run."""
    try:
        write_text(path, text, purpose=purpose)
    except (OSError, NpuperfError) as exc:
        notes.append(f"the demo model's trace was not kept in {path.parent}: {exc}")
