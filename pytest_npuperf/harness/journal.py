"""The run journal: every finished case's result, appended as it arrives, so that a run killed
outright (`kill -9`, a lost host) loses at most the case in flight.

`<out>/runs/<run id>.jsonl`: a header line (the run, its database, the cases selected), then
one line per result (`CaseResult.to_dict()`), then an end line when the run ended. A run that
measured every case it selected and wrote them removes its journal; the journal of a run
stopped early (or not written) stays, and `--npuperf-resume RUN|last` reads its results
(`last`: the newest journal of this output directory that did not end written) and the
session measures only the cases it does not hold; the finish writes both.

Each line is flushed as it is written (the operating system has it even if the process dies);
a last line cut short by a kill is ignored.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..db.errors import NpuperfError, clip

if TYPE_CHECKING:
    from ..measure.result import CaseResult

RUNS_DIR = "runs"
LAST = "last"
_HEADER, _RESULT, _END = "run", "result", "end"
_RUN_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.-]{0,99}")


_ENCODE = json.JSONEncoder(default=str).encode  # json.dumps(..., default=str), made once


def journal_path(out: Path, run_id: str) -> Path:
    return Path(out) / RUNS_DIR / f"{run_id}.jsonl"


class Journal:
    """The journal a run appends to."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        self.failure = ""  # why the journal could not be written (it stops there)
        self._handle: TextIO | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            self.failure = f"{path}: {exc.strerror or exc}"
        self._write({"kind": _HEADER, **header})

    def _write(self, record: dict) -> None:
        if self._handle is None:
            return
        try:
            self._handle.write(_ENCODE(record) + "\n")
            self._handle.flush()
        except OSError as exc:  # a full disk: the run goes on, without its journal
            self.failure = f"{self.path}: {exc.strerror or exc}"
            with contextlib.suppress(OSError):
                self._handle.close()
            self._handle = None

    def append(self, result: CaseResult) -> None:
        self._write({"kind": _RESULT, "result": result.to_dict()})

    def end(self, written: bool, why: str = "") -> None:
        """The run ended: its results are in the database (`written`: the journal goes), or
        not (why: it stays, for --npuperf-resume)."""
        if written:
            self.close()
            forget(self.path)
            return
        self._write({"kind": _END, "written": written, "why": why})

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def supersede(path: Path, by: str) -> None:
    """`path`'s results are all in run `by`'s journal now: `last` no longer offers it (resumed
    later, it would put older values over what `by` wrote)."""
    with contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"kind": _END, "written": False, "superseded_by": by}) + "\n")


def check_journal_dir(out: Path) -> None:
    """Before the first case: the journal's directory can be made (a file named `runs` would
    end the session at its first result)."""
    directory = Path(out) / RUNS_DIR
    if os.path.lexists(directory) and not directory.is_dir():
        raise NpuperfError(f"{directory}: not a directory: the run journal is kept there "
                           f"(--npuperf-resume); move this file away")


def forget(path: Path) -> None:
    """Remove a journal whose run is written (and the directory, when it was the last)."""
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def _records(path: Path) -> list[dict]:
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise NpuperfError(f"{path}: cannot read this run journal: {exc.strerror or exc}") from None
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # the line a kill cut short
            raise NpuperfError(f"{path}: line {number} is not a journal record") from None
        if isinstance(record, dict):
            records.append(record)
    return records


def _check_ref(ref: str) -> None:
    """A run id names a journal of this output directory, nothing else: a path (`../x`) would
    read, and after the run delete, a file outside it."""
    if ref != LAST and not _RUN_ID.fullmatch(ref):
        raise NpuperfError(f"--npuperf-resume {clip(ref)}: not a run id (a run id is a journal "
                           f"name in <out>/{RUNS_DIR}/, like 20260101_000000-1a2b3c4d; npuperf "
                           f"runs lists recorded ones) and not {LAST}")


def _same_place(a: object, b: object) -> bool:
    return os.path.realpath(str(a)) == os.path.realpath(str(b))


