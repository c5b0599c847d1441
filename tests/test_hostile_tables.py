"""Hostile tables, databases and logs (issue 20): what the writers write their readers accept,
nothing quadratic in a table's width, no silent duplicates, no slid columns, no hang on a FIFO,
no unbounded read, no unbelievable timestamp winning a merge.

Each test reproduces a finding (the hostile file written, the command run) and fails without
its fix; sizes are the findings' own where they stay under a few MB.
"""

from __future__ import annotations

import csv
import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from pytest_npuperf.db.columns import contract_columns_for
from pytest_npuperf.db.csvfile import MAX_LINE_BYTES
from pytest_npuperf.db.database import Database
from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.ingest.op_summary import find_sources, read_kernels

from .conftest import FULL_HEADER, kd_row, kernel_details_text, read_rows, tree_digest
from .real_samples import REALDATA
from .replay_project import cells, write_db
from .test_hostile_input import ADD, _kd, _one_line

OP_SUMMARY = REALDATA / "op_summary" / "neopan_tilelang_cann83rc2_910B2_op_summary_20260605161737.csv"


def _parse(npuperf, profile: Path, db: Path, *args):
    return npuperf("parse", "--quiet", "--profile", profile, "--db", db, *args)


# -- what parse writes, its readers read ---------------------------------------------------------

@pytest.mark.slow
def test_a_row_of_a_million_shape_slots_is_skipped_by_name_not_written(tmp_path, npuperf):
    """It used to become a 20 MB line that the table's own reader refused: neither parse nor
    validate could read the database again until it was edited by hand."""
    slots = ";".join(["1"] * 1_000_000)
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD),
                        kd_row("Add", 3.0, in_shapes=slots, in_dtypes="FLOAT", in_formats="ND",
                               out_shapes="8,16")])
    db = tmp_path / "db"
    code, out, err = _parse(npuperf, kd, db)
    assert code == 0, err
    assert "skipped 1 rows: 1 identity cells longer than 1 MiB once written" in out
    assert npuperf("validate", db)[0] == 0
    code, _, err = _parse(npuperf, kd, db)  # and the database can be parsed into again
    assert code == 0, err
    assert [r["Profiling Count"] for r in read_rows(db / "Add.csv")] == ["1"]


