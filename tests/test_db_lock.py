"""One writer per database directory, and no trace of the lock afterwards."""

from __future__ import annotations

import os

import pytest

from pytest_npuperf.db.lock import LOCK_NAME, DatabaseLockedError, _same_file, database_lock

from .conftest import kd_row, tree_digest, write_csv, write_kernel_details


def test_lock_leaves_the_directory_as_it_was(tmp_path) -> None:
    write_csv(tmp_path / "Add.csv", ["OP State"], [["dynamic"]])
    before = tree_digest(tmp_path)
    with database_lock(tmp_path, "test") as directory:
        assert directory == tmp_path
        assert "test" in (tmp_path / LOCK_NAME).read_text()
        assert f"pid {os.getpid()}" in (tmp_path / LOCK_NAME).read_text()
    assert tree_digest(tmp_path) == before


def test_a_lock_file_that_was_there_stays(tmp_path) -> None:
    (tmp_path / LOCK_NAME).write_text("")
    with database_lock(tmp_path):
        pass
    assert (tmp_path / LOCK_NAME).read_text() == ""


def test_a_second_writer_is_refused_and_told_who_writes(tmp_path) -> None:
    with (database_lock(tmp_path, "npuperf parse"), pytest.raises(DatabaseLockedError) as info,
          database_lock(tmp_path, "pytest run")):
        pass
    message = str(info.value)
    assert "npuperf parse" in message and f"pid {os.getpid()}" in message
    with database_lock(tmp_path, "after"):              # free again once released
        pass


def test_a_removed_lock_file_is_not_the_lock(tmp_path) -> None:
    path = tmp_path / LOCK_NAME
    with open(path, "a+") as handle:
        assert _same_file(path, handle.fileno())
        path.unlink()
        assert not _same_file(path, handle.fileno())
        path.write_text("")                             # a new file under the same name
        assert not _same_file(path, handle.fileno())


def test_a_failed_merge_in_a_hand_made_database_leaves_no_trace(tmp_path, npuperf) -> None:
    db = tmp_path / "db"
    write_csv(db / "Add.csv", ["OP State", "Input Shapes"], [["dynamic", "8,16"]])
    (db / "MatMulV2.csv").write_text("version https://git-lfs.github.com/spec/v1\n"
                                     "oid sha256:abcd\nsize 99\n")
    before = tree_digest(db)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row("MatMulV2", 4.0)])
    code, _, err = npuperf("parse", "--quiet", "--profile", kd, "--db", db)
    assert code == 1 and "Git LFS pointer" in err  # bad data: exit 1
    assert tree_digest(db) == before


def test_a_successful_parse_leaves_no_lock_file(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row("MatMulV2", 4.0)])
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "db").iterdir()) == [
        "MatMulV2.csv", "collection_meta.yaml", "op_mapping.yaml"]
