"""A run recorded in the history: in this process, or, for a large run, by a child process
while this one goes on (the figures and the reports) on another core.

Recording 2 x 10^5 cases takes about 8 s, half of it SQLite binding and inserting the rows. On
a thread that half would overlap nothing: the sqlite3 module hands the interpreter back and
waits for it at every row. So a run of `CHILD_MIN_CASES` cases or more is recorded by a child
(`python -m pytest_npuperf.history.recorder HISTORY`, a fresh interpreter): this process makes
each batch's values (`store.case_batches`: the records are objects of this process) and pickles
them to the child's stdin (a thread writes them: the child may lag a batch or more); the child
records them as this process would (`HistoryStore.record_values`), in one transaction, and
answers one JSON line on its stdout. The caller learns what recording here would tell it: the
cases written, or the HistoryError (`Recording.result`).

Nothing is half recorded. The child commits only on the `commit` message, sent after the last
case: an error or Ctrl-C in this process while the cases are sent closes the child's input
before it, and the child rolls back; a process killed then leaves its input closed the same
way. Ctrl-C at the terminal reaches the child too: a child interrupted before its commit
records nothing, and says so. A child that cannot be started leaves the run to be recorded
here, as a small run is.
"""

from __future__ import annotations

import contextlib
import json
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ..db.child import child_env, peak_mib
from ..db.errors import NpuperfError
from .records import CaseRecord, RunRecord
from .store import HistoryError, HistoryStore, case_batches, run_values

# Runs with fewer cases are recorded in-process: a child costs ~0.1 s to start and a pickle of
# every row; 10^4 cases take about 0.4 s to record.
CHILD_MIN_CASES = 20_000
_PICKLE = pickle.HIGHEST_PROTOCOL
_INTERRUPTED = 130  # the child's exit status after Ctrl-C (the shell's 128 + SIGINT)


class Recording:
    """A run being recorded; `result()`: the cases written, or the HistoryError of a run not
    recorded. In-process, the result is known at once."""

    def __init__(self, path: Path, written: int = 0, child: _Child | None = None) -> None:
        self.path = path
        self.written = written
        self.child = child
        self.waited_s = 0.0  # how long `result` waited for the child
        self.child_peak_mib: float | None = None  # the child's peak memory, once it is done

    @property
    def pending(self) -> bool:
        return self.child is not None

    def result(self) -> int:
        child = self.child
        if child is None:
            return self.written
        started = time.perf_counter()
        interrupted = False
        try:
            child.writer.shutdown(wait=True)  # its input written and closed
            try:
                child.proc.wait()
            except KeyboardInterrupt:
                # Interrupted with it (one terminal): it is ending; how, is learnt first
                # (`written` says whether it had committed).
                interrupted = True
                child.proc.wait()
            answer, failure = _answer(child, self.path)
        finally:
            self.waited_s += time.perf_counter() - started
        self.child = None
        if failure is None:
            self.written = int(answer["written"])
            self.child_peak_mib = float(answer.get("peak_mib") or 0.0)
        if interrupted:
            raise KeyboardInterrupt
        if failure is not None:
            raise HistoryError(failure)
        return self.written


def record_run(path: Path, run: RunRecord, cases: Iterable[CaseRecord], count: int, *,
               min_cases: int | None = None, python: str = sys.executable) -> Recording:
    """Start recording `run` and its `count` `cases` (an iterable made as it is read) in the
    history at `path`; a run of `min_cases` (default CHILD_MIN_CASES) or more is recorded by
    a child process, which this returns before it has finished."""
    path = Path(path)
    min_cases = CHILD_MIN_CASES if min_cases is None else min_cases
    with HistoryStore(path) as store:  # checked (migrated if older) before any case is sent
        child = _Child.start(path, python) if count >= min_cases else None
        if child is None:
            return Recording(path, store.record(run, cases))
    try:
        if child.send(("run", run_values(run))):
            for batch in case_batches(cases):
                if not child.send(("cases", *batch)):
                    break  # the child ended: its answer says why
            else:
                child.send(("commit",))
        child.end_input()
    except BaseException:
        child.end_input(abandon=True)
        with contextlib.suppress(BaseException):
            child.proc.wait()  # nothing of it outlives the caller's error
            _answer(child, path)
        raise
    return Recording(path, child=child)