def test_a_table_line_its_reader_would_refuse_is_never_written(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    columns = list(contract_columns_for("Add"))
    row = dict.fromkeys(columns, "")
    row.update({"Input Shapes": "8,16", "Input Data Types": "FLOAT", "Input Formats": "ND",
                "Output Shapes": "8,16", "Output Data Types": "FLOAT", "Output Formats": "ND"})
    small = pd.DataFrame([row], columns=columns, dtype=object)
    huge = small.copy()
    huge["Profiling Source"] = "x" * (MAX_LINE_BYTES + 1)
    wide = pd.DataFrame([["1"] * 120_000], columns=[f"column {i}" for i in range(120_000)],
                        dtype=object)  # a header past the 1 MiB the readers accept
    database = Database(db)
    for frame, needle in ((huge, "row 1 would be a line of"), (wide, "the header would be")):
        with pytest.raises(ContractError, match=needle), database.transaction("test") as tx:
            tx.stage_table(db / "Add.csv", frame)
        assert not any(db.iterdir()), list(db.iterdir())  # nothing staged is left
    with database.transaction("test") as tx:
        tx.stage_table(db / "Add.csv", small)
    assert read_rows(db / "Add.csv")[0]["Input Shapes"] == "8,16"


# -- wide tables: linear, bounded ----------------------------------------------------------------

def test_a_kernel_table_of_100000_columns_is_refused_at_once(tmp_path, npuperf):
    """Duplicate-header check and counter lookup were quadratic in the column count: 65 s and
    more, then a database header no reader accepts."""
    header = [*FULL_HEADER, *(f"c{i}" for i in range(100_000))]
    kd = tmp_path / "kernel_details.csv"
    kd.write_text(kernel_details_text([kd_row("Add", 2.0, **ADD)], header))
    started = time.monotonic()
    code, _, err = _parse(npuperf, kd, tmp_path / "db")
    assert time.monotonic() - started < 15
    _one_line(code, err, "parse", "100,046 columns", "at most 1,024", status=1)
    assert not (tmp_path / "db").exists()


def test_validate_of_a_csv_with_200000_empty_columns_is_quick(tmp_path, npuperf):
    db = tmp_path / "db"
    db.mkdir()
    identity = ",".join(contract_columns_for("Add")[:8])
    (db / "Add.csv").write_text(f"{identity}{',' * 200_000}\n"
                                f'dynamic,AI_CORE,"8,16",FLOAT,ND,"8,16",FLOAT,ND'
                                f"{',' * 200_000}\n")
    started = time.monotonic()
    code, out, _ = npuperf("validate", db)
    assert time.monotonic() - started < 10  # quadratic: about 30 s here
    assert code == 1 and "duplicate column name(s) ''" in out


# -- a database whose identity column was removed by hand ----------------------------------------

def _without_column(path: Path, column: str) -> None:
    rows = list(csv.reader(path.open(newline="")))
    at = rows[0].index(column)
    with path.open("w", newline="") as handle:
        csv.writer(handle, lineterminator="\n").writerows(r[:at] + r[at + 1:] for r in rows)


def test_a_table_without_an_identity_column_is_refused_never_duplicated(tmp_path, npuperf):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)])
    db = tmp_path / "db"
    assert _parse(npuperf, kd, db)[0] == 0
    _without_column(db / "Add.csv", "Input Formats")
    before = tree_digest(db)
    code, _, err = _parse(npuperf, kd, db)
    _one_line(code, err, "parse", "no 'Input Formats' column", "duplicate", status=1)
    assert tree_digest(db) == before
    target = write_db(tmp_path / "merged", {"Add": [cells("8,16;8,16", "FLOAT;FLOAT", "ND;ND",
                                                          "8,16", "FLOAT")]})
    code, _, err = npuperf("merge", "--db", target, db)
    _one_line(code, err, "merge", "no 'Input Formats' column", status=1)
    code, _, err = npuperf("grid", "--db", db, "--config", "embedded_db", "--kernels",
                           "Add", "--quiet")
    assert code == 1 and "no 'Input Formats' column" in err, err
    assert tree_digest(db) == before


# -- profiler output: op_summary rows one field short --------------------------------------------

def _one_field_short(tmp_path: Path) -> Path:
    """The real CANN 8.3 op_summary, every row without its `Context ID` field (an export that
    drops an empty cell): each later value would land in the column before its own."""
    lines = OP_SUMMARY.read_text().splitlines()
    at = lines[0].split(",").index("Context ID")
    short = [lines[0]] + [",".join(f for i, f in enumerate(line.split(",")) if i != at)
                          for line in lines[1:]]
    path = tmp_path / "prof" / "op_summary_20260605161737.csv"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(short) + "\n")
    return path


def test_op_summary_rows_one_field_short_are_skipped_and_said_not_slid(realdata, tmp_path):
    path = _one_field_short(tmp_path)
    table = read_kernels(find_sources(path.parent))
    assert len(table) == 0 and table.skipped == 3
    [note] = table.notes
    assert "3 row(s) with fewer fields than the header's 46 (lines 2, 3, 4): skipped" in note
    good = read_kernels(find_sources(OP_SUMMARY))  # the same file, whole: counters in place
    assert good.counters[0][2] == 0.0 and good.counters[0][3] == 0.0  # aic_mac_time, _ratio


