"""A large run recorded in the history by a child process (history/recorder.py): the same rows
as recording in-process, whole or not at all, and every way it can fail said as the
in-process recording says it."""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from pytest_npuperf.history import recorder as recorder_module
from pytest_npuperf.history import store as store_module
from pytest_npuperf.history.recorder import record_run
from pytest_npuperf.history.store import HistoryError, HistoryStore
from tests.test_history import kernel, run

KEYS = [f"MatMulV2-{i}x64x32-FLOAT-{i:08x}" for i in range(9)]


def cases(median: float = 10.0) -> list:
    made = [kernel(k, median + i, seed=i) for i, k in enumerate(KEYS)]
    made[4].samples = []  # a case without samples
    made.append(kernel(KEYS[0], 99.0, seed=9))  # listed twice: the later one is kept
    return made


def contents(path: Path) -> dict[str, list]:
    """Every table's rows, the row ids replaced by what they stand for."""
    with sqlite3.connect(path) as db:
        runs = db.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
        names = [d[0] for d in db.execute("SELECT * FROM cases").description]
        rows = db.execute("SELECT r.run_id, c.* FROM cases c JOIN runs r ON r.id = c.run "
                          "ORDER BY r.run_id, c.kind, c.key").fetchall()
        samples = db.execute("SELECT r.run_id, c.kind, c.key, s.encoding, s.count, s.data "
                             "FROM samples s JOIN cases c ON c.id = s.case_row JOIN runs r "
                             "ON r.id = c.run ORDER BY 1, 2, 3").fetchall()
    skip = {names.index("id") + 1, names.index("run") + 1}
    return {"runs": [row[1:] for row in runs],
            "cases": [tuple(v for i, v in enumerate(row) if i not in skip) for row in rows],
            "samples": samples}


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(store_module, "RECORD_BATCH", 3)


@pytest.fixture
def children(monkeypatch) -> list:
    """Every child `record_run` starts, as it starts them."""
    started = []
    real_start = recorder_module._Child.start

    def start(*args):
        started.append(real_start(*args))
        return started[-1]

    monkeypatch.setattr(recorder_module._Child, "start", staticmethod(start))
    return started


@pytest.fixture
def empty_history(tmp_path) -> Path:
    path = tmp_path / "history.sqlite"
    with HistoryStore(path):
        pass
    return path


def test_a_run_recorded_by_the_child_is_the_run_recorded_here(tmp_path, small_batches):
    """In batches smaller than the run, a case listed twice, one without samples, the run
    recorded again over itself: the same tables as in-process, byte for byte."""
    here, there = tmp_path / "here.sqlite", tmp_path / "child.sqlite"
    for path, min_cases in ((here, 10**9), (there, 1)):
        with HistoryStore(path) as store:
            store.record(run("r0", 1), [kernel(KEYS[1], 5.0, seed=7)])
        first = record_run(path, run("r1", 2), iter(cases()), 10, min_cases=min_cases)
        assert first.pending == (path == there)
        assert first.result() == 10
        again = cases(20.0)
        again[1].samples = []  # its samples recorded the first time go
        assert record_run(path, run("r1", 2), (c for c in again), 10,
                          min_cases=min_cases).result() == 10
    assert contents(there) == contents(here)
    assert len(contents(there)["samples"]) == 1 + 7  # r0's one, r1's less the two without
    recording = record_run(there, run("r2", 3), iter(cases()), 10, min_cases=1)
    recording.result()
    assert 0 < recording.child_peak_mib < 1024


def test_an_sql_error_in_the_child_is_the_history_error_and_nothing_is_recorded(tmp_path):
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as store:
        store.record(run("r0", 1), [kernel(KEYS[0], 5.0)])
    with sqlite3.connect(path) as db:
        db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON cases WHEN NEW.key = '{KEYS[5]}' "
                   f"BEGIN SELECT RAISE(ABORT, 'refused by the test'); END")
    before = contents(path)
    recording = record_run(path, run("r1", 2), iter(cases()), 10, min_cases=1)
    with pytest.raises(HistoryError, match="refused by the test") as error:
        recording.result()
    assert str(error.value).startswith(f"{path}: history database error")
    assert contents(path) == before


