"""All-or-nothing writes across files, recovery after a kill, and a lock that cannot be
turned against the database (issue 8, items 1-2 and 4)."""

from __future__ import annotations

import os
import socket

import pytest

from pytest_npuperf.db.database import Database
from pytest_npuperf.db.errors import NpuperfError
from pytest_npuperf.db.lock import LOCK_NAME, DatabaseLock, DatabaseLockedError
from pytest_npuperf.db.transaction import (
    JOURNAL_PREFIX,
    FileStamp,
    Transaction,
    pending_journals,
    recover,
    recover_if_free,
)

from .conftest import kd_row, tree_digest, write_csv, write_kernel_details


@pytest.fixture
def files(tmp_path):
    db = tmp_path / "db"
    write_csv(db / "A.csv", ["OP State", "Input Shapes"], [["dynamic", "1,2"]])
    write_csv(db / "B.csv", ["OP State", "Input Shapes"], [["dynamic", "3,4"]])
    (db / "reports").mkdir()
    return db


def _stage_three(tx: Transaction, db) -> None:
    tx.stage_text(db / "A.csv", "OP State,Input Shapes\nnew,1\n")
    tx.stage_text(db / "B.csv", "OP State,Input Shapes\nnew,2\n")
    tx.stage_text(db / "reports" / "C.md", "new file\n")