def test_backfill_says_so_when_every_op_summary_row_is_short(realdata, tmp_path, npuperf,
                                                            monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _one_field_short(tmp_path)
    db = write_db(tmp_path / "db", {"main_kernel": [cells("N/A", "", "", "N/A", "")]})
    code, out, err = npuperf("backfill", "--profile", path.parent, "--db", db,
                             "--history", "none")
    assert code == 0, err
    assert "3 row(s) with fewer fields than the header's 46" in out
    assert read_rows(db / "main_kernel.csv")[0]["MicroBench aic_mac_time(us)"] == ""


# -- FIFOs, devices and links to them: refused by name, never waited on -------------------------

@pytest.mark.parametrize("option", ["--config", "--model-file"])
def test_a_grid_config_or_model_file_on_a_fifo_is_refused_without_blocking(tmp_path, npuperf,
                                                                            option):
    fifo = tmp_path / "grid.yaml"
    os.mkfifo(fifo)
    (tmp_path / "db").mkdir()
    code, _, err = npuperf("grid", "--db", tmp_path / "db", "--dry-run", option, fifo)
    _one_line(code, err, "grid", str(fifo), "not a regular file", status=2)


def test_import_nccl_tests_of_dev_zero_or_a_fifo_is_bounded(tmp_path, npuperf):
    fifo = tmp_path / "all_reduce_perf.txt"
    os.mkfifo(fifo)
    code, _, err = npuperf("import-nccl-tests", fifo, "--db", tmp_path / "hccl")
    _one_line(code, err, "import-nccl-tests", "not a regular file", status=2)
    code, _, err = npuperf("import-nccl-tests", "/dev/zero", "--db", tmp_path / "hccl")
    _one_line(code, err, "import-nccl-tests", "/dev/zero", "larger than 64 MiB", status=1)
    assert not (tmp_path / "hccl").exists()


def _plant(directory: Path, name: str, kind: str) -> Path:
    path = directory / name
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    return path


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_fifo_or_a_link_to_dev_zero_in_a_parse_directory_is_named(tmp_path, npuperf, kind):
    _kd(tmp_path, [kd_row("Add", 2.0, **ADD)], "rank0/kernel_details.csv")
    (tmp_path / "prof" / "rank1").mkdir()
    planted = _plant(tmp_path / "prof" / "rank1", "kernel_details.csv", kind)
    code, _, err = _parse(npuperf, tmp_path / "prof", tmp_path / "db")
    _one_line(code, err, "parse", str(planted))
    assert not (tmp_path / "db").exists()


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_fifo_or_a_link_to_dev_zero_in_a_database_is_a_problem_not_skipped(tmp_path, npuperf,
                                                                             kind):
    db = write_db(tmp_path / "db", {"Add": [cells("8,16", "FLOAT", "ND", "8,16", "FLOAT")]})
    planted = _plant(db, "MatMulV2.csv", kind)
    code, out, _ = npuperf("validate", db)
    assert code == 1 and f"FAIL {planted}" in out and "not a regular file" in out, out
    database = Database(db).read(strict=False)
    assert "not a regular file" in str(database.failed["MatMulV2.csv"])


# -- merge: a timestamp that cannot be believed never wins ---------------------------------------

@pytest.mark.parametrize("stamp", ["not-a-date", "2099-01-01T00:00:00"])
def test_merge_never_takes_an_unbelievable_timestamp_over_todays(tmp_path, npuperf, stamp):
    today = time.strftime("%Y-%m-%dT%H:%M:%S")

    def shard(name: str, value: str, when: str) -> Path:
        row = cells("8,16", "FLOAT", "ND", "8,16", "FLOAT", **{
            "Average Duration(us)": value, "MicroBench Timestamp": when,
            "MicroBench Status": "ok"})
        return write_db(tmp_path / name, {"Add": [row]}, extra_columns=(
            "MicroBench Timestamp", "MicroBench Status"))

    target, source = shard("target", "5", today), shard("source", "999", stamp)
    code, out, err = npuperf("merge", "--db", target, source)
    assert code == 0, err
    assert "nothing newer in the sources" in out and "1 measurement(s) with a MicroBench " \
        "Timestamp that is not a time or lies in the future" in out
    assert read_rows(target / "Add.csv")[0]["Average Duration(us)"] == "5"
    shutil.rmtree(target.parents[2])  # the other way round: today's replaces the bad one
    target, source = shard("target", "999", stamp), shard("source2", "5", today)
    assert npuperf("merge", "--db", target, source)[0] == 0
    assert read_rows(target / "Add.csv")[0]["Average Duration(us)"] == "5"


# -- the WEAK findings: one-line errors, named skips, said replacements -------------------------

def test_a_file_with_two_byte_order_marks_is_one_line_not_a_traceback(tmp_path, npuperf):
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)])
    kd.write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + kd.read_bytes())
    code, _, err = _parse(npuperf, kd, tmp_path / "db")
    _one_line(code, err, "parse", str(kd), "two UTF-8 byte-order marks", status=1)
    db = write_db(tmp_path / "db2", {"Add": [cells("8,16", "FLOAT", "ND", "8,16", "FLOAT")]})
    (db / "Add.csv").write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + (db / "Add.csv").read_bytes())
    code, out, _ = npuperf("validate", db)
    assert code == 1 and "two UTF-8 byte-order marks" in out and "missing column" not in out