def test_an_error_while_the_cases_are_made_records_nothing(empty_history, small_batches,
                                                           children):
    def failing():
        yield from cases()[:7]  # two batches sent
        raise RuntimeError("a bug while making the records")

    with pytest.raises(RuntimeError, match="a bug"):
        record_run(empty_history, run("r1", 2), failing(), 10, min_cases=1)
    assert children[0].proc.returncode == 1  # it ended, its input closed before the commit
    assert contents(empty_history) == {"runs": [], "cases": [], "samples": []}


@pytest.mark.parametrize("after_s", [0.0, 0.01, 0.03, 0.5])
def test_a_child_interrupted_before_its_commit_records_nothing_and_says_so(empty_history,
                                                                         small_batches,
                                                                         children, after_s):
    """Ctrl-C at a terminal reaches the child too: once it has it, the run is not recorded,
    whatever this process sends after. At any moment of the child's life: before Python set
    its handler (it dies of the signal), while it imports its modules (a traceback), while it
    reads its input (its own exit status)."""
    def interrupted():
        made = cases()
        yield from made[:3]
        child = children[0].proc
        time.sleep(after_s)
        child.send_signal(signal.SIGINT)
        child.wait(timeout=60)
        yield from made[3:]

    recording = record_run(empty_history, run("r1", 2), interrupted(), 10, min_cases=1)
    with pytest.raises(HistoryError, match="interrupted .Ctrl-C. before the commit"):
        recording.result()
    assert contents(empty_history)["runs"] == []


@pytest.mark.skipif(os.name != "posix", reason="a stand-in interpreter written as a sh script")
def test_a_child_that_crashes_says_how_it_ended(tmp_path):
    path = tmp_path / "history.sqlite"
    crashing = tmp_path / "python"
    # 1 MB of output first: more than a pipe holds, so a parent that read the child's
    # outputs through pipes only after it ended would wait for it forever.
    crashing.write_text("#!/bin/sh\nhead -c 1000000 /dev/zero | tr '\\0' x >&2\necho >&2\n"
                        "echo 'MemoryError: the stand-in ran out' >&2\nexit 3\n")
    crashing.chmod(0o755)
    recording = record_run(path, run("r1", 2), iter(cases()), 10, min_cases=1,
                           python=str(crashing))
    with pytest.raises(HistoryError, match=r"run not recorded: its child process ended with "
                                           r"exit status 3 \(MemoryError: the stand-in ran out\)"):
        recording.result()
    assert contents(path)["runs"] == []


def test_a_child_that_cannot_start_leaves_the_run_to_this_process(tmp_path):
    path = tmp_path / "history.sqlite"
    recording = record_run(path, run("r1", 2), iter(cases()), 10, min_cases=1,
                           python=str(tmp_path / "no-such-python"))
    assert not recording.pending and recording.result() == 10
    assert len(contents(path)["cases"]) == 9


def test_the_child_is_started_as_this_package_finds_itself(tmp_path, monkeypatch):
    """`python -m pytest_npuperf.history.recorder` from a directory that is not the checkout,
    with no PYTHONPATH: the child finds this package all the same (db/child.py)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    recording = record_run(tmp_path / "h.sqlite", run("r1", 2), iter(cases()), 10, min_cases=1,
                           python=sys.executable)
    assert recording.pending and recording.result() == 10


def test_ctrl_c_while_waiting_for_a_child_that_had_committed_keeps_what_it_recorded(tmp_path):
    """This process interrupted while it waits: the child is waited for, its answer read
    (the run is recorded: `written` says so), then the interrupt goes on."""
    path = tmp_path / "history.sqlite"
    recording = record_run(path, run("r1", 2), iter(cases()), 10, min_cases=1)
    proc = recording.child.proc
    real_wait, calls = proc.wait, []

    def wait(*args, **kwargs):
        calls.append(real_wait(*args, **kwargs))
        if len(calls) == 1:
            raise KeyboardInterrupt
        return calls[-1]

    proc.wait = wait
    with pytest.raises(KeyboardInterrupt):
        recording.result()
    assert recording.written == 10 and not recording.pending
    assert len(contents(path)["cases"]) == 9