class _Child:
    """The child process, and the thread that writes to its input: a write waits for the
    child there, not here (the child may lag this process by a batch or more, which this
    process spends on its figures and reports meanwhile)."""

    def __init__(self, proc: subprocess.Popen, out: IO[bytes], err: IO[bytes]) -> None:
        self.proc, self.out, self.err = proc, out, err
        self.writer = ThreadPoolExecutor(1, thread_name_prefix="npuperf-history")

    @classmethod
    def start(cls, path: Path, python: str) -> _Child | None:
        # Its outputs go to files, not pipes: whatever it prints, it never waits for a
        # reader while this process waits for it to end. (Closed by `_answer`.)
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
        try:
            return cls(subprocess.Popen([python, "-m", __name__, str(path)],
                                        stdin=subprocess.PIPE, stdout=out, stderr=err,
                                        env=child_env()), out, err)
        except OSError:
            out.close()
            err.close()
            return None

    def send(self, message: tuple) -> bool:
        """False when the child has ended (it failed: its answer says why)."""
        if self.proc.poll() is not None:
            return False
        self.writer.submit(self._write, pickle.dumps(message, _PICKLE))
        return True

    def _write(self, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.proc.stdin.write(data)  # (failing: the child ended; its answer says why)

    def _close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()

    def end_input(self, *, abandon: bool = False) -> None:
        """The child's input closed after the writes sent so far; `abandon`: at once, the
        writes not begun dropped (before the `commit`: the child rolls back), waited for."""
        if abandon:
            self.writer.shutdown(wait=True, cancel_futures=True)
            self._close()
        else:
            self.writer.submit(self._close)
            self.writer.shutdown(wait=False)


def _answer(child: _Child, path: Path) -> tuple[dict, str | None]:
    """The answer of the child, which has ended, and why the run was not recorded (None: it
    was)."""
    texts = []
    for stream in (child.out, child.err):
        stream.seek(0)
        texts.append(stream.read().decode(errors="replace"))
        stream.close()
    out, err = texts
    status = child.proc.returncode
    try:
        answer = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    except ValueError:
        answer = {}
    if status == 0 and "written" in answer:
        return answer, None
    if "error" in answer:
        return answer, str(answer["error"])
    lines = err.strip().splitlines()
    # Interrupted in `_child`, before Python set its handler (the signal's own status), or
    # while its modules were imported (a traceback ending in the exception's name).
    if status in (_INTERRUPTED, -signal.SIGINT) or lines[-1:] == ["KeyboardInterrupt"]:
        why = "its child process was interrupted (Ctrl-C) before the commit"
    else:
        why = (f"its child process ended with exit status {status}"
               + (f" ({lines[-1]})" if lines else ""))
    return answer, f"{path}: run not recorded: {why}"


# -- the child -------------------------------------------------------------------------------
class _Incomplete(Exception):
    """The parent's messages ended before its `commit`."""


def _child(path: Path, source, reply) -> int:
    """Read the run and its batches from `source`, record them in one transaction, answer on
    `reply`; the exit status."""
    def batches() -> Iterator[tuple]:
        while True:
            try:
                message = pickle.load(source)
            except EOFError:
                raise _Incomplete from None
            if message[0] == "commit":
                return
            yield message[1:]

    try:
        kind, run = pickle.load(source)
        if kind != "run":
            raise _Incomplete
        with HistoryStore(path) as store:
            answer = {"written": store.record_values(run, batches()),
                      "peak_mib": peak_mib()}
    except (_Incomplete, EOFError):
        answer = {"error": f"{path}: run not recorded: this process ended before its last case "
                           f"was sent"}
    except NpuperfError as exc:
        answer = {"error": str(exc)}
    except KeyboardInterrupt:
        return _INTERRUPTED  # rolled back (store.py's transaction)
    reply.write(json.dumps(answer) + "\n")
    reply.flush()
    return 0 if "written" in answer else 1


if __name__ == "__main__":
    sys.exit(_child(Path(sys.argv[1]), sys.stdin.buffer, sys.stdout))
