"""`npuperf parse` on the command line: options, summary and every bad input of issue 2.

Every bad input must give one clear line on stderr, a non-zero exit, and leave the database
exactly as it was (compared file by file, hidden files included).
"""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

from pytest_npuperf.db import layout

from .conftest import (
    FULL_HEADER,
    kd_row,
    kernel_details_text,
    read_rows,
    tree_digest,
    write_csv,
    write_kernel_details,
)

DEVICE = "ATLAS_800_A3_752T_128G_DIE"
VERSION_DIR = "vllm0.18.0_torch2.9.0_cann8.5"


def _good_rows():
    return [kd_row("MatMulV2", 40.0), kd_row("MatMulV2", 44.0),
            kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16")]


@pytest.fixture
def db(tmp_path, npuperf) -> Path:
    """A database made by a successful parse, plus a hand-written file and an unknown one."""
    database = tmp_path / "db"
    kd = write_kernel_details(tmp_path / "seed" / "kernel_details.csv", _good_rows())
    code, _, err = npuperf("parse", "--quiet", "--profile", kd, "--db", database)
    assert code == 0, err
    write_csv(database / "RmsNorm.csv", ["OP State", "Input Shapes", "Notes"],
              [["dynamic", "1,512;512", "kept"]])
    (database / "op_mapping.yaml").write_text("MatMulV2: [MatMulV2]\n")
    return database


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("npuperf parse: error: ")
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


# -- normal use -----------------------------------------------------------------------------

def test_parse_writes_and_summarises(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              _good_rows() + [kd_row("hcom_allReduce_", 9.0, core="HCCL",
                                                     in_shapes="N/A", out_shapes="N/A")])
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", tmp_path / "db")
    assert code == 0, err
    assert err == ""                                   # --quiet: no progress lines
    assert "wrote 2 file(s)" in out
    assert "2 rows added, 0 rows updated" in out      # the two MatMulV2 launches: one row
    assert "skipped 1 rows: 1 HCCL / communication" in out
    assert "MatMulV2.csv: +2 added" not in out and "MatMulV2.csv: +1 added" in out
    assert "Add.csv: +1 added, 0 updated (new file)" in out
    code, out, _ = npuperf("parse", "--quiet", "--profile", kd,
                           "--db", tmp_path / "db")
    assert code == 0
    assert "0 rows added, 2 rows updated" in out


def test_parse_into_device_and_version_directories(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--database-root", tmp_path / "data", "--vllm-version", "v0.18.0",
                             "--torch-version", "2.9.0+cpu", "--cann-version", "cann8.5")
    assert code == 0, err
    target = tmp_path / "data" / DEVICE / "vllm_ascend" / VERSION_DIR
    assert sorted(p.name for p in target.glob("*.csv")) == ["Add.csv", "MatMulV2.csv"]
    assert str(target) in out
    code, _, err = npuperf("parse", "--quiet", "--profile", kd,
                           "--database-root", tmp_path / "data",
                           "--device", "ATLAS_800_A2_376T_64G", "--vllm-version", VERSION_DIR)
    assert code == 0, err
    assert (tmp_path / "data" / "ATLAS_800_A2_376T_64G" / "vllm_ascend" / VERSION_DIR /
            "Add.csv").is_file()


def test_missing_version_names_it_and_the_flag(tmp_path, npuperf, monkeypatch) -> None:
    class NotFound(Exception):
        pass

    def version(name: str) -> str:
        if name == "torch":
            return "2.9.0"
        raise NotFound(name)

    monkeypatch.setattr(layout, "metadata",
                        types.SimpleNamespace(version=version, PackageNotFoundError=NotFound))
    monkeypatch.setattr(layout, "_CANN_DEFAULT_HOME", tmp_path / "no-cann")
    for var in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH", "ASCEND_INSTALL_PATH"):
        monkeypatch.delenv(var, raising=False)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--device", DEVICE,
                             "--database-root", tmp_path / "data", "--vllm-version", "0.18.0")
    assert_one_line_error(code, out, err, "cann", "--cann-version")
    assert "--vllm-version" not in err and "--torch-version" not in err
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("flag, value", [("--torch-version", "2.9 0"),
                                         ("--vllm-version", "../../etc"),
                                         ("--cann-version", "8.5;x")])
def test_invalid_version_is_an_error(tmp_path, npuperf, flag: str, value: str) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    args = {"--vllm-version": "0.18.0", "--torch-version": "2.9.0", "--cann-version": "8.5",
            flag: value}
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--database-root",
                             tmp_path / "data", *[x for kv in args.items() for x in kv])
    assert_one_line_error(code, out, err, "invalid", flag)
    assert not (tmp_path / "data").exists()


