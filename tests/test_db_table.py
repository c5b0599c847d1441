"""Reading and writing database CSVs (docs/format.md §1, §2; docs/development.md principle 1)."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from pytest_npuperf.db import table
from pytest_npuperf.db.errors import ContractError, LfsPointerError, NpuperfError
from pytest_npuperf.db.table import (
    check_writable_dir,
    directory_transaction,
    is_lfs_pointer,
    read_header,
    read_table,
    write_table,
    write_text,
    write_texts,
)

from .conftest import tree_digest, write_csv

LFS = ("version https://git-lfs.github.com/spec/v1\n"
       "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
       "size 12345\n")
HEADER = ["OP State", "Accelerator Core", "Input Shapes", "Input Data Types", "Input Formats",
          "Output Shapes", "Output Data Types", "Output Formats", "My Notes",
          "Average Duration(us)", "Profiling Average Duration(us)", "zz_unknown"]
ROWS = [
    ["dynamic", "AI_CORE", "136,7168;7168,3584", "DT_BF16;DT_BF16", "ND;ND", "136,3584",
     "DT_BF16", "ND", 'said "fast", twice', "0.10", "", "007"],
    ["", "", "1,512;1,512;512;", "FLOAT;FLOAT;INT64;", "ND;ND;ND;NULL", "N/A", "N/A", "N/A",
     "", "", "N/A", " spaced "],
]


def _no_temp_files(directory) -> bool:
    return not [p for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_cells_are_read_as_their_exact_text(tmp_path) -> None:
    path = write_csv(tmp_path / "MatMulV2.csv", HEADER, ROWS)
    frame = read_table(path)
    assert list(frame.columns) == HEADER
    assert frame.values.tolist() == ROWS


@pytest.mark.parametrize("crlf", [False, True])
def test_read_then_write_is_byte_identical(tmp_path, crlf: bool) -> None:
    path = write_csv(tmp_path / "MatMulV2.csv", HEADER, ROWS, crlf=crlf)
    before = path.read_bytes()
    write_table(read_table(path), path)
    assert path.read_bytes() == before
    assert _no_temp_files(tmp_path)


def test_bom_is_tolerated(tmp_path) -> None:
    path = write_csv(tmp_path / "Add.csv", HEADER, ROWS)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert read_header(path)[0] == "OP State"
    assert list(read_table(path).columns) == HEADER


@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"])
def test_lfs_pointer_is_reported_not_read(tmp_path, bom: bytes) -> None:
    path = tmp_path / "MatMulV2.csv"
    path.write_bytes(bom + LFS.encode())
    assert is_lfs_pointer(path)
    with pytest.raises(LfsPointerError) as info:
        read_table(path)
    message = str(info.value)
    assert "Git LFS pointer" in message and "git lfs pull" in message and str(path) in message


def test_a_csv_mentioning_lfs_later_is_not_a_pointer(tmp_path) -> None:
    path = write_csv(tmp_path / "x.csv", ["note"], [["version https://git-lfs.github.com/spec/v1"]])
    assert not is_lfs_pointer(path)


@pytest.mark.parametrize("content, match", [
    (b"", "empty file"),
    (b"\n\n", "empty file"),
    (b"a,b,a\n1,2,3\n", "duplicate column"),
    (b"a,b\n\xff\xfe,1\n", "not UTF-8"),
    (b"a,b,c\n1,2,3,\n4,5,6,\n", r"row 1 \(line 2\) has 4 fields but the header has 3 \(2 such"),
    (b"a,b,c\n1,2,3\n4,5,6,7\n", r"row 2 \(line 3\) has 4 fields"),
])
def test_unreadable_tables_are_one_line_errors(tmp_path, content: bytes, match: str) -> None:
    path = tmp_path / "Bad.csv"
    path.write_bytes(content)
    with pytest.raises(ContractError, match=match) as info:
        read_table(path)
    assert "\n" not in str(info.value)


def test_rows_longer_than_the_header_are_never_shifted_silently(tmp_path) -> None:
    # Every row ending with an extra delimiter used to make pandas read the first field as
    # an index, moving every value one column to the left; a rewrite then lost column one.
    path = tmp_path / "Add.csv"
    path.write_text("OP State,Input Shapes,Average Duration(us)\ndynamic,\"1,2\",5.0,\n")
    with pytest.raises(ContractError):
        read_table(path)


def test_short_rows_are_padded_with_empty_cells(tmp_path) -> None:
    path = tmp_path / "Add.csv"
    path.write_text("a,b,c\n1,2\n")
    assert read_table(path).values.tolist() == [["1", "2", ""]]


def test_missing_file(tmp_path) -> None:
    with pytest.raises(NpuperfError, match="no such file"):
        read_table(tmp_path / "nope.csv")


def test_write_keeps_permissions_and_line_ends(tmp_path) -> None:
    path = write_csv(tmp_path / "Add.csv", HEADER, ROWS, crlf=True)
    os.chmod(path, 0o640)
    frame = read_table(path)
    frame.loc[0, "My Notes"] = "changed"
    write_table(frame, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_bytes().count(b"\r\n") == 3
    assert read_table(path).loc[0, "My Notes"] == "changed"


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch) -> None:
    path = write_csv(tmp_path / "Add.csv", HEADER, ROWS)
    before = path.read_bytes()
    frame = read_table(path)

    def broken(frame: pd.DataFrame, handle) -> None:
        handle.write("OP State,half a fi")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(table, "_to_csv", broken)
    with pytest.raises(NpuperfError, match="No space left on device"):
        write_table(frame, path)
    assert path.read_bytes() == before
    assert _no_temp_files(tmp_path)


def test_an_interrupted_write_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    path = write_csv(tmp_path / "Add.csv", HEADER, ROWS)
    before = path.read_bytes()

    def interrupted(frame, handle) -> None:
        handle.write("partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(table, "_to_csv", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_table(read_table(path), path)
    assert path.read_bytes() == before
    assert _no_temp_files(tmp_path)


def test_a_transaction_replaces_nothing_when_one_file_fails(tmp_path, monkeypatch) -> None:
    first = write_csv(tmp_path / "A.csv", HEADER, ROWS)
    second = write_csv(tmp_path / "B.csv", HEADER, ROWS)
    before = (first.read_bytes(), second.read_bytes())
    good = read_table(first)
    good.loc[0, "My Notes"] = "new"
    real = table._to_csv
    calls = []

    def fail_second(frame, handle) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(5, "I/O error")
        real(frame, handle)

    monkeypatch.setattr(table, "_to_csv", fail_second)
    with pytest.raises(NpuperfError), directory_transaction(tmp_path, "test") as tx:
        tx.stage_with(first, lambda handle: table._to_csv(good, handle))
        tx.stage_with(second, lambda handle: table._to_csv(good, handle))
    assert (first.read_bytes(), second.read_bytes()) == before
    assert _no_temp_files(tmp_path)


def test_write_text_creates_parents(tmp_path) -> None:
    target = tmp_path / "a" / "b" / "c.yaml"
    write_text(target, "k: v\n")
    assert target.read_text() == "k: v\n"


def test_writable_dir_probe(tmp_path) -> None:
    check_writable_dir(tmp_path / "not" / "yet" / "there")       # creatable: fine
    assert not (tmp_path / "not").exists()                        # and nothing was created
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(NpuperfError, match="not a directory"):
        check_writable_dir(blocker / "db")
    with pytest.raises(NpuperfError, match="not a directory"):
        check_writable_dir(blocker)


def test_a_failed_rename_puts_back_what_was_already_replaced(tmp_path, monkeypatch):
    """Issue 8: a later rename that fails used to leave the earlier files replaced."""
    for name in ("a.csv", "b.csv"):
        (tmp_path / name).write_text(f"old {name}\n")
    before = tree_digest(tmp_path)
    real_replace = os.replace

    def flaky(src, dst):
        if str(dst).endswith("b.csv"):
            raise OSError(28, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", flaky)
    with pytest.raises(NpuperfError, match="every file was left as it was"):
        write_texts(tmp_path, {tmp_path / name: f"{name}\n" for name in ("a.csv", "b.csv", "c.csv")})
    assert tree_digest(tmp_path) == before  # a.csv is old again; no temp file, no journal
