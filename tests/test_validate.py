"""`npuperf validate`: database files checked against the contract (issue 2, deliverable 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_npuperf.db.columns import CONTRACT_COLUMNS
from pytest_npuperf.db.validate import validate_path

from .conftest import kd_row, write_csv, write_kernel_details

IDENTITY = list(CONTRACT_COLUMNS[:8])
HEADER = IDENTITY + ["Average Duration(us)", "Profiling Average Duration(us)",
                     "Profiling Std Duration(us)", "Notes"]


def good_row(m: int = 128, avg: str = "41.5", prof: str = "40", std: str = "0") -> list[str]:
    return ["dynamic", "AI_CORE", f"{m},7168;3584,7168", "DT_BF16;DT_BF16", "ND;ND",
            f"{m},3584", "DT_BF16", "ND", avg, prof, std, "free text, kept"]


def make_db(root: Path, files: dict[str, tuple[list[str], list[list[str]]]]) -> Path:
    for name, (header, rows) in files.items():
        write_csv(root / name, header, rows)
    return root


def problems_of(path: Path) -> list[str]:
    [report] = validate_path(path)
    return [p.render() for p in report.problems]


def test_a_clean_database_passes(tmp_path, npuperf) -> None:
    db = make_db(tmp_path / "db", {
        "MatMulV2.csv": (HEADER, [good_row(128), good_row(64, avg="", prof="", std="")]),
        "Add.csv": (HEADER, [["", "", "8,16;8,16", "FLOAT;FLOAT", "ND;ND", "8,16", "FLOAT",
                              "ND", "", "N/A", "", ""]]),
        "hccl/v8.5/hcom_allReduce_.csv": (
            ["message_bytes", "num_devices", "dtype", "topology_tier", "Duration(us)",
             "bandwidth_gbps"], [["1024", "8", "DT_BF16", "2", "12.5", "0.08"]]),
    })
    (db / "reports").mkdir()
    (db / "reports" / "duration_gap_20250101_000000.csv").write_text("junk\n")
    (db / ".hidden.csv").write_text("version https://git-lfs.github.com/spec/v1\n")
    code, out, err = npuperf("validate", db)
    assert code == 0, out + err
    # the tables and the directory's op_mapping.yaml, whose absence is a warning
    assert "4 file(s) checked: 4 ok, 0 with problems (0 in all); 1 warning(s)" in out
    assert "OK   " in out and "duration_gap" not in out and ".hidden" not in out


def test_database_written_by_parse_validates(tmp_path, npuperf) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [
        kd_row("MatMulV2", 40.0), kd_row("MatMulV3", 30.0, in_shapes="8,7168;7168,3584",
                                         out_shapes="8,3584"),
        kd_row("Add", 1.38, in_shapes=";", in_dtypes="FLOAT;FLOAT", out_shapes="",
               out_dtypes="FLOAT")])
    assert npuperf("parse", "--quiet", "--profile", kd,
                   "--db", tmp_path / "db")[0] == 0
    code, out, _ = npuperf("validate", tmp_path / "db")
    assert code == 0, out


def test_lfs_pointer(tmp_path, npuperf) -> None:
    path = tmp_path / "MatMulV2.csv"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 10\n")
    code, out, _ = npuperf("validate", path)
    assert code == 1
    assert "FAIL" in out and "Git LFS pointer" in out and "git lfs pull" in out


def test_missing_identity_columns_are_named(tmp_path) -> None:
    header = [h for h in HEADER if h not in ("Input Formats", "Output Data Types")]
    path = write_csv(tmp_path / "Add.csv", header, [])
    assert problems_of(path) == ["missing column(s): Input Formats, Output Data Types"]


def test_dispatch_ffn_combine_needs_ep_size(tmp_path) -> None:
    path = write_csv(tmp_path / "DispatchFFNCombine.csv", HEADER, [])
    assert problems_of(path) == ["missing column(s): EP Size"]
    ok = write_csv(tmp_path / "ok" / "DispatchFFNCombine.csv", HEADER + ["EP Size"], [])
    assert problems_of(ok) == []


@pytest.mark.parametrize("column, cell, expected", [
    ("Input Data Types", "DT_BF16", "row 1, column 'Input Data Types': 1 entries for 2 shape "
                                    "slot(s) of 'Input Shapes'"),
    ("Input Formats", "ND;ND;ND", "row 1, column 'Input Formats': 3 entries for 2 shape slot(s)"),
    ("Output Data Types", "DT_BF16;DT_BF16", "row 1, column 'Output Data Types': 2 entries for 1"),
    ("Input Shapes", "128,7x168;3584,7168", "row 1, column 'Input Shapes': bad dimension"),
    ("Output Shapes", "(128, 3584", "row 1, column 'Output Shapes': bad dimension"),
    ("Input Data Types", "DT_BF16;DT_BOGUS", "row 1, column 'Input Data Types': unknown dtype "
                                             "'DT_BOGUS'"),
    ("Input Formats", "ND;FRACTAL NZ", "row 1, column 'Input Formats': unparsable format"),
])
def test_cell_problems_name_row_and_column(tmp_path, column, cell, expected) -> None:
    row = good_row()
    row[HEADER.index(column)] = cell
    path = write_csv(tmp_path / "MatMulV2.csv", HEADER, [row])
    found = problems_of(path)
    assert any(p.startswith(expected) for p in found), found


def test_slot_alignment_counts_empty_slots(tmp_path) -> None:
    ok = ["dynamic", "AI_CORE", "1,512;1,512;512;", "DT_BF16;DT_BF16;DT_INT64;DT_UNDEFINED",
          "ND;ND;ND;NULL", "1,512", "DT_BF16", "ND", "", "", "", ""]
    bad = ok[:3] + ["DT_BF16;DT_BF16;DT_INT64", "ND;ND;ND"] + ok[5:]
    assert problems_of(write_csv(tmp_path / "a" / "RmsNorm.csv", HEADER, [ok])) == []
    found = problems_of(write_csv(tmp_path / "b" / "RmsNorm.csv", HEADER, [bad]))
    assert len(found) == 2 and all("3 entries for 4 shape slot(s)" in p for p in found)


def test_no_shape_rows_need_no_lists(tmp_path) -> None:
    row = ["", "HCCL", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A", "", "", "", ""]
    assert problems_of(write_csv(tmp_path / "X.csv", HEADER, [row])) == []


def test_duplicate_signatures(tmp_path) -> None:
    other_spelling = good_row()
    other_spelling[2] = '"(128, 7168);(7168, 3584)"'   # the same GEMM, other orientation
    other_spelling[3] = "BF16;BF16"
    path = write_csv(tmp_path / "MatMulV2.csv", HEADER,
                     [good_row(), good_row(64), other_spelling])
    found = problems_of(path)
    assert found == ["row 1: duplicate signature: rows 1, 3 describe the same kernel call"]


@pytest.mark.parametrize("column, cell, ok", [
    ("Average Duration(us)", "0", False), ("Average Duration(us)", "-3", False),
    ("Average Duration(us)", "abc", False), ("Average Duration(us)", "inf", False),
    ("Profiling Average Duration(us)", "0.0", False),
    ("Profiling Std Duration(us)", "-0.5", False),
    ("Profiling Std Duration(us)", "0", True),          # a spread may be zero
    ("Average Duration(us)", "", True), ("Average Duration(us)", "N/A", True),
    ("Average Duration(us)", "1e-3", True), ("Notes", "0", True),
])
def test_duration_cells(tmp_path, column: str, cell: str, ok: bool) -> None:
    row = good_row()
    row[HEADER.index(column)] = cell
    found = problems_of(write_csv(tmp_path / "MatMulV2.csv", HEADER, [row]))
    if ok:
        assert found == []
    else:
        assert len(found) == 1
        assert found[0].startswith(f"row 1, column '{column}': ")
        assert repr(cell) in found[0]


def test_unreadable_files_are_reported_not_raised(tmp_path) -> None:
    (tmp_path / "Empty.csv").write_bytes(b"")
    (tmp_path / "Latin.csv").write_bytes(b"OP State\n\xe9t\xe9\n")
    (tmp_path / "Long.csv").write_text("OP State,Input Shapes\na,b,c\n")
    reports = {r.path.name: r for r in validate_path(tmp_path) if r.path.suffix == ".csv"}
    assert "empty file" in reports["Empty.csv"].problems[0].message
    assert "not UTF-8" in reports["Latin.csv"].problems[0].message
    assert "fields" in reports["Long.csv"].problems[0].message or \
        "malformed" in reports["Long.csv"].problems[0].message
    assert not any(r.ok for r in reports.values())


def test_collective_files(tmp_path) -> None:
    header = ["message_bytes", "num_devices", "dtype", "topology_tier", "Duration(us)",
              "bandwidth_gbps"]
    path = write_csv(tmp_path / "hcom_allGather_.csv", header, [
        ["1024", "8", "DT_BF16", "2", "12.5", "0.08"],
        ["1k", "0", "DT_BOGUS", "3", "0", ""],
    ])
    found = problems_of(path)
    assert any(p.startswith("row 2, column 'message_bytes'") for p in found)
    assert any(p.startswith("row 2, column 'num_devices'") for p in found)
    assert any(p.startswith("row 2, column 'dtype'") for p in found)
    assert any(p.startswith("row 2, column 'topology_tier'") for p in found)
    assert any(p.startswith("row 2, column 'Duration(us)'") for p in found)
    assert not any(p.startswith("row 1") for p in found)
    missing = write_csv(tmp_path / "x" / "hcom_alltoall_.csv", ["message_bytes", "dtype"], [])
    assert problems_of(missing) == ["missing column(s): num_devices, Duration(us)"]


def test_report_is_readable_and_exit_status_says_failure(tmp_path, npuperf) -> None:
    bad = good_row()
    bad[HEADER.index("Average Duration(us)")] = "0"
    db = make_db(tmp_path / "db", {"MatMulV2.csv": (HEADER, [good_row(64), bad]),
                                   "Add.csv": (HEADER, [good_row()])})
    code, out, _ = npuperf("validate", db)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("OK   ") and lines[0].endswith("Add.csv (1 rows)")
    assert lines[1].startswith("FAIL ") and "MatMulV2.csv (2 rows, 1 problem(s))" in lines[1]
    assert lines[2].strip().startswith("row 2, column 'Average Duration(us)': invalid duration '0'")
    assert lines[-1] == ("3 file(s) checked: 2 ok, 1 with problems (1 in all); 1 warning(s) about "
                         "what the simulator cannot read (--consumer makes them problems)")
    code, out, _ = npuperf("validate", "--quiet", db)
    assert code == 1 and "Add.csv" not in out and "MatMulV2.csv" in out


def test_long_problem_lists_are_cut(tmp_path) -> None:
    rows = []
    for m in range(1, 31):
        row = good_row(m)
        row[HEADER.index("Average Duration(us)")] = "-1"
        rows.append(row)
    [report] = validate_path(write_csv(tmp_path / "MatMulV2.csv", HEADER, rows))
    text = report.render()
    assert len(report.problems) == 30
    assert "... and 10 more" in text
    assert len(text.splitlines()) == 1 + 20 + 1


def test_old_fixture_schema_is_noted(realdata, npuperf) -> None:
    path = realdata / "msmodeling" / "msmodeling_fixture_fia_raw_test_FusedInferAttentionScore.csv"
    [report] = validate_path(path)
    assert report.rows == 10
    assert any("old fixture schema" in n and
               "Average Duration(us) -> Profiling Average Duration(us)" in n for n in report.notes)
    # the fixture repeats one call (rows 1, 9 and 10): reported, not hidden
    assert [p.render() for p in report.problems] == [
        "row 1: duplicate signature: rows 1, 9, 10 describe the same kernel call"]
    code, out, _ = npuperf("validate", path)
    assert code == 1 and "note: old fixture schema" in out


def test_legacy_microbench_column_is_a_note_not_a_problem(tmp_path) -> None:
    header = [h if h != "Average Duration(us)" else "MicroBench Duration(us)" for h in HEADER]
    [report] = validate_path(write_csv(tmp_path / "MatMulV2.csv", header, [good_row()]))
    assert report.ok
    assert report.notes == ["legacy column names: MicroBench Duration(us) -> Average Duration(us) "
                            "on the next rewrite"]


@pytest.mark.parametrize("make", ["missing", "empty dir"])
def test_nothing_to_validate_is_an_error(tmp_path, npuperf, make: str) -> None:
    target = tmp_path / "db"
    if make == "empty dir":
        target.mkdir()
    code, _out, err = npuperf("validate", target)
    assert code == 2
    assert err.startswith("npuperf validate: error: ") and len(err.strip().splitlines()) == 1