def test_a_duration_spelled_with_an_underscore_is_no_number(tmp_path, npuperf):
    """Python's float() reads `1_000`; pandas and the simulator do not."""
    kd = _kd(tmp_path, [kd_row("Add", 2.0, **ADD), kd_row("Add", "1_000", **ADD)])
    code, _, err = _parse(npuperf, kd, tmp_path / "db")
    _one_line(code, err, "parse", "row 2", "'Duration(us)'", "'1_000'", status=1)
    db = write_db(tmp_path / "db2", {"Add": [cells("8,16", "FLOAT", "ND", "8,16", "FLOAT", **{
        "Average Duration(us)": "1_000", "Profiling Average Duration(us)": "２"})]})
    code, out, _ = npuperf("validate", db)
    assert code == 1 and "unparsable duration '1_000'" in out and "unparsable duration '２'" in out


def test_launches_without_a_start_time_are_not_counted_as_duplicates(tmp_path, npuperf):
    rows = [kd_row("Add", d, task=7, start=start, **ADD)
            for d, start in ((2.0, "N/A"), (4.0, "N/A"), (6.0, ""))]
    kd = tmp_path / "prof" / "kernel_details.csv"
    kd.parent.mkdir()
    kd.write_text(kernel_details_text(rows))  # `N/A\t`: the TAB after every start time
    code, out, err = _parse(npuperf, kd, tmp_path / "db")
    assert code == 0, err
    assert "duplicate" not in out and "3 row(s) without a stream, task or start time: kept" in out
    assert read_rows(tmp_path / "db" / "Add.csv")[0]["Profiling Count"] == "3"


def test_a_second_profile_is_pooled_with_the_first_and_a_profile_parsed_again_replaces(
        tmp_path, npuperf):
    first = _kd(tmp_path, [kd_row("Add", 2.0, **ADD)], "run1/kernel_details.csv")
    second = _kd(tmp_path, [kd_row("Add", d, **ADD) for d in (4.0, 6.0)],
                 "run2/kernel_details.csv")
    db = tmp_path / "db"
    assert _parse(npuperf, first, db)[0] == 0
    code, out, err = _parse(npuperf, second, db)
    assert code == 0, err
    assert "note: Add.csv: 1 row(s) held an earlier profile's statistics: pooled" in out
    row = read_rows(db / "Add.csv")[0]
    assert (row["Profiling Count"], row["Profiling Average Duration(us)"]) == ("3", "4")
    assert float(row["Profiling Std Duration(us)"]) == pytest.approx((8 / 3) ** 0.5)
    assert (row["Profiling Min Duration(us)"], row["Profiling Max Duration(us)"]) == ("2", "6")
    # The median of 2, 4, 6 is not known from 2 and 5: the larger profile's, said so.
    assert (row["Profiling Median Duration(us)"], row["Profiling Median Count"]) == ("5", "2")
    assert row["Profiling Source"] == "run1;run2"
    code, out, err = _parse(npuperf, second, db)  # run2 again: its kernels are counted once
    assert code == 0, err
    assert ("note: Add.csv: 1 row(s) held profiling statistics of an earlier parse "
            "(run1;run2): replaced by this profile's, not pooled: they count a source of "
            "this profile already (parsed again)") in out
    row = read_rows(db / "Add.csv")[0]
    assert (row["Profiling Count"], row["Profiling Median Count"]) == ("2", "")


