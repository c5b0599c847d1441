"""`write_results` at a run's end, on database files directly."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from pytest_npuperf.db.signature import short_hash
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.upsert import row_signatures
from pytest_npuperf.measure.result import (
    STATUS_FAILED,
    STATUS_NOISY,
    STATUS_SKIPPED,
    STATUS_SUSPECT,
    CaseResult,
)
from pytest_npuperf.replay.write import write_results
from tests.replay_project import cells, tree_digest, write_db

V2_ROWS = [
    cells("16,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16",
          **{"Profiling Average Duration(us)": "10"}),
    cells("8,128;64,128", "DT_BF16;DT_BF16", "ND;ND", "8,64", "DT_BF16",
          **{"Average Duration(us)": "99", "Profiling Average Duration(us)": "50"}),
]
# The same GEMM as V2_ROWS[0], its weight stored (K, N).
V3_ROWS = [cells("16,64;64,32", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16")]


def result_for(db: Path, file: str, position: int, samples=(10.0, 12.0, 14.0), **fields):
    kernel_type = file.removesuffix(".csv")
    sigs, _ = row_signatures(read_table(db / file), kernel_type)
    result = CaseResult(case_id=f"{kernel_type}-{position}", nodeid=f"n{position}",
                        kernel_type=kernel_type, file=file, signature=short_hash(sigs[position]),
                        row=position + 1, device="CPU_TEST", **fields)
    if samples:
        result.set_samples(list(samples))
    return result


@pytest.fixture
def db(tmp_path):
    return write_db(tmp_path / "db", {"MatMulV2": V2_ROWS, "MatMulV3": V3_ROWS},
                    device="CPU_TEST")


def test_measurement_lands_in_the_row_with_mean_and_project_columns(db):
    outcome = write_results(db, db, [result_for(db, "MatMulV2.csv", 0)], native=True, run_id="r1",
                       stamp="s")
    table = read_table(db / "MatMulV2.csv")
    assert table["Average Duration(us)"].tolist() == ["12", "99"]
    assert table["MicroBench Median Duration(us)"][0] == "12"
    assert table["MicroBench Min Duration(us)"][0] == "10"
    assert table["MicroBench Samples"][0] == "3"
    assert table["MicroBench Run Id"][0] == "r1" and table["MicroBench Run Id"][1] == ""
    v2 = next(f for f in outcome.files if f.file == "MatMulV2.csv")
    assert (v2.updated, v2.unchanged, v2.missing, v2.added) == (1, 1, 0, 0)
    assert [(g.microbench_us, g.profiling_us, g.shape) for g in outcome.gaps] == [
        (12.0, 10.0, "16,64;32,64 -> 16,32")]


@pytest.mark.parametrize(("statistic", "stored"), [("median", "11"), ("mean", "17")])
def test_average_duration_holds_the_chosen_statistic_and_the_row_says_how_it_was_made(
        db, statistic, stored):
    result = result_for(db, "MatMulV2.csv", 0, samples=(10.0, 11.0, 30.0), statistic=statistic,
                        precision=0.0123, stop_reason="time budget")
    write_results(db, db, [result], native=True, run_id="r1", stamp="s")
    table = read_table(db / "MatMulV2.csv")
    row = table.iloc[0]
    assert row["Average Duration(us)"] == stored
    assert row["MicroBench Statistic"] == statistic
    assert (row["MicroBench Median Duration(us)"], row["MicroBench Mean Duration(us)"]) == \
        ("11", "17")
    assert row["MicroBench Precision"] == "0.0123"
    assert row["MicroBench Stop Reason"] == "time budget"
    assert row["MicroBench Outliers"] == str(result.stats.outliers)
    # Project columns after the contract ones, in their own order.
    columns = list(table.columns)
    assert columns.index("MicroBench Statistic") > columns.index(
        "Profiling Average cube_utilization(%)")
    order = ["MicroBench Statistic", "MicroBench Median Duration(us)",
             "MicroBench Mean Duration(us)", "MicroBench Std Duration(us)",
             "MicroBench Min Duration(us)", "MicroBench Samples", "MicroBench Precision",
             "MicroBench Stop Reason", "MicroBench Outliers", "MicroBench Warmup",
             "MicroBench Method", "MicroBench Status"]
    assert [columns.index(c) for c in order] == sorted(columns.index(c) for c in order)


def test_a_noisy_result_keeps_its_statistics_and_the_earlier_latency(db):
    result = result_for(db, "MatMulV2.csv", 1, samples=(10.0,) * 4 + (80.0,) * 8,
                        status=STATUS_NOISY, error="median 8.00x its minimum")
    outcome = write_results(db, db, [result], native=True, run_id="r", stamp="s")
    row = read_table(db / "MatMulV2.csv").iloc[1]
    assert row["Average Duration(us)"] == "99"  # never replaced by a number not to trust
    assert row["MicroBench Status"] == "noisy: median 8.00x its minimum"
    assert row["MicroBench Median Duration(us)"] == "80"
    v2 = next(f for f in outcome.files if f.file == "MatMulV2.csv")
    assert (v2.failed, v2.flagged, v2.updated) == (0, 1, 0)  # flagged, not failed


def test_matmul_measurement_follows_the_kernel_that_ran_and_never_adds_rows(db):
    before_v2 = read_table(db / "MatMulV2.csv")
    result = result_for(db, "MatMulV2.csv", 0, measured_kernel_type="MatMulV3")
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    v2, v3 = read_table(db / "MatMulV2.csv"), read_table(db / "MatMulV3.csv")
    assert v3["Average Duration(us)"].tolist() == ["12"]
    assert v2["Average Duration(us)"].tolist() == before_v2["Average Duration(us)"].tolist()
    assert (len(v2), len(v3)) == (2, 1)
    # A MatMulCommon run with no MatMulCommon file: it stays in the case's own row.
    result = result_for(db, "MatMulV2.csv", 1, measured_kernel_type="MatMulCommon")
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    assert read_table(db / "MatMulV2.csv")["Average Duration(us)"].tolist() == ["", "12"]
    assert not (db / "MatMulCommon.csv").exists()


def test_failed_case_keeps_durations_and_gets_its_status(db):
    result = result_for(db, "MatMulV2.csv", 1, samples=(), status=STATUS_FAILED,
                        error="RuntimeError: boom")
    outcome = write_results(db, db, [result], native=True, run_id="r", stamp="s")
    table = read_table(db / "MatMulV2.csv")
    assert table["Average Duration(us)"][1] == "99"
    assert table["MicroBench Status"][1] == "failed: RuntimeError: boom"
    assert next(f for f in outcome.files if f.file == "MatMulV2.csv").failed == 1


def test_suspect_result_is_flagged_and_kept_out_of_average_duration(db):
    result = result_for(db, "MatMulV2.csv", 0, status=STATUS_SUSPECT,
                        error="faster than the device allows")
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    table = read_table(db / "MatMulV2.csv")
    assert table["Average Duration(us)"][0] == ""
    assert table["MicroBench Median Duration(us)"][0] == "12"
    assert table["MicroBench Status"][0].startswith("suspect: faster than")


def test_a_case_pytest_skipped_leaves_the_file_untouched(db):
    before = tree_digest(db)
    result = result_for(db, "MatMulV2.csv", 0, samples=(), status=STATUS_SKIPPED, method="")
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    assert tree_digest(db) == before


def test_a_row_the_replay_cannot_run_here_keeps_its_values_and_says_why(db):
    """Issue 29: a row larger than the host was skipped with no status in the database."""
    before = read_table(db / "MatMulV2.csv")
    why = "MatMulV2: its tensors need 14,901.2 GiB and cpu has 24.0 GiB available"
    result = result_for(db, "MatMulV2.csv", 0, samples=(), status=STATUS_SKIPPED, error=why)
    write_results(db, db, [result], native=True, run_id="r", stamp="s")
    table = read_table(db / "MatMulV2.csv")
    assert table["MicroBench Status"][0] == f"skipped: {why}"
    assert table["Average Duration(us)"][0] == before["Average Duration(us)"][0]


def test_prune_never_deletes_a_row_whose_case_failed(db):
    """Issue 8: a failed case is promised to keep its row; prune used to delete it."""
    outcome = write_results(db, db, [], native=True, prune_empty=True, run_id="r", stamp="s")
    assert len(read_table(db / "MatMulV3.csv")) == 1  # not attempted: never pruned
    assert outcome.totals()["deleted"] == 0
    failed = result_for(db, "MatMulV3.csv", 0, samples=(), status=STATUS_FAILED, error="x")
    kept = result_for(db, "MatMulV2.csv", 0, samples=(), status=STATUS_FAILED, error="x")
    outcome = write_results(db, db, [failed, kept], native=True, prune_empty=True, run_id="r",
                       stamp="s")
    v3 = read_table(db / "MatMulV3.csv")
    assert v3["MicroBench Status"].tolist() == ["failed: x"]  # kept, with its error
    assert len(read_table(db / "MatMulV2.csv")) == 2
    assert outcome.totals()["deleted"] == 0


def test_prune_deletes_only_measured_rows_without_a_duration_before_or_after(db):
    # A suspect measurement keeps Average Duration empty: such a row, with no profiling
    # duration either, had none before and has none after: the only kind that goes.
    suspect = result_for(db, "MatMulV3.csv", 0, status=STATUS_SUSPECT, error="too fast")
    # MatMulV2 row 0 has a profiling duration: kept whatever happens.
    other = result_for(db, "MatMulV2.csv", 0, status=STATUS_SUSPECT, error="too fast")
    outcome = write_results(db, db, [suspect, other], native=True, prune_empty=True, run_id="r",
                       stamp="s")
    assert len(read_table(db / "MatMulV3.csv")) == 0
    assert len(read_table(db / "MatMulV2.csv")) == 2
    assert next(f for f in outcome.files if f.file == "MatMulV3.csv").deleted == 1
    assert any("MatMulV3.csv: pruned 1 row(s)" in n and "row 1 (16,64;64,32" in n
               for n in outcome.notes), outcome.notes


def test_dry_run_writes_nothing_but_reports_what_would_change(db):
    before = tree_digest(db)
    outcome = write_results(db, db, [result_for(db, "MatMulV2.csv", 0)], native=True, dry_run=True,
                       run_id="r", stamp="s")
    assert tree_digest(db) == before
    assert outcome.target is None and outcome.totals()["updated"] == 1


def test_duplicate_signatures_are_counted(tmp_path):
    rows = [V2_ROWS[0], V2_ROWS[0], V3_ROWS[0]]  # the third is the same GEMM, (K, N) stored
    db = write_db(tmp_path / "db", {"MatMulV2": rows}, device="CPU_TEST")
    outcome = write_results(db, db, [result_for(db, "MatMulV2.csv", 0)], native=True, run_id="r",
                       stamp="s")
    assert outcome.files[0].duplicates == 2
    assert outcome.files[0].updated == 3
    assert read_table(db / "MatMulV2.csv")["Average Duration(us)"].tolist() == ["12"] * 3


def test_another_devices_database_is_copied_not_written(tmp_path):
    source = write_db(tmp_path / "db", {"MatMulV2": V2_ROWS, "MatMulV3": V3_ROWS})
    (source / "op_mapping.yaml").write_text("version: test\n")
    before = tree_digest(source)
    target = tmp_path / "out" / "CPU_TEST" / "vllm_ascend" / source.name
    write_results(source, target, [result_for(source, "MatMulV2.csv", 1)], native=False,
             run_id="r", stamp="s")
    assert tree_digest(source) == before
    copy = read_table(target / "MatMulV2.csv")
    assert copy["Average Duration(us)"].tolist() == ["", "12"]  # Ascend's 99 is not ours
    assert copy["Profiling Average Duration(us)"].tolist() == ["", ""]
    assert read_table(target / "MatMulV3.csv")["Input Shapes"].tolist() == ["16,64;64,32"]
    assert (target / "op_mapping.yaml").read_text() == "version: test\n"
    # The source grows: the device's copy gets the new row, keeps its measurement.
    grown = write_db(tmp_path / "db", {"MatMulV2": [*V2_ROWS, cells(
        "4,32;16,32", "DT_BF16;DT_BF16", "ND;ND", "4,16", "DT_BF16")]})
    outcome = write_results(grown, target, [], native=False, run_id="r2", stamp="s2")
    copy = read_table(target / "MatMulV2.csv")
    assert copy["Input Shapes"].tolist()[-1] == "4,32;16,32"
    assert copy["Average Duration(us)"].tolist() == ["", "12", ""]
    assert any("new in the source" in n for n in outcome.notes)


def test_a_row_whose_cells_cannot_be_parsed_gets_its_case_error_in_its_status(tmp_path):
    rows = [*V2_ROWS, cells("16,6x4;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16")]
    db = write_db(tmp_path / "db", {"MatMulV2": rows}, device="CPU_TEST")
    broken = CaseResult(case_id="bad", nodeid="n", kernel_type="MatMulV2", file="MatMulV2.csv",
                        signature="", row=3, status="error", error="row 3: bad dimension")
    outcome = write_results(db, db, [broken], native=True, run_id="r", stamp="s")
    table = read_table(db / "MatMulV2.csv")
    assert table["MicroBench Status"].tolist() == ["", "", "error: row 3: bad dimension"]
    assert table["Input Shapes"][2] == "16,6x4;32,64"
    assert outcome.files[0].failed == 1


def test_the_winner_among_results_for_one_row_does_not_depend_on_their_order(tmp_path):
    rows = [V2_ROWS[0], V2_ROWS[0]]
    db = write_db(tmp_path / "db", {"MatMulV2": rows}, device="CPU_TEST")
    first = result_for(db, "MatMulV2.csv", 0, samples=(1.0, 1.0, 1.0))
    second = result_for(db, "MatMulV2.csv", 1, samples=(3.0, 3.0, 3.0))
    values = []
    for order in ([first, second], [second, first]):
        write_results(db, db, order, native=True, run_id="r", stamp="s")
        values.append(read_table(db / "MatMulV2.csv")["Average Duration(us)"].tolist())
    assert values[0] == values[1] == ["1", "1"]


def test_old_schema_profiling_values_never_reach_another_devices_copy(tmp_path):
    source = tmp_path / "db" / "ATLAS_800_A3_752T_128G_DIE" / "vllm_ascend" / "v"
    source.mkdir(parents=True)
    (source / "MatMulV2.csv").write_text(
        "OP State,Accelerator Core,Input Shapes,Input Data Types,Input Formats,Output Shapes,"
        "Output Data Types,Output Formats,Average Duration(us),Median Duration(us),"
        "Std Duration(us),Average aicore_time(us)\n"
        'dynamic,AI_CORE,"16,64;32,64",DT_BF16;DT_BF16,ND;ND,"16,32",DT_BF16,ND,5.5,5.4,0.3,5.1\n')
    target = tmp_path / "out" / "CPU_TEST" / "vllm_ascend" / "v"
    write_results(source, target, [], native=False, run_id="r", stamp="s")
    copy = read_table(target / "MatMulV2.csv")
    for column in ("Average Duration(us)", "Profiling Average Duration(us)",
                   "Profiling Median Duration(us)", "Profiling Std Duration(us)",
                   "Profiling Average aicore_time(us)"):
        assert copy[column].tolist() == [""], column


def test_a_failed_rename_in_native_mode_leaves_every_file_as_it_was(db, monkeypatch):
    """Issue 8: native mode said "the database was left as it was" while MatMulV2.csv had
    been replaced; now the failed rename restores what the transaction already replaced."""
    import os

    from pytest_npuperf.db.errors import NpuperfError

    results = [result_for(db, "MatMulV2.csv", 0), result_for(db, "MatMulV3.csv", 0)]
    before = tree_digest(db)
    real = os.replace

    def immutable_v3(src, dst):
        if str(dst).endswith("MatMulV3.csv"):  # MatMulV2.csv is renamed first
            raise PermissionError(1, "Operation not permitted", str(dst))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", immutable_v3)
    with pytest.raises(NpuperfError, match="every file was left as it was"):
        write_results(db, db, results, native=True, run_id="r", stamp="s")
    assert tree_digest(db) == before


def test_a_file_changed_after_collection_is_matched_by_signature(db):
    from pytest_npuperf.replay.cases import CaseCatalog

    catalog = CaseCatalog(db)
    result = result_for(db, "MatMulV2.csv", 1)
    # Another writer inserts a row above it between collection and the lock.
    table = read_table(db / "MatMulV2.csv")
    moved = pd.concat([table.iloc[[0]].assign(**{"Input Shapes": "2,64;32,64",
                                                 "Output Shapes": "2,32"}), table],
                      ignore_index=True)
    moved.to_csv(db / "MatMulV2.csv", index=False)
    write_results(db, db, [result], native=True, run_id="r", stamp="s", snapshot=catalog.database)
    after = read_table(db / "MatMulV2.csv")
    assert after["Average Duration(us)"].tolist() == ["", "", "12"]  # the same row, now 3rd


def test_counter_columns_block_by_block_equal_one_cell_at_a_time(monkeypatch) -> None:
    """Counters are formatted a block of rows at a time: each cell is still the one
    format_number gives its result's counter; a result without counters (or not measured)
    leaves its row alone, a counter it lacks (or NaN) is cleared."""
    from pytest_npuperf.db.columns import COUNTERS, microbench_counter
    from pytest_npuperf.db.upsert import format_number
    from pytest_npuperf.replay import write as module

    monkeypatch.setattr(module, "_COUNTER_BLOCK", 3)
    results = []
    for i in range(8):
        result = CaseResult(case_id=f"c{i}", nodeid="", kernel_type="MatMulV2", file="f",
                            signature="s")
        result.counters = {n: 1.0 / (i + 1) + k * 1e6 for k, n in enumerate(COUNTERS)}
        results.append(result)
    del results[2].counters[COUNTERS[4]]
    results[3].counters[COUNTERS[1]] = float("nan")
    results[5].counters = {}
    results[6].status = STATUS_FAILED
    columns = module._counter_columns(results)
    assert list(columns) == [microbench_counter(n) for n in COUNTERS]
    for name in COUNTERS:
        expected = [None if i in (5, 6) else format_number(r.counters.get(name))
                    for i, r in enumerate(results)]
        assert columns[microbench_counter(name)] == expected
    assert columns[microbench_counter(COUNTERS[4])][2] == ""
    assert columns[microbench_counter(COUNTERS[1])][3] == ""
    assert columns[microbench_counter(COUNTERS[0])][0] == "1"


def test_noisy_and_suspect_rows_are_counted_apart_from_failures_in_every_report(db):
    """One set of counts: the replay report's row counts agree with its case statuses (a
    noisy run said `Failed: 0 ... Noisy: N` and then `Rows with a failed case | N`)."""
    from pytest_npuperf.report import render_markdown
    from tests.report_data import session

    results = [result_for(db, "MatMulV2.csv", 0, status=STATUS_NOISY, error="spread 40 %"),
               result_for(db, "MatMulV2.csv", 1, status=STATUS_SUSPECT),
               result_for(db, "MatMulV3.csv", 0, samples=(), status=STATUS_FAILED,
                          error="RuntimeError: boom")]
    outcome = write_results(db, db, results, native=True, run_id="r1", stamp="20260101_000000")
    assert (outcome.totals()["failed"], outcome.totals()["flagged"]) == (1, 2)
    text = render_markdown(outcome, results, session())
    assert "- Failed: 1" in text and "- Noisy: 1" in text and "- Suspect: 1" in text
    rows = {cells[0]: cells[1] for line in text.splitlines() if line.startswith("| Rows")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert rows["Rows with a failing case (failed, error, timeout, crashed)"] == "1"
    assert rows["Rows with a flagged or skipped case (noisy, suspect, unattributed, skipped)"] == "2"