def resumable(out: Path, ref: str, source: str | None = None) -> Path:
    """The journal `--npuperf-resume` names: a run id, or `last` (the newest one of the
    database `source` that did not end writing its results)."""
    _check_ref(ref)
    directory = Path(out) / RUNS_DIR
    if ref != LAST:
        path = journal_path(out, ref)
        if not path.is_file():
            known = sorted(p.stem for p in directory.glob("*.jsonl")) if directory.is_dir() else []
            raise NpuperfError(f"--npuperf-resume {ref}: no journal {path}"
                               + (f" (journals: {', '.join(known[-5:])})" if known else ""))
        return path
    candidates = sorted(directory.glob("*.jsonl"), key=os.path.getmtime) \
        if directory.is_dir() else []
    others = []
    for path in reversed(candidates):
        records = _records(path)
        ends = [r for r in records if r.get("kind") == _END]
        if ends and (ends[-1].get("written") or ends[-1].get("superseded_by")):
            continue
        header = next((r for r in records if r.get("kind") == _HEADER), {})
        if source is None or _same_place(header.get("source", source), source):
            return path
        others.append(f"{path.stem} of {header.get('source')}")
    raise NpuperfError(f"--npuperf-resume last: no unfinished run journal of "
                       f"{source or 'this database'} in {directory}"
                       + (f" (of other databases: {', '.join(others[:3])}; resume them with "
                          f"their --npuperf-db)" if others else ""))


def journaled_results(path: Path) -> tuple[dict, list[CaseResult], list[str]]:
    """The journal's header, its results (the last result of a case wins) and what was left
    out: a result that cannot be read, or whose values are no measurement (a damaged or
    edited journal), is measured again rather than written."""
    from ..measure.result import CaseResult

    header: dict = {}
    results: dict[str, CaseResult] = {}
    bad: dict[str, str] = {}  # case (or line) -> why its result was left out
    for number, record in enumerate(_records(path), start=1):
        if record.get("kind") == _HEADER and not header:
            header = record
        elif record.get("kind") == _RESULT:
            try:
                result = CaseResult.from_dict(record["result"])
                problem = result_problem(result)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                bad[f"line {number}"] = f"unreadable ({clip(str(exc), 60)})"
                continue
            if problem:
                bad[result.case_id] = problem
                results.pop(result.case_id, None)
            else:
                bad.pop(result.case_id, None)
                results[result.case_id] = result
    notes = []
    if bad:
        shown = "; ".join(f"{clip(case, 60)}: {why}" for case, why in list(bad.items())[:3])
        notes.append(f"{path}: {len(bad)} journaled result(s) left out and measured again, "
                     f"their values being no measurement ({shown}"
                     f"{'; ...' if len(bad) > 3 else ''})")
    return header, list(results.values()), notes


MAX_DURATION_US = 86400e6
"""A day: no replayed call takes longer; a journaled duration beyond it (1e308) was edited."""


def _duration_problem(value: object) -> bool:
    return (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 < value <= MAX_DURATION_US)


def result_problem(result: CaseResult) -> str:
    """Why a journaled result is no measurement this run can write ("" when it is one)."""
    from ..measure.result import STATUSES

    texts = (result.case_id, result.nodeid, result.kernel_type, result.file, result.signature,
             result.status, result.device, result.timestamp)
    if not all(isinstance(t, str) for t in texts) or not result.case_id:
        return "fields of the wrong type"
    if result.status not in STATUSES:
        return f"status {clip(result.status, 30)}"
    stats = result.stats
    if stats is not None:
        durations = (stats.mean, stats.median, stats.min, stats.max, stats.p90)
        if any(map(_duration_problem, durations)):
            return f"a duration of {clip(next(filter(_duration_problem, durations)), 30)} us"
        if not stats.min <= min(stats.mean, stats.median) <= max(stats.mean, stats.median) \
                <= stats.max or isinstance(stats.samples, bool) \
                or not isinstance(stats.samples, int) or stats.samples < 1:
            return "statistics that contradict each other"
    if not isinstance(result.samples, list) or any(map(_duration_problem, result.samples)):
        return "samples that are no durations"
    return ""