def test_two_halves_of_a_real_kernel_table_parsed_in_turn_give_the_whole_tables_statistics(
        tmp_path, npuperf, realdata):
    """Count, mean, population std, min, max and the counters' means of the pooled rows are
    those of one parse of the whole table; the median is one half's, with its count."""
    text = (realdata / "kernel_details" /
            "mstt_advisor_compute_advice_2025_kernel_details.csv").read_text()
    header, *rows = text.splitlines(keepends=True)
    # Split by task: a launch the table repeats (it does) stays in one half, where the
    # parse counts it once, as in the whole table.
    task = {r: next(csv.reader([r]))[2] for r in rows}
    tasks = sorted(set(task.values()))
    first = set(tasks[::3])
    halves = {"run1": [r for r in rows if task[r] in first],
              "run2": [r for r in rows if task[r] not in first]}
    for name, part in [("whole", rows), *halves.items()]:
        path = tmp_path / name / "kernel_details.csv"
        path.parent.mkdir()
        path.write_text(header + "".join(part))
    assert _parse(npuperf, tmp_path / "whole", tmp_path / "whole_db")[0] == 0
    for name in halves:
        code, _, err = _parse(npuperf, tmp_path / name, tmp_path / "db")
        assert code == 0, err
    pooled = 0
    for table in sorted((tmp_path / "whole_db").glob("*.csv")):
        whole = {_identity(r): r for r in read_rows(table)}
        for row in read_rows(tmp_path / "db" / table.name):
            expected = whole[_identity(row)]
            assert row["Profiling Count"] == expected["Profiling Count"]
            for column in row:
                if column.startswith(("Profiling Average", "Profiling Std", "Profiling Min",
                                      "Profiling Max")) and expected[column]:
                    assert float(row[column]) == pytest.approx(float(expected[column]),
                                                               rel=1e-7, abs=1e-9), column
            if row.get("Profiling Median Count"):  # both halves had kernels of it
                pooled += 1
                assert 0 < int(row["Profiling Median Count"]) < int(row["Profiling Count"])
                assert row["Profiling Source"] == "run1;run2"
    assert pooled >= 2


def _identity(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[c] for c in ("Input Shapes", "Input Data Types", "Input Formats",
                                  "Output Shapes", "Output Data Types"))


def test_a_profile_of_more_kernel_types_than_files_one_parse_writes(tmp_path, npuperf,
                                                                    monkeypatch):
    from pytest_npuperf.ingest import parse

    monkeypatch.setattr(parse, "MAX_KERNEL_TYPES", 2)  # 10,000: a table of 10^5 names
    kd = _kd(tmp_path, [kd_row(f"K{i}", 2.0, **ADD) for i in range(3)])
    code, _, err = _parse(npuperf, kd, tmp_path / "db")
    _one_line(code, err, "parse", "3 kernel types ('K0', 'K1', 'K2', ...)", status=1)
    assert not (tmp_path / "db").exists()


def test_a_fifo_named_like_a_trace_in_a_parse_directory_is_named(tmp_path, npuperf):
    _kd(tmp_path, [kd_row("Add", 2.0, **ADD)], "rank0/kernel_details.csv")
    fifo = tmp_path / "prof" / "trace.json"
    os.mkfifo(fifo)
    code, _, err = _parse(npuperf, tmp_path / "prof", tmp_path / "db")
    _one_line(code, err, "parse", str(fifo), "not a regular file")


def test_a_grid_shape_beyond_any_tensor_is_one_line(tmp_path, npuperf):
    config = tmp_path / "grid.yaml"
    config.write_text('patterns: {p: {iterators: {M: [100000000000000000000]}, '
                      'inputs: ["(M, 1)", "(M, 1)"], outputs: ["(M, 1)"]}}\n'
                      'assignments: {Add: p}\n')
    (tmp_path / "db").mkdir()
    code, _, err = npuperf("grid", "--db", tmp_path / "db", "--config", config,
                           "--max-hbm-gb", "0", "--quiet")
    _one_line(code, err, "grid", "(100000000000000000000, 1)", "more elements than any tensor")
    assert not any((tmp_path / "db").iterdir())


# -- nccl-tests and HCCL Test logs ---------------------------------------------------------------

NCCL_LOG = REALDATA / "nccl_tests" / "lessizzmore_a3mega_H100x16_all_reduce_perf.txt"
HCCL_LOG = REALDATA / "hccl_test" / "cann_oamtools_doc_all_reduce_test_example.txt"


def _result_lines(lines: list[str]) -> list[int]:
    return [i for i, line in enumerate(lines) if line.strip()[:1].isdigit()]


def test_two_logs_of_the_same_points_keep_one_row_each_and_say_so(realdata, tmp_path, npuperf):
    again = tmp_path / "again_all_reduce_perf.txt"
    shutil.copy(NCCL_LOG, again)
    code, out, err = npuperf("import-nccl-tests", NCCL_LOG, again, "--db",
                             tmp_path / "hccl")
    assert code == 0, err
    assert f"note: 31 point(s) {NCCL_LOG} measured too: this log's kept" in out
    assert len(read_rows(tmp_path / "hccl" / "hcom_allReduce_.csv")) == 31