def test_a_failed_rename_restores_every_replaced_file(files, monkeypatch):
    before = tree_digest(files)
    real = os.replace
    seen = []

    def failing_second(src, dst):
        if str(dst).endswith(".csv") or str(dst).endswith(".md"):
            seen.append(dst)
            if len(seen) == 2:  # as `chattr +i B.csv` would
                raise PermissionError(1, "Operation not permitted", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", failing_second)
    with (pytest.raises(NpuperfError, match="B.csv in place .*every file was left as it was"),
          Transaction(files, "test") as tx):
        _stage_three(tx, files)
    monkeypatch.undo()
    assert tree_digest(files) == before  # A.csv restored, C.md removed, no temp, no journal


def test_a_commit_interrupted_by_ctrl_c_is_undone_before_the_interrupt_goes_on(files,
                                                                                monkeypatch):
    before = tree_digest(files)
    real = os.replace
    calls = []

    def interrupt_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(os, "replace", interrupt_second)
    with pytest.raises(KeyboardInterrupt), Transaction(files, "test") as tx:
        _stage_three(tx, files)
    monkeypatch.undo()
    assert tree_digest(files) == before


def _killed_child(files, kill_at: int) -> None:
    """Fork a writer that dies (os._exit, no cleanup) at the `kill_at`-th rename."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            real = os.replace
            count = [0]

            def dying(src, dst):
                if not str(dst).endswith(".tmp") and JOURNAL_PREFIX not in str(dst):
                    count[0] += 1
                    if count[0] == kill_at:
                        os._exit(9)
                return real(src, dst)

            os.replace = dying
            with Transaction(files, "killed writer") as tx:
                _stage_three(tx, files)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 9


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("kill_at", [1, 2, 3])
def test_a_writer_killed_between_renames_is_rolled_back_by_the_next_one(files, kill_at):
    before = tree_digest(files)
    _killed_child(files, kill_at)
    assert pending_journals(files)  # the journal says a commit was under way
    assert (files / LOCK_NAME).exists()  # and the dead writer's lock record stayed
    if kill_at > 1:
        assert tree_digest(files) != before  # half new, half old
    db = Database(files)
    with db.transaction("next writer") as tx:
        notes = tx.notes
    assert tree_digest(files) == before  # rolled back; temp files, journal and lock gone
    assert any("took over the lock" in n and "killed writer" in n for n in notes), notes
    assert any("rolled back an interrupted write of 3 file(s)" in n for n in notes), notes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_validate_rolls_back_a_dead_writers_cut_write_and_says_so(files, npuperf):
    """Issue 29: a simulator checking the database first (validate --consumer) reads one
    consistent set afterwards, not half new, half old files."""
    before = tree_digest(files)
    _killed_child(files, 2)
    _, out, _ = npuperf("validate", files)
    assert "rolled back an interrupted write of 3 file(s)" in out, out
    assert tree_digest(files) == before and not pending_journals(files)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_validate_says_a_write_is_being_committed_while_its_writer_lives(files, npuperf,
                                                                        monkeypatch):
    import pytest_npuperf.db.transaction as transaction

    _killed_child(files, 2)
    monkeypatch.setattr(transaction, "writer_alive", lambda *args: True)
    code, out, _ = npuperf("validate", files)
    assert code == 1 and "a write is being committed here" in out, out


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_reader_rolls_back_a_dead_writers_commit_before_it_reads(files):
    before = tree_digest(files)
    _killed_child(files, 2)
    db = Database(files).read()
    assert db.tables["A.csv"].frame["OP State"].tolist() == ["dynamic"]
    assert any("rolled back" in n for n in db.notes)
    assert tree_digest(files) == before


def test_stale_temporary_files_of_dead_writers_are_removed(files):
    dead = 2 ** 22 + 12345  # above pid_max on this machine: no such process
    stale = [files / f".A.csv.npuperf-{dead}-abcd1234.new",
             files / "reports" / f".C.md.npuperf-{dead}-abcd1234.old",
             files / f".npuperf-journal.{dead}-abcd1234.tmp"]
    mine = files / f".B.csv.npuperf-{os.getpid()}-abcd1234.new"  # a live writer's
    for path in (*stale, mine):
        path.write_text("partial")
    legacy = files / ".A.csv.k3j4h5g6.tmp"
    legacy.write_text("partial")
    os.utime(legacy, (1, 1))  # an old release's temp file, long stale
    with Transaction(files, "test") as tx:
        pass
    assert not any(p.exists() for p in (*stale, legacy))
    assert mine.exists()
    assert any("removed 4 temporary file(s)" in n for n in tx.notes), tx.notes


def test_a_journal_of_another_live_writer_is_left_alone(files):
    journal = files / f"{JOURNAL_PREFIX}{os.getppid()}-abcd1234"
    journal.write_text(f'{{"txid": "{os.getppid()}-abcd1234", "pid": {os.getppid()}, '
                       f'"host": "{socket.gethostname()}", "entries": []}}')
    assert recover(files) == []
    assert journal.exists()


def test_a_journal_naming_files_outside_its_directory_is_not_acted_on(files, tmp_path):
    victim = tmp_path / "victim.csv"
    victim.write_text("precious\n")
    journal = files / f"{JOURNAL_PREFIX}99999999-abcd1234"
    journal.write_text('{"txid": "99999999-abcd1234", "pid": 99999999, "host": "x", '
                       '"entries": [{"target": "victim.csv", "dir": "..", "existed": false, '
                       f'"staged_id": [{victim.stat().st_dev}, {victim.stat().st_ino}]}}]}}')
    notes = recover(files)
    assert victim.read_text() == "precious\n"
    assert any("could not roll back" in n for n in notes)


def test_a_file_changed_since_it_was_read_is_never_overwritten(files):
    db = Database(files)
    with (pytest.raises(NpuperfError, match="A.csv changed since it was read"),
          db.transaction("test") as tx):
        table = db.table("A.csv")
        (files / "A.csv").write_text("OP State,Input Shapes\nsomeone else,9\n")
        db.stage(tx, table)
    assert (files / "A.csv").read_text() == "OP State,Input Shapes\nsomeone else,9\n"
    assert FileStamp.of(files / "A.csv") is not None


def test_writes_never_go_through_a_symlink_out_of_the_database(files, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (files / "reports").rmdir()
    (files / "reports").symlink_to(outside)
    with (pytest.raises(NpuperfError, match="reports is a symbolic link"),
          Transaction(files, "test") as tx):
        tx.stage_text(files / "reports" / "r.md", "x")
    with pytest.raises(NpuperfError, match="outside the database"), Transaction(files) as tx:
        tx.stage_text(files / ".." / "escape.csv", "x")
    assert list(outside.iterdir()) == []
    assert not (files.parent / "escape.csv").exists()


# -- the lock ------------------------------------------------------------------------------------

def test_a_symlinked_lock_file_is_refused_and_its_target_untouched(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("do not truncate me\n")
    (db / LOCK_NAME).symlink_to(precious)
    with pytest.raises(NpuperfError, match="symbolic link"), DatabaseLock(db, "test"):
        pass
    assert precious.read_text() == "do not truncate me\n"
    (db / LOCK_NAME).unlink()
    (db / LOCK_NAME).symlink_to(tmp_path / "dangling")  # would create an empty file there
    with pytest.raises(NpuperfError, match="symbolic link"), DatabaseLock(db, "test"):
        pass
    assert not (tmp_path / "dangling").exists()


def test_a_fifo_as_lock_file_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / LOCK_NAME)
    with pytest.raises(NpuperfError, match="not a regular file"), DatabaseLock(tmp_path):
        pass


def test_the_lock_records_its_owner_and_a_live_one_refuses(tmp_path):
    with DatabaseLock(tmp_path, "npuperf parse"):
        record = (tmp_path / LOCK_NAME).read_text()
        assert f"pid {os.getpid()}" in record and f"host {socket.gethostname()}" in record
        assert "purpose npuperf parse" in record and "command " in record
        with pytest.raises(DatabaseLockedError, match=f"pid {os.getpid()} on "
                                                      f"{socket.gethostname()} .npuperf parse"):
            DatabaseLock(tmp_path, "second").acquire()
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_stale_lock_of_a_dead_process_is_taken_over_and_said(tmp_path):
    (tmp_path / LOCK_NAME).write_text(f"pid {2 ** 22 + 7}\nhost {socket.gethostname()}\n"
                                      f"purpose pytest run\ncommand pytest bench\nsince then\n")
    lock = DatabaseLock(tmp_path, "npuperf grid")
    notes = lock.acquire()
    lock.release()
    assert notes and "took over the lock" in notes[0] and "no longer running" in notes[0]
    assert not (tmp_path / LOCK_NAME).exists()  # the stale record does not outlive us


def test_parse_with_a_rename_failing_midway_changes_no_file(tmp_path, npuperf, monkeypatch):
    db = tmp_path / "db"
    rows = [kd_row("MatMulV2", 4.0), kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16")]
    assert npuperf("parse", "--quiet", "--profile",
                   write_kernel_details(tmp_path / "a" / "kernel_details.csv", rows),
                   "--db", db)[0] == 0
    before = tree_digest(db)
    real = os.replace

    def immutable_matmul(src, dst):
        if str(dst).endswith("MatMulV2.csv"):  # Add.csv goes first, then this one fails
            raise PermissionError(1, "Operation not permitted", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", immutable_matmul)
    rows = [kd_row("MatMulV2", 8.0), kd_row("Add", 3.0, in_shapes="8,16;8,16", out_shapes="8,16")]
    code, _, err = npuperf("parse", "--quiet", "--profile",
                           write_kernel_details(tmp_path / "b" / "kernel_details.csv", rows),
                           "--db", db)
    assert code == 2 and "every file was left as it was" in err and err.count("\n") == 1
    assert tree_digest(db) == before


def test_recover_if_free_is_cheap_and_silent_without_a_journal(files):
    assert recover_if_free(files) == []
    assert recover_if_free(files / "missing") == []