def check_journal(path: Path, header: dict, *, source: str, device: str) -> None:
    """The journal is this run's to continue: the same database, the same device. Otherwise
    its results would go where they were not measured (and the journal be deleted)."""
    theirs = header.get("source")
    if theirs and not _same_place(theirs, source):
        raise NpuperfError(f"{path}: run {header.get('run_id') or path.stem} measured database "
                           f"{clip(theirs, 200)}, not {source}: resume it with its own "
                           f"--npuperf-db")
    measured_on = header.get("device")
    if measured_on and device and measured_on != device:
        raise NpuperfError(f"{path}: run {header.get('run_id') or path.stem} measured on "
                           f"{clip(measured_on, 60)}, this run measures on {device}: resume it "
                           f"on its own device")


def other_device(results: list[CaseResult], device: str) -> list[CaseResult]:
    """The results measured on another device than `device` (a journal of an older release
    names no device in its header)."""
    return [r for r in results if device and r.device and r.device != device]


def lineage(header: dict) -> list[str]:
    """The runs whose results a journal holds: its own, and those it resumed (ids only: a
    journal's header names files this run may delete)."""
    ids = header.get("lineage") or [header.get("run_id")]
    return [i for i in ids if isinstance(i, str) and _RUN_ID.fullmatch(i)] \
        if isinstance(ids, list) else []


def newer_run(history: Path | None, header: dict, *, source: str, device: str) -> str:
    """A run recorded in `history` that started after the oldest result of the journal was
    measured and wrote the same database on the same device ("" when none, or no history):
    the journal's results are older than what that run wrote."""
    since = header.get("measured_since")
    if history is None or not isinstance(since, int | float) or not Path(history).is_file():
        return ""
    from ..history.store import HistoryStore

    try:
        with HistoryStore(history, readonly=True) as store:
            found = store.find_runs(device=device or None, since=float(since))
    except NpuperfError:
        return ""  # the session's own checks say what is wrong with the history
    ours = set(lineage(header))
    later = [run for run, _ in found if run.run_id not in ours and run.cases
             and _same_place(run.source or source, source)]
    return later[-1].run_id if later else ""


def load_resume(out: Path, ref: str, *, source: str, device: str, history: Path | None
                ) -> tuple[Path, dict, list[CaseResult], list[str]]:
    """What --npuperf-resume continues: the journal, its header, the results this run takes
    as measured, and notes. An error when the journal is not this run's to continue (another
    database or device), or when a run recorded since wrote the database over its results."""
    path = resumable(out, ref, source)
    header, results, notes = journaled_results(path)
    check_journal(path, header, source=source, device=device)
    foreign = other_device(results, device)
    if foreign and not header.get("device"):
        check_journal(path, {**header, "device": foreign[0].device}, source=source,
                      device=device)
    if foreign:
        results = [r for r in results if r not in foreign]
        notes.append(f"{path}: {len(foreign)} journaled result(s) of another device "
                     f"({clip(foreign[0].device, 60)}) left out and measured again")
    newer = newer_run(history, header, source=source, device=device)
    if newer:
        raise NpuperfError(f"{path}: run {newer}, recorded since, wrote {source} after these "
                           f"results were measured: resuming would put older values over its "
                           f"newer ones; start a new run (and remove this journal)")
    return path, header, results, notes


def successor_header(header: dict, *, run_id: str, started: float) -> dict:
    """What a run that resumes `header`'s journal records in its own: every run whose results
    it holds, and when the oldest of them was measured."""
    since = header.get("measured_since")
    if not isinstance(since, int | float):
        since = _epoch(header.get("started"))
    return {"lineage": [run_id, *lineage(header)],
            "measured_since": min(started, since) if since is not None else started}


def _epoch(iso: object) -> float | None:
    import datetime as _dt

    try:
        return _dt.datetime.fromisoformat(str(iso)).timestamp()
    except ValueError:
        return None