def test_a_cut_last_line_and_junk_rows_are_left_out_and_said(realdata, tmp_path, npuperf):
    lines = NCCL_LOG.read_text().splitlines()
    lines.insert(_result_lines(lines)[2], "        4096     junk!  float sum -1 1 1 1 0 1 1 1 0")
    last = _result_lines(lines)[-1]
    cut = tmp_path / "cut_all_reduce_perf.txt"
    cut.write_text("\n".join(lines[:last]) + "\n" + lines[last][:40])  # cut mid-row, no end
    code, out, err = npuperf("import-nccl-tests", cut, "--db", tmp_path / "hccl")
    assert code == 0, err
    assert "1 line(s) inside the result table are no result row, left out" in out
    assert "the last line has no line end (the log was cut there): left out" in out
    assert len(read_rows(tmp_path / "hccl" / "hcom_allReduce_.csv")) == 30
    hccl = tmp_path / "all_reduce_test.txt"
    text = HCCL_LOG.read_text().replace("16384             |", "16x84             |")
    hccl.write_text(text.rstrip("\n"))  # its last row cut: no line end
    code, out, err = npuperf("import-nccl-tests", hccl, "--num-devices", "8",
                             "--db", tmp_path / "hccl2")
    assert code == 0, err
    assert "1 line(s) inside the result table are no result row" in out
    assert "the last line has no line end" in out
    assert len(read_rows(tmp_path / "hccl2" / "hcom_allReduce_.csv")) == 12


def test_a_row_whose_size_is_no_number_or_a_binary_line_is_said_chatter_is_not(realdata,
                                                                               tmp_path, npuperf):
    """Before: a row `6x4 16 float ...` and a line of binary bytes between the rows were
    dropped without a word."""
    lines = NCCL_LOG.read_text().splitlines()
    rows = _result_lines(lines)
    lines[rows[3]] = "        6x4    16     float     sum      -1    123.4    0.00    0.00      0    " \
                     "122.9    0.00    0.00      0"
    lines[rows[5]] = "\x00\x01\x7f\x02"
    lines.insert(rows[7], "ztan-mig-235z:6899:6899 [0] NCCL INFO Channel 00/02 : 0 1 2 3")
    log = tmp_path / "junk_all_reduce_perf.txt"
    log.write_text("\n".join(lines) + "\n")
    code, out, err = npuperf("import-nccl-tests", log, "--db", tmp_path / "hccl")
    assert code == 0, err
    assert "2 line(s) inside the result table are no result row, left out (e.g. '6x4" in out
    assert len(read_rows(tmp_path / "hccl" / "hcom_allReduce_.csv")) == 29


def test_a_grid_pattern_of_thousands_of_slots_is_refused_before_it_is_compiled(tmp_path, npuperf):
    """450,000 slots ran 7 minutes, then overflowed the compiler's recursion: every dim is
    code the grid compiles."""
    config = tmp_path / "grid.yaml"
    slots = ", ".join(['"(1,)"'] * 5000)
    config.write_text(f'patterns: {{p: {{iterators: {{M: [1]}}, inputs: [{slots}], '
                      f'outputs: ["(M,)"]}}}}\nassignments: {{Add: p}}\n')
    (tmp_path / "db").mkdir()
    code, _, err = npuperf("grid", "--db", tmp_path / "db", "--config", config, "--quiet")
    _one_line(code, err, "grid", "patterns.p.inputs: 5,000 shape templates", "at most 256")


def test_backfill_of_a_fifo_or_a_fifo_summary_is_refused_without_blocking(tmp_path, npuperf):
    db = write_db(tmp_path / "db", {"Add": [cells("8,16", "FLOAT", "ND", "8,16", "FLOAT")]})
    fifo = tmp_path / "prof.csv"
    os.mkfifo(fifo)
    code, _, err = npuperf("backfill", "--profile", fifo, "--db", db)
    _one_line(code, err, "backfill", "not a regular file", status=2)
    (tmp_path / "prof").mkdir()
    summary = tmp_path / "prof" / "op_summary_20260101010101.csv"
    os.mkfifo(summary)
    code, _, err = npuperf("backfill", "--profile", tmp_path / "prof", "--db", db)
    _one_line(code, err, "backfill", str(summary), "not a regular file", status=2)
