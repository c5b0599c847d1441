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
import os
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..db.errors import NpuperfError

if TYPE_CHECKING:
    from ..measure.result import CaseResult

RUNS_DIR = "runs"
LAST = "last"
_HEADER, _RESULT, _END = "run", "result", "end"


_ENCODE = json.JSONEncoder(default=str).encode  # json.dumps(..., default=str), made once


def journal_path(out: Path, run_id: str) -> Path:
    return Path(out) / RUNS_DIR / f"{run_id}.jsonl"


class Journal:
    """The journal a run appends to."""

    def __init__(self, path: Path, header: dict) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._handle: TextIO | None = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self._write({"kind": _HEADER, **header})

    def _write(self, record: dict) -> None:
        if self._handle is None:
            return
        self._handle.write(_ENCODE(record) + "\n")
        self._handle.flush()

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


def resumable(out: Path, ref: str) -> Path:
    """The journal `--npuperf-resume` names: a run id, or `last` (the newest one that did not
    end writing its results)."""
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
    for path in reversed(candidates):
        ends = [r for r in _records(path) if r.get("kind") == _END]
        if not ends or not ends[-1].get("written"):
            return path
    raise NpuperfError(f"--npuperf-resume last: no unfinished run journal in {directory}")


def journaled_results(path: Path) -> tuple[dict, list[CaseResult]]:
    """The journal's header and results (the last result of a case wins)."""
    from ..measure.result import CaseResult

    header: dict = {}
    results: dict[str, CaseResult] = {}
    for record in _records(path):
        if record.get("kind") == _HEADER and not header:
            header = record
        elif record.get("kind") == _RESULT and isinstance(record.get("result"), dict):
            try:
                result = CaseResult.from_dict(record["result"])
            except (TypeError, ValueError, KeyError) as exc:
                raise NpuperfError(f"{path}: a result that cannot be read: {exc}") from None
            results[result.case_id] = result
    return header, list(results.values())