def test_no_database_given(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    code, out, err = npuperf("parse", "--profile", kd)
    assert_one_line_error(code, out, err, "--db")


def test_dry_run_leaves_the_database_alone(tmp_path, npuperf, db) -> None:
    before = tree_digest(db)
    kd = write_kernel_details(tmp_path / "new" / "kernel_details.csv",
                              [kd_row("MatMulV2", 1.0, in_shapes="1,7168;3584,7168",
                                      out_shapes="1,3584")])
    code, out, _ = npuperf("parse", "--quiet", "--dry-run", "--profile", kd,
                           "--db", db)
    assert code == 0
    assert "would write 1 file(s)" in out and "1 rows added" in out
    assert tree_digest(db) == before


def test_ep_size_option(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row(
        "DispatchFFNCombine", 90.0, in_shapes="16,7168;256,7168,2048",
        in_dtypes="DT_BF16;DT_INT8", out_shapes="16,7168")])
    code, _, err = npuperf("parse", "--quiet", "--ep-size", "8", "--profile", kd,
                           "--db", tmp_path / "db")
    assert code == 0, err
    assert read_rows(tmp_path / "db" / "DispatchFFNCombine.csv")[0]["EP Size"] == "8"


def test_console_script_runs_in_a_fresh_process(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    result = subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "parse", "--quiet",
                             "--profile", str(kd), "--db", str(tmp_path / "db")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "2 rows added" in result.stdout
    result = subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "parse", "--quiet",
                             "--profile", str(tmp_path / "missing.csv"),
                             "--db", str(tmp_path / "db")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("npuperf parse: error:")
    assert len(result.stderr.strip().splitlines()) == 1


def test_help_lists_the_options(npuperf) -> None:
    with pytest.raises(SystemExit) as info:
        npuperf("parse", "--help")
    assert info.value.code == 0


def test_progress_lines_on_stderr() -> None:
    import io

    from pytest_npuperf.db.progress import Progress
    stream = io.StringIO()
    progress = Progress("parse", unit=" rows", stream=stream, interval=0)
    progress.update(1_000_000, "(file 1/2)")
    progress.finish("(1,000,000 rows)")
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("parse: 1,000,000 rows") and lines[0].endswith("(file 1/2)")
    assert lines[1].startswith("parse: done in")
    quiet = io.StringIO()
    Progress("parse", stream=quiet, interval=0, enabled=False).update(5)
    assert quiet.getvalue() == ""


# -- bad input --------------------------------------------------------------------------------

def _kd_text(rows, header=FULL_HEADER, **kw) -> str:
    return kernel_details_text(rows, header, **kw)


def _row_line(**kw) -> str:
    return _kd_text([kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16", **kw)]
                    ).splitlines()[1]


HEADER_LINE = ",".join(FULL_HEADER)
GOOD_LINE = _row_line()

BAD_INPUTS = {
    "empty file": (b"", ["empty file"]),
    "blank lines only": (b"\n\n", ["empty file"]),
    "header only": ((HEADER_LINE + "\n").encode(), ["header only"]),
    "required columns missing": (
        b"Step Id,Name,Type,Duration(us),Input Shapes,Output Shapes\n1,a,Add,2.0,1,1\n",
        ["Input Data Types", "Input Formats", "Output Data Types"]),
    "not a kernel table": (b"a,b\n1,2\n", ["missing column", "Type"]),
    "non-UTF-8 bytes": ((HEADER_LINE + "\n" + GOOD_LINE + "\n").encode()
                        + GOOD_LINE.replace("aclnnAdd", "aclnn\udcff").encode(
                            "utf-8", "surrogateescape") + b"\n",
                        ["not UTF-8", "0xff"]),
    "latin-1 file": ((HEADER_LINE + "\n" + GOOD_LINE.replace("aclnnAdd", "aclnn\u00e9")
                      + "\n").encode("latin-1"), ["not UTF-8"]),
    "unparsable duration": ((HEADER_LINE + "\n" + GOOD_LINE + "\n"
                             + GOOD_LINE.replace(",2.0,", ",2.O,") + "\n").encode(),
                            ["row 2", "'Duration(us)'", "'2.O'"]),
    "unparsable counter": ((HEADER_LINE + "\n" + _row_line(counters={"aic_mac_ratio": "0.8x"})
                            + "\n").encode(), ["row 1", "'aic_mac_ratio'", "0.8x"]),
    "unparsable input shape": ((HEADER_LINE + "\n" + _row_line().replace("8,16;8,16", "8,1б;8,16")
                                + "\n").encode(), ["row 1", "'Input Shapes'"]),
    "unparsable output shape": (
        (HEADER_LINE + "\n" + _kd_text([kd_row("Add", 2.0, in_shapes="8,16;8,16",
                                               out_shapes="8;x")]).splitlines()[1]
         + "\n").encode(), ["row 1", "'Output Shapes'"]),
    "git lfs pointer": (b"version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 1\n",
                        ["Git LFS pointer"]),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_and_leaves_the_database(tmp_path, npuperf, db, case: str) -> None:
    content, needles = BAD_INPUTS[case]
    path = tmp_path / "in" / "kernel_details.csv"
    path.parent.mkdir()
    path.write_bytes(content)
    before = tree_digest(db)
    code, out, err = npuperf("parse", "--quiet", "--profile", path, "--db", db)
    assert_one_line_error(code, out, err, *needles)
    assert str(path) in err                                  # says which file
    assert tree_digest(db) == before


def test_unparsable_number_far_down_a_chunked_file_names_its_row(tmp_path, npuperf, db) -> None:
    rows = [kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16") for _ in range(9)]
    rows[7]["Duration(us)"] = "fast"
    path = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    before = tree_digest(db)
    code, out, err = npuperf("parse", "--quiet", "--chunk-rows", "3", "--profile", path,
                             "--db", db)
    assert_one_line_error(code, out, err, str(path), "row 8", "'Duration(us)'", "'fast'")
    assert tree_digest(db) == before


def test_one_bad_file_among_good_ones_writes_nothing(tmp_path, npuperf, db) -> None:
    prof = tmp_path / "prof"
    write_kernel_details(prof / "rank0" / "kernel_details.csv",
                         [kd_row("MatMulV2", 1.0, in_shapes="2,7168;3584,7168",
                                 out_shapes="2,3584")])
    bad = prof / "rank1" / "kernel_details.csv"
    bad.parent.mkdir(parents=True)
    bad.write_text(HEADER_LINE + "\n" + GOOD_LINE.split(',"""8,16"""')[0] + "\n")
    before = tree_digest(db)
    code, out, err = npuperf("parse", "--quiet", "--profile", prof, "--db", db)
    assert_one_line_error(code, out, err, str(bad))
    assert tree_digest(db) == before


def test_missing_path(tmp_path, npuperf, db) -> None:
    before = tree_digest(db)
    missing = tmp_path / "nowhere" / "kernel_details.csv"
    code, out, err = npuperf("parse", "--profile", missing, "--db", db)
    assert_one_line_error(code, out, err, str(missing), "no such file")
    assert tree_digest(db) == before


def test_directory_without_kernel_tables(tmp_path, npuperf, db) -> None:
    prof = tmp_path / "prof"
    write_csv(prof / "op_statistic.csv", ["OP Type", "Count"], [["Add", "1"]])
    before = tree_digest(db)
    code, out, err = npuperf("parse", "--profile", prof, "--db", db)
    assert_one_line_error(code, out, err, "kernel_details")
    assert tree_digest(db) == before


def test_unwritable_database_directory(tmp_path, npuperf) -> None:
    # Tests run as root, for whom permission bits mean nothing: a regular file standing
    # where a parent directory should be makes the path unwritable for everyone.
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory\n")
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    before = tree_digest(tmp_path)
    code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                             "--db", blocker / "db")
    assert_one_line_error(code, out, err, "cannot write", "not a directory")
    assert tree_digest(tmp_path) == before


def test_database_path_that_is_a_file(tmp_path, npuperf) -> None:
    target = tmp_path / "MatMulV2.csv"
    target.write_text("OP State\n")
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    before = target.read_bytes()
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--db", target)
    assert_one_line_error(code, out, err, "not a directory")
    assert target.read_bytes() == before


def test_an_lfs_pointer_in_the_database_stops_the_merge(tmp_path, npuperf, db) -> None:
    (db / "MatMulV2.csv").write_text("version https://git-lfs.github.com/spec/v1\n"
                                     "oid sha256:abcd\nsize 99\n")
    before = tree_digest(db)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--db", db)
    assert_one_line_error(code, out, err, "MatMulV2.csv", "Git LFS pointer", "git lfs pull")
    assert tree_digest(db) == before


def test_a_failure_while_writing_replaces_no_file(tmp_path, npuperf, db, monkeypatch) -> None:
    from pytest_npuperf.db import transaction
    real = transaction.write_frame
    calls = []

    def fail_second(frame, handle) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real(frame, handle)

    monkeypatch.setattr(transaction, "write_frame", fail_second)
    before = tree_digest(db)
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows() + [
        kd_row("SwiGlu", 3.0, in_shapes="4,256", in_dtypes="DT_BF16", in_formats="ND",
               out_shapes="4,128")])
    code, out, err = npuperf("parse", "--quiet", "--profile", kd, "--db", db)
    assert_one_line_error(code, out, err, "No space left on device")
    assert len(calls) == 2
    assert tree_digest(db) == before


def test_a_second_writer_is_refused(tmp_path, npuperf, db) -> None:
    from pytest_npuperf.db.lock import database_lock
    kd = write_kernel_details(tmp_path / "kernel_details.csv", _good_rows())
    with database_lock(db, "a test"):
        before = tree_digest(db)
        code, out, err = npuperf("parse", "--quiet", "--profile", kd,
                                 "--db", db)
        assert tree_digest(db) == before
    assert_one_line_error(code, out, err, "being written by", "a test")
