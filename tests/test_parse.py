"""`parse_profiling`: aggregation of kernel tables and merging into the database
(issue 2, deliverable 4; docs/format.md §4, §5)."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from pytest_npuperf.ingest.aggregate import (
    SKIP_BAD_DURATION,
    SKIP_DUPLICATE,
    SKIP_HCCL,
    SKIP_NO_SHAPE,
    SKIP_NO_TYPE,
    KernelAggregator,
)
from pytest_npuperf.ingest.parse import parse_profiling
from pytest_npuperf.measure.stats import StdConvention

from .conftest import (
    CANN7_HEADER,
    FULL_HEADER,
    LEVEL0_HEADER,
    hccl_row,
    kd_row,
    read_header,
    read_rows,
    stats,
    tree_digest,
    write_csv,
    write_kernel_details,
)

NK = "128,7168;3584,7168"      # weight stored (N, K)
KN = "128,7168;7168,3584"      # weight stored (K, N): the same GEMM


def parse(profiling: Path, db: Path, **kw):
    kw.setdefault("show_progress", False)
    return parse_profiling(profiling, db, **kw)


def _num(cell: str) -> float:
    return float(cell)


def assert_stats(row: dict[str, str], durations: list[float]) -> None:
    expected = stats(durations)
    assert int(row["Profiling Count"]) == expected["count"]
    assert _num(row["Profiling Average Duration(us)"]) == pytest.approx(expected["mean"], rel=1e-9)
    assert _num(row["Profiling Median Duration(us)"]) == pytest.approx(expected["median"], rel=1e-9)
    assert _num(row["Profiling Std Duration(us)"]) == pytest.approx(expected["std"], rel=1e-8,
                                                                    abs=1e-12)
    assert _num(row["Profiling Min Duration(us)"]) == pytest.approx(expected["min"], rel=1e-9)
    assert _num(row["Profiling Max Duration(us)"]) == pytest.approx(expected["max"], rel=1e-9)


def _by_shapes(path: Path) -> dict[str, dict[str, str]]:
    return {r["Input Shapes"] + "|" + r["Input Data Types"] + "|" + r["Input Formats"]: r
            for r in read_rows(path)}


# -- aggregation --------------------------------------------------------------------------------

def test_statistics_per_type_and_signature(tmp_path) -> None:
    durations = [10.0, 12.5, 11.0, 30.25]
    aicore = [9.0, 11.0, 10.0, 28.0]
    cube = [50.0, 60.0, 55.0, 71.5]
    rows = [kd_row("MatMulV2", d, in_shapes=NK if i % 2 else KN,
                   counters={"aicore_time(us)": a, "cube_utilization(%)": c})
            for i, (d, a, c) in enumerate(zip(durations, aicore, cube))]
    rows.append(kd_row("MatMulV2", 5.0, in_shapes="64,7168;3584,7168", out_shapes="64,3584"))
    rows.append(kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16"))
    kd = write_kernel_details(tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                              "kernel_details.csv", rows)
    db = tmp_path / "db"
    summary = parse(kd, db)
    assert sorted(p.name for p in db.glob("*.csv")) == ["Add.csv", "MatMulV2.csv"]
    assert (summary.rows_added, summary.rows_updated) == (3, 0)
    matmul = read_rows(db / "MatMulV2.csv")
    assert len(matmul) == 2
    big = next(r for r in matmul if r["Output Shapes"] == "128,3584")
    assert_stats(big, durations)
    assert _num(big["Profiling Average aicore_time(us)"]) == pytest.approx(sum(aicore) / 4)
    assert _num(big["Profiling Average cube_utilization(%)"]) == pytest.approx(sum(cube) / 4)
    assert big["Profiling Source"] == "run_ascend_pt"
    assert big["Average Duration(us)"] == ""                 # never a profiling value
    assert big["MicroBench aicore_time(us)"] == ""
    # identity of a new row: shapes canonical (no quotes), tokens as the profiler wrote them
    assert big["Input Shapes"] == KN
    assert (big["OP State"], big["Accelerator Core"]) == ("dynamic", "AI_CORE")
    assert_stats(next(r for r in matmul if r["Output Shapes"] == "64,3584"), [5.0])
    assert read_header(db / "MatMulV2.csv")[:62] == read_header(db / "Add.csv")[:62]


def test_new_file_has_the_contract_columns_first(tmp_path) -> None:
    from pytest_npuperf.db.columns import CONTRACT_COLUMNS
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row("Add", 1.0)])
    parse(kd, tmp_path / "db")
    header = read_header(tmp_path / "db" / "Add.csv")
    assert header[:62] == list(CONTRACT_COLUMNS)
    assert "Profiling Count" in header[62:]


def test_grouping_includes_dtypes_and_formats(tmp_path) -> None:
    rows = [
        kd_row("Add", 1.0, in_shapes="8,16;8,16", in_dtypes="DT_BF16;DT_BF16", out_shapes="8,16"),
        kd_row("Add", 3.0, in_shapes="8,16;8,16", in_dtypes="DT_BF16;DT_BF16", out_shapes="8,16"),
        kd_row("Add", 2.0, in_shapes="8,16;8,16", in_dtypes="FLOAT16;FLOAT16", out_shapes="8,16",
               out_dtypes="FLOAT16"),
        kd_row("Add", 4.0, in_shapes="8,16;8,16", in_formats="NCL;NCL", out_shapes="8,16"),
        # spelled differently, same signature as the first two
        kd_row("Add", 5.0, in_shapes="(8, 16);(8, 16)", in_dtypes="BF16;BF16",
               in_formats="FORMAT_ND;FORMAT_ND", out_shapes="8,16", out_dtypes="BF16"),
    ]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    parse(kd, tmp_path / "db")
    got = _by_shapes(tmp_path / "db" / "Add.csv")
    assert len(got) == 3
    assert_stats(got["8,16;8,16|DT_BF16;DT_BF16|ND;ND"], [1.0, 3.0, 5.0])
    assert_stats(got["8,16;8,16|FLOAT16;FLOAT16|ND;ND"], [2.0])
    assert_stats(got["8,16;8,16|DT_BF16;DT_BF16|NCL;NCL"], [4.0])


def test_std_is_numerically_stable(tmp_path) -> None:
    durations = [123456789.001, 123456789.002, 123456789.003, 123456789.004]
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("Add", repr(d)) for d in durations])
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert _num(row["Profiling Std Duration(us)"]) == pytest.approx(stats(durations)["std"],
                                                                    rel=1e-4)


def test_the_aggregate_keeps_the_population_std_and_says_so(tmp_path) -> None:
    durations = [10.0, 12.0, 17.0]
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("Add", d) for d in durations])
    aggregator = KernelAggregator()
    aggregator.add_file(kd)
    (kernel,) = aggregator.result().kernels
    assert kernel.stats.std_convention is StdConvention.POPULATION
    assert kernel.stats.std == pytest.approx(statistics.pstdev(durations), rel=1e-12)
    assert kernel.stats.std != pytest.approx(statistics.stdev(durations), rel=1e-3)


def test_kernel_type_instance_suffixes_are_one_type(tmp_path) -> None:
    rows = [kd_row("muls_add_kernel_0", 1.0, in_shapes="4,8", in_dtypes="DT_BF16",
                   in_formats="ND", out_shapes="4,8"),
            kd_row("muls_add_kernel_1", 3.0, in_shapes="4,8", in_dtypes="DT_BF16",
                   in_formats="ND", out_shapes="4,8")]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    parse(kd, tmp_path / "db")
    assert [p.name for p in (tmp_path / "db").glob("*.csv")] == ["muls_add_kernel.csv"]
    assert_stats(read_rows(tmp_path / "db" / "muls_add_kernel.csv")[0], [1.0, 3.0])


def test_a_hostile_type_name_stays_inside_the_database(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "prof" / "kernel_details.csv",
                              [kd_row("../../../evil", 1.0, in_shapes="4,8", in_dtypes="DT_BF16",
                                      in_formats="ND", out_shapes="4,8")])
    db = tmp_path / "a" / "b" / "db"
    parse(kd, db)
    written = [p for p in tmp_path.rglob("*.csv") if p != kd]
    assert len(written) == 1
    assert written[0].parent == db


# -- launch de-duplication ----------------------------------------------------------------------

def test_a_launch_exported_twice_is_counted_once(tmp_path) -> None:
    twin = dict(task=13792, stream=2, start="1736413974248200.543")
    rows = [kd_row("MatMulV3", 521.31, **twin) for _ in range(4)]            # real quirk
    rows += [kd_row("MatMulV3", 500.0, task=13792, stream=3, start="1736413974248200.543")]
    rows += [kd_row("MatMulV3", 400.0, in_shapes="64,7168;3584,7168", out_shapes="64,3584",
                    **twin)]                                                  # other signature
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    summary = parse(kd, tmp_path / "db")
    assert summary.aggregate.skipped[SKIP_DUPLICATE] == 3
    got = {r["Output Shapes"]: r for r in read_rows(tmp_path / "db" / "MatMulV3.csv")}
    assert_stats(got["128,3584"], [521.31, 500.0])
    assert_stats(got["64,3584"], [400.0])
    assert "3 duplicate launch record" in summary.render()


def test_results_do_not_depend_on_chunking(tmp_path) -> None:
    twin = dict(task=7, stream=2, start="1736413974248200.543")
    rows = [kd_row("Add", float(i % 7 + 1), in_shapes=f"{i % 3 + 1},16", in_dtypes="DT_BF16",
                   in_formats="ND", out_shapes="1,16") for i in range(23)]
    rows.insert(5, kd_row("Add", 9.0, in_shapes="1,16", in_dtypes="DT_BF16", in_formats="ND",
                          out_shapes="1,16", **twin))
    rows.insert(17, kd_row("Add", 9.0, in_shapes="1,16", in_dtypes="DT_BF16", in_formats="ND",
                           out_shapes="1,16", **twin))
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    parse(kd, tmp_path / "db1")
    summary = parse(kd, tmp_path / "db2", chunk_rows=2)
    assert summary.aggregate.skipped[SKIP_DUPLICATE] == 1
    strip = lambda rs: [{k: v for k, v in r.items() if k != "Profiling Updated"} for r in rs]  # noqa: E731
    assert strip(read_rows(tmp_path / "db1" / "Add.csv")) == \
        strip(read_rows(tmp_path / "db2" / "Add.csv"))
    per_slot = {}
    for r in rows:
        if r is rows[17]:
            continue
        per_slot.setdefault(r["Input Shapes"], []).append(float(r["Duration(us)"]))
    for row in read_rows(tmp_path / "db2" / "Add.csv"):
        assert_stats(row, per_slot[row["Input Shapes"]])


# -- skipped rows -------------------------------------------------------------------------------

def test_hccl_and_na_rows_are_skipped_and_counted_by_reason(tmp_path) -> None:
    rows = [
        kd_row("Add", 2.0, in_shapes="8,16;8,16", out_shapes="8,16"),
        hccl_row(), hccl_row(duration=2193.583),
        kd_row("N/A", 3.0, in_shapes="N/A", in_dtypes="N/A", in_formats="N/A", out_shapes="N/A",
               out_dtypes="N/A", out_formats="N/A", core="N/A"),
        kd_row("Cast", 1.0, in_shapes="N/A", in_dtypes="N/A", in_formats="N/A",
               out_shapes="N/A", out_dtypes="N/A"),
        kd_row("Add", "N/A", in_shapes="8,16;8,16", out_shapes="8,16"),
        kd_row("Add", "0", in_shapes="8,16;8,16", out_shapes="8,16"),
    ]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    summary = parse(kd, tmp_path / "db")
    skipped = summary.aggregate.skipped
    assert skipped[SKIP_HCCL] == 2
    assert skipped[SKIP_NO_TYPE] == 1
    assert skipped[SKIP_NO_SHAPE] == 1
    assert skipped[SKIP_BAD_DURATION] == 2
    text = summary.render()
    assert "skipped 6 rows" in text
    assert "2 HCCL" in text and "2 invalid duration" in text
    assert [p.name for p in (tmp_path / "db").glob("*.csv")] == ["Add.csv"]
    assert_stats(read_rows(tmp_path / "db" / "Add.csv")[0], [2.0])


def test_only_skipped_rows_write_nothing(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [hccl_row(), hccl_row()])
    summary = parse(kd, tmp_path / "db")
    assert summary.changes == []
    assert tree_digest(tmp_path / "db") == {}


# -- variants of the kernel table --------------------------------------------------------------

def test_cann7_header_without_op_state_and_other_counters(tmp_path) -> None:
    rows = [kd_row("Add", d, in_shapes="8,16;8,16", out_shapes="8,16",
                   counters={"aicore_time(us)": d - 0.5, "aic_mac_fp16_ratio": r,
                             "aic_cube_fops": 1000})
            for d, r in ((2.0, 0.25), (4.0, 0.75))]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows, CANN7_HEADER)
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert row["OP State"] == ""
    assert row["Accelerator Core"] == "AI_CORE"
    assert_stats(row, [2.0, 4.0])
    assert _num(row["Profiling Average aicore_time(us)"]) == pytest.approx(2.5)
    assert _num(row["Profiling Average aic_mac_fp16_ratio"]) == pytest.approx(0.5)
    assert _num(row["Profiling Average aic_cube_fops"]) == pytest.approx(1000)
    assert row["Profiling Average aiv_time(us)"] == ""      # a counter this CANN did not export
    header = read_header(tmp_path / "db" / "Add.csv")
    assert header.index("Profiling Average aic_mac_fp16_ratio") > 61   # after the contract


def test_header_without_hf32_eligible(tmp_path) -> None:
    header = tuple(h for h in FULL_HEADER if h != "HF32 Eligible")
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("Add", d, in_shapes="8,16", in_dtypes="DT_BF16",
                                      in_formats="ND", out_shapes="8,16") for d in (1.0, 2.0)],
                              header)
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert row["OP State"] == "dynamic"
    assert_stats(row, [1.0, 2.0])


@pytest.mark.parametrize("variant", [
    dict(), dict(bom=True), dict(crlf=True), dict(literal_quotes=False), dict(start_tab=False),
    dict(bom=True, crlf=True, literal_quotes=False),
])
def test_spelling_variants_give_the_same_database(tmp_path, variant) -> None:
    rows = [kd_row("MatMulV2", d, in_shapes=NK, counters={"aicore_time(us)": d / 2})
            for d in (185.504, 186.823, 190.544)]
    rows.append(kd_row("Add", 1.38, in_shapes=";", in_dtypes="FLOAT;FLOAT", out_shapes="",
                       out_dtypes="FLOAT"))
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows, **variant)
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "MatMulV2.csv")[0]
    assert row["Input Shapes"] == NK
    assert_stats(row, [185.504, 186.823, 190.544])
    assert _num(row["Profiling Average aicore_time(us)"]) == pytest.approx(
        sum((185.504, 186.823, 190.544)) / 6)
    add = read_rows(tmp_path / "db" / "Add.csv")[0]
    # slot counts kept; the scalar output as the profiler spells it, never an empty cell
    assert (add["Input Shapes"], add["Output Shapes"]) == (";", '""')


def test_tabs_after_any_number_are_tolerated(tmp_path) -> None:
    rows = [kd_row("Add", "12.5\t", in_shapes="8,16", in_dtypes="DT_BF16", in_formats="ND",
                   out_shapes="8,16", counters={"cube_utilization(%)": "3\t"}),
            kd_row("Add", "\t7.5", in_shapes="8,16", in_dtypes="DT_BF16", in_formats="ND",
                   out_shapes="8,16", counters={"cube_utilization(%)": "5"})]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert_stats(row, [12.5, 7.5])
    assert _num(row["Profiling Average cube_utilization(%)"]) == pytest.approx(4.0)


def test_rows_ending_with_an_extra_delimiter_are_not_shifted(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("Add", 2.0, in_shapes="8,16", in_dtypes="DT_BF16",
                                      in_formats="ND", out_shapes="8,16"),
                               kd_row("Add", 4.0, in_shapes="8,16", in_dtypes="DT_BF16",
                                      in_formats="ND", out_shapes="8,16")])
    lines = kd.read_text().splitlines()
    kd.write_text("\n".join([lines[0]] + [line + "," for line in lines[1:]]) + "\n")
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert row["Input Shapes"] == "8,16"
    assert_stats(row, [2.0, 4.0])


def test_several_files_in_a_directory_tree(tmp_path) -> None:
    prof = tmp_path / "prof"
    write_kernel_details(prof / "rank0" / "a_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                         "kernel_details.csv", [kd_row("Add", d, in_shapes="8,16;8,16",
                                                       out_shapes="8,16") for d in (1.0, 2.0)])
    write_kernel_details(prof / "rank1" / "b_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                         "kernel_details_1.csv",
                         [kd_row("Add", d, in_shapes="8,16;8,16", out_shapes="8,16",
                                 task=1) for d in (10.0,)], CANN7_HEADER, bom=True)
    write_kernel_details(prof / "rank2" / "kernel_details_2.csv",
                         [{"Step Id": "50", "Name": "Conv2D1", "Type": "N/A",
                           "Accelerator Core": "N/A", "Start Time(us)": "1.0",
                           "Duration(us)": "315.746", "Wait Time(us)": "0", "Block Dim": "0"}],
                         LEVEL0_HEADER)
    write_csv(prof / "rank0" / "a_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv",
              ["OP Type", "Count"], [["Add", "2"]])
    summary = parse(prof, tmp_path / "db")
    assert len(summary.aggregate.files) == 2
    assert [p.name for p in summary.aggregate.level0_files] == ["kernel_details_2.csv"]
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert_stats(row, [1.0, 2.0, 10.0])
    assert row["Profiling Source"] == "a_ascend_pt;b_ascend_pt"
    assert "level-0" in summary.render() and "no shapes" in summary.render()


def test_level0_only_says_there_is_nothing_to_aggregate(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [{"Step Id": "50", "Name": "hcom_allReduce__868_0_1", "Type": "N/A",
                                "Accelerator Core": "HCCL", "Start Time(us)": "17364.5",
                                "Duration(us)": "72994.438", "Wait Time(us)": "320.026",
                                "Block Dim": "0"}], LEVEL0_HEADER)
    summary = parse(kd, tmp_path / "db")
    text = summary.render()
    assert "level-0" in text and "no shapes to aggregate" in text
    assert summary.changes == []
    assert not (tmp_path / "db").exists()


# -- merge into an existing database ------------------------------------------------------------

EXISTING_HEADER = ["Owner", "OP State", "Accelerator Core", "Input Shapes", "Input Data Types",
                   "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
                   "Average Duration(us)", "Comment", "Profiling Average Duration(us)",
                   "Profiling Median Duration(us)", "Profiling Std Duration(us)",
                   "MicroBench aicore_time(us)", "Profiling Average aicore_time(us)",
                   "MicroBench Status"]


def _existing_db(db: Path) -> Path:
    rows = [
        # measured row, spelled the old way (quotes, spaces, FORMAT_ND, other orientation)
        {"Owner": "alice", "OP State": "static", "Accelerator Core": "AI_CORE",
         "Input Shapes": '"(128, 7168);(7168, 3584)"', "Input Data Types": "BF16;BF16",
         "Input Formats": "FORMAT_ND;FORMAT_ND", "Output Shapes": "128,3584",
         "Output Data Types": "BF16", "Output Formats": "ND", "Average Duration(us)": "41.50",
         "Comment": 'tuned, "by hand"', "Profiling Average Duration(us)": "99",
         "Profiling Median Duration(us)": "98", "Profiling Std Duration(us)": "1",
         "MicroBench aicore_time(us)": "39.0", "Profiling Average aicore_time(us)": "97",
         "MicroBench Status": "ok"},
        # a theory row: shapes only
        {"Owner": "grid", "Input Shapes": "4096,7168;3584,7168",
         "Input Data Types": "DT_BF16;DT_BF16", "Input Formats": "ND;ND",
         "Output Shapes": "4096,3584", "Output Data Types": "DT_BF16", "Output Formats": "ND"},
    ]
    return write_csv(db / "MatMulV2.csv", EXISTING_HEADER, rows)


PRESERVED = ["Owner", "OP State", "Accelerator Core", "Input Shapes", "Input Data Types",
             "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
             "Average Duration(us)", "Comment", "MicroBench aicore_time(us)", "MicroBench Status"]


def test_merge_updates_profiling_columns_and_nothing_else(tmp_path) -> None:
    db = tmp_path / "db"
    path = _existing_db(db)
    before = read_rows(path)
    rows = [kd_row("MatMulV2", d, in_shapes=NK, counters={"aicore_time(us)": d - 1})
            for d in (40.0, 44.0)]
    rows.append(kd_row("MatMulV2", 9.0, in_shapes="16,7168;3584,7168", out_shapes="16,3584"))
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    summary = parse(kd, db)
    assert (summary.rows_added, summary.rows_updated) == (1, 1)
    after = read_rows(path)
    header = read_header(path)
    assert [c for c in header if c in EXISTING_HEADER] == EXISTING_HEADER   # nothing moved
    assert header[:2] == ["Owner", "OP State"] and header[10] == "Comment"
    assert len(after) == 3
    for old, new in zip(before, after[:2]):
        assert {c: new[c] for c in PRESERVED} == {c: old[c] for c in PRESERVED}
    measured = after[0]
    assert_stats(measured, [40.0, 44.0])
    assert _num(measured["Profiling Average aicore_time(us)"]) == pytest.approx(41.0)
    assert after[1] == {**before[1], **{c: "" for c in header if c not in before[1]}}
    appended = after[2]
    assert (appended["Input Shapes"], appended["Owner"], appended["Average Duration(us)"]) == \
        ("16,7168;3584,7168", "", "")
    assert_stats(appended, [9.0])


def test_unknown_cells_survive_byte_for_byte(tmp_path) -> None:
    db = tmp_path / "db"
    path = _existing_db(db)
    raw_before = path.read_bytes()
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [kd_row("MatMulV2", 40.0)])
    parse(kd, db)
    raw_after = path.read_bytes()
    # the measured row's quoted cells are written exactly as they were
    assert b'alice,static,AI_CORE,"""(128, 7168);(7168, 3584)""",BF16;BF16,FORMAT_ND;FORMAT_ND' \
        in raw_before
    assert b'alice,static,AI_CORE,"""(128, 7168);(7168, 3584)""",BF16;BF16,FORMAT_ND;FORMAT_ND' \
        in raw_after
    assert b'41.50,"tuned, ""by hand""",' in raw_after
    # the theory row: the old line, plus empty cells for the new columns
    theory_before = raw_before.splitlines()[2]
    theory_after = raw_after.splitlines()[2]
    assert theory_after.startswith(theory_before) and set(theory_after[len(theory_before):]) == {44}


def test_rerunning_is_idempotent_in_row_count(tmp_path) -> None:
    db = tmp_path / "db"
    _existing_db(db)
    rows = [kd_row("MatMulV2", 40.0, in_shapes=KN), kd_row("Add", 2.0, in_shapes="8,16;8,16",
                                                         out_shapes="8,16")]
    kd = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    first = parse(kd, db)
    counts = {p.name: len(read_rows(p)) for p in db.glob("*.csv")}
    second = parse(kd, db)
    assert {p.name: len(read_rows(p)) for p in db.glob("*.csv")} == counts
    assert (first.rows_added, first.rows_updated) == (1, 1)
    assert (second.rows_added, second.rows_updated) == (0, 2)
    third = parse(kd, db)
    assert (third.rows_added, third.rows_updated) == (0, 2)


def test_a_new_column_from_profiling_goes_after_the_existing_ones(tmp_path) -> None:
    db = tmp_path / "db"
    path = _existing_db(db)
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("MatMulV2", 40.0, counters={"aic_mac_fp16_ratio": 0.5})],
                              CANN7_HEADER)
    parse(kd, db)
    header = read_header(path)
    assert [c for c in header if c in EXISTING_HEADER] == EXISTING_HEADER
    # not a contract column: after every column the file had
    assert header.index("Profiling Average aic_mac_fp16_ratio") > header.index("MicroBench Status")


def test_legacy_microbench_duration_is_migrated_on_rewrite(tmp_path) -> None:
    db = tmp_path / "db"
    header = [h if h != "Average Duration(us)" else "MicroBench Duration(us)"
              for h in EXISTING_HEADER]
    rows = [dict(zip(header, ["alice", "dynamic", "AI_CORE", NK, "DT_BF16;DT_BF16", "ND;ND",
                              "128,3584", "DT_BF16", "ND", "41.5"]))]
    path = write_csv(db / "MatMulV2.csv", header, rows)
    summary = parse(write_kernel_details(tmp_path / "kernel_details.csv",
                                         [kd_row("MatMulV2", 40.0)]), db)
    assert [c for c in read_header(path) if c in EXISTING_HEADER] == EXISTING_HEADER
    assert "MicroBench Duration(us)" not in read_header(path)
    row = read_rows(path)[0]
    assert row["Average Duration(us)"] == "41.5"
    assert row["Profiling Average Duration(us)"] == "40"
    assert "MicroBench Duration(us) -> Average Duration(us)" in summary.render()


def test_matmul_family_row_in_other_orientation_is_matched(tmp_path) -> None:
    db = tmp_path / "db"
    write_csv(db / "MatMulV3.csv", EXISTING_HEADER[1:9] + ["Average Duration(us)"],
              [["dynamic", "AI_CORE", KN, "DT_BF16;DT_BF16", "ND;ND", "128,3584", "DT_BF16", "ND",
                "33"]])
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("MatMulV3", 30.0, in_shapes=NK)])
    summary = parse(kd, db)
    assert (summary.rows_added, summary.rows_updated) == (0, 1)
    row = read_rows(db / "MatMulV3.csv")[0]
    assert (row["Input Shapes"], row["Average Duration(us)"]) == (KN, "33")
    assert_stats(row, [30.0])


def test_existing_rows_with_bad_cells_are_left_alone_and_noted(tmp_path) -> None:
    db = tmp_path / "db"
    write_csv(db / "Add.csv", EXISTING_HEADER[1:9] + ["Average Duration(us)"],
              [["dynamic", "AI_CORE", "8,x", "DT_BF16", "ND", "8,16", "DT_BF16", "ND", "3"]])
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("Add", 1.0, in_shapes="8,16;8,16", out_shapes="8,16")])
    summary = parse(kd, db)
    rows = read_rows(db / "Add.csv")
    assert rows[0]["Input Shapes"] == "8,x" and rows[0]["Average Duration(us)"] == "3"
    assert len(rows) == 2
    assert any("unparsable identity" in n for n in summary.notes)


def test_dry_run_writes_nothing(tmp_path) -> None:
    db = tmp_path / "db"
    _existing_db(db)
    before = tree_digest(db)
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [kd_row("MatMulV2", 40.0), kd_row("Add", 1.0, in_shapes="8,16",
                                                                in_dtypes="DT_BF16",
                                                                in_formats="ND",
                                                                out_shapes="8,16")])
    summary = parse(kd, db, dry_run=True)
    assert tree_digest(db) == before
    assert (summary.rows_added, summary.rows_updated) == (1, 1)
    assert "would write" in summary.render()


def test_dispatch_ffn_combine_ep_size(tmp_path) -> None:
    db = tmp_path / "db"
    ident = ["dynamic", "MIX_AIC", "16,7168;256,7168,2048", "DT_BF16;DT_INT8", "ND;ND",
             "16,7168", "DT_BF16", "ND"]
    write_csv(db / "DispatchFFNCombine.csv", EXISTING_HEADER[1:9] + ["EP Size",
                                                                      "Average Duration(us)"],
              [ident + ["8", "100"]])
    row = kd_row("DispatchFFNCombine", 90.0, in_shapes=ident[2], in_dtypes=ident[3],
                 out_shapes=ident[5], core="MIX_AIC")
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [row])
    summary = parse(kd, db, ep_size="8")
    assert (summary.rows_added, summary.rows_updated) == (0, 1)
    rows = read_rows(db / "DispatchFFNCombine.csv")
    assert rows[0]["EP Size"] == "8" and rows[0]["Average Duration(us)"] == "100"
    assert_stats(rows[0], [90.0])
    summary = parse(kd, db, ep_size="16")
    assert (summary.rows_added, summary.rows_updated) == (1, 0)
    assert [r["EP Size"] for r in read_rows(db / "DispatchFFNCombine.csv")] == ["8", "16"]
    summary = parse(kd, db)
    assert summary.rows_added == 1
    assert any("--ep-size" in n for n in summary.notes)


# -- FusedInferAttentionScore runtime metadata ---------------------------------------------------

FIA_DTYPES = ";".join(["DT_BF16"] * 3 + ["DT_UNDEFINED", "INT8", "INT64", "INT64"]
                      + ["DT_UNDEFINED"] * 7 + ["INT32"] + ["DT_UNDEFINED"] * 16)
FIA_FORMATS = ";".join(["ND"] * 3 + ["NULL"] + ["ND"] * 3 + ["NULL"] * 7 + ["ND"]
                       + ["NULL"] * 16)


def fia_shapes(tokens: int) -> str:
    """31 input slots of a paged attention call (the msmodeling fixture's layout)."""
    slots = [f"{tokens},4,128", "12307,128,128", "12307,128,128", "", "2048,2048",
             str(tokens), str(tokens)] + [""] * 7 + [f"{tokens},512"] + [""] * 16
    assert len(slots) == 31
    return ";".join(slots)


def fia_row(tokens: int, duration: float) -> dict[str, str]:
    return kd_row("FusedInferAttentionScore", duration, in_shapes=fia_shapes(tokens),
                  in_dtypes=FIA_DTYPES, in_formats=FIA_FORMATS, out_shapes=f"{tokens},4,128;",
                  out_dtypes="DT_BF16;FLOAT", out_formats="ND;ND", core="MIX_AIC")


def operator_shapes(tokens: int, heads: int, kv_heads: int) -> str:
    """Operator-level shapes as operator_details.csv writes them: `;` plus a line break."""
    slots = [f"{tokens},{heads},128", f"1024,128,{kv_heads * 128}",
             f"1024,128,{kv_heads * 128}", "", "2048,2048", "", ""] + [""] * 7 + \
        [f"{tokens},64"] + [""] * 16
    return ";\r\n".join(slots)


def write_operator_details(path: Path, calls: list[tuple[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["Name", "Input Shapes", "Call Stack", "Host Self Duration(us)",
                         "Host Total Duration(us)", "Device Self Duration(us)",
                         "Device Total Duration(us)"])
        writer.writerow(["aten::empty", ";\n;\n", "train.py(1): step", "66.25", "66.25", "0", "0"])
        for name, shapes in calls:
            writer.writerow([name, shapes, "model.py(7): forward", "10", "20", "55", "55"])
    return path


def test_fia_runtime_from_the_sibling_operator_details(tmp_path) -> None:
    out_dir = tmp_path / "run_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    kd = write_kernel_details(out_dir / "kernel_details.csv",
                              [fia_row(128, 58.0), fia_row(336, 60.0), fia_row(128, 62.0)])
    first = operator_shapes(128, 32, 4)
    write_operator_details(out_dir / "operator_details.csv", [
        ("npu::npu_fused_infer_attention_score", first),
        ("npu::npu_fused_infer_attention_score", operator_shapes(336, 16, 2)),
        ("aten::npu_fused_infer_attention_score", operator_shapes(128, 8, 8)),
    ])
    summary = parse(kd, tmp_path / "db")
    assert summary.notes == []
    rows = {r["Input Shapes"].split(";")[0]: r
            for r in read_rows(tmp_path / "db" / "FusedInferAttentionScore.csv")}
    assert set(rows) == {"128,4,128", "336,4,128"}
    small, large = rows["128,4,128"], rows["336,4,128"]
    assert_stats(small, [58.0, 62.0])
    assert len(small["Input Shapes"].split(";")) == 31
    # the first call of each signature, taken from the operator table
    assert small["Runtime num_heads"] == "32"
    assert small["Runtime num_key_value_heads"] == "4"
    assert small["Runtime input_layout"] == "TND"
    assert small["Runtime block_size"] == "128"
    assert small["Runtime block_table_shape"] == "128,64"
    assert small["Runtime kv_cache_mode"] == "paged_cache_pool"
    assert small["Runtime attn_state"] == "paged_runtime"
    assert small["Runtime source_profile"] == "run_ascend_pt"
    assert small["Runtime metadata_completeness"] == "inferred_only"
    assert small["Runtime operator_input_shapes_raw"] == first.replace("\r\n", "")
    assert small["Runtime actual_seq_lengths_values"] == ""   # not in either file
    # what the simulator matches on: one query token per request of a paged call is decode
    assert (small["Runtime phase"], small["Runtime batch_size"],
            small["Runtime cache_layout"]) == ("decode", "128", "PA_BSH")
    assert (small["Runtime topk"], small["Runtime quant_mode"],
            small["Runtime sparse_indices_pattern"]) == ("", "", "")
    assert (large["Runtime num_heads"], large["Runtime num_key_value_heads"]) == ("16", "2")


def test_fia_runtime_without_operator_details_comes_from_kernel_shapes(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [fia_row(128, 58.0)])
    parse(kd, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "FusedInferAttentionScore.csv")[0]
    assert (row["Runtime num_heads"], row["Runtime num_key_value_heads"]) == ("4", "1")
    assert row["Runtime block_size"] == "128"
    assert row["Runtime block_table_shape"] == "128,512"
    assert row["Runtime operator_input_shapes_raw"] == ""


def test_fia_runtime_count_mismatch_is_noted(tmp_path) -> None:
    kd = write_kernel_details(tmp_path / "kernel_details.csv",
                              [fia_row(128, 58.0), fia_row(336, 60.0)])
    write_operator_details(tmp_path / "operator_details.csv",
                           [("npu_fused_infer_attention_score", operator_shapes(128, 32, 4))])
    summary = parse(kd, tmp_path / "db")
    assert any("1 attention operator rows for 2 kernel rows" in n for n in summary.notes)
    rows = {r["Input Shapes"].split(";")[0]: r
            for r in read_rows(tmp_path / "db" / "FusedInferAttentionScore.csv")}
    assert rows["128,4,128"]["Runtime num_heads"] == "32"
    assert rows["336,4,128"]["Runtime num_heads"] == "4"     # unpaired: from the kernel row


def test_fia_runtime_never_overwrites_existing_cells(tmp_path) -> None:
    db = tmp_path / "db"
    header = EXISTING_HEADER[1:9] + ["Average Duration(us)", "Runtime num_heads",
                                     "Runtime input_layout"]
    write_csv(db / "FusedInferAttentionScore.csv", header,
              [["dynamic", "MIX_AIC", fia_shapes(128), FIA_DTYPES, FIA_FORMATS, "128,4,128;",
                "DT_BF16;FLOAT", "ND;ND", "57", "64", ""]])
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [fia_row(128, 58.0)])
    summary = parse(kd, db)
    assert (summary.rows_added, summary.rows_updated) == (0, 1)
    row = read_rows(db / "FusedInferAttentionScore.csv")[0]
    assert row["Runtime num_heads"] == "64"           # kept
    assert row["Runtime input_layout"] == "TND"       # was empty: filled
    assert row["Runtime num_key_value_heads"] == "1"  # new column: filled
    assert row["Average Duration(us)"] == "57"


def test_many_sources_are_summarised(tmp_path) -> None:
    prof = tmp_path / "prof"
    for rank in range(5):
        write_kernel_details(prof / f"r{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" /
                             "kernel_details.csv",
                             [kd_row("Add", 1.0 + rank, in_shapes="8,16", in_dtypes="DT_BF16",
                                     in_formats="ND", out_shapes="8,16")])
    parse(prof, tmp_path / "db")
    row = read_rows(tmp_path / "db" / "Add.csv")[0]
    assert row["Profiling Source"] == "r0_ascend_pt;r1_ascend_pt;r2_ascend_pt (+2 more)"
    assert_stats(row, [1.0, 2.0, 3.0, 4.0, 5.0])



def test_types_that_sanitise_to_one_file_name_are_refused(tmp_path) -> None:
    from pytest_npuperf.db.errors import NpuperfError

    profile = tmp_path / "kernel_details.csv"
    write_kernel_details(profile, [kd_row(type="a/b"), kd_row(type="a\\b")])
    db = tmp_path / "db"
    with pytest.raises(NpuperfError, match="would share the file a_b.csv"):
        parse(profile, db)
    assert not db.exists() or not any(db.glob("*.csv"))


def test_a_new_profile_replaces_the_old_aggregate_whole(tmp_path) -> None:
    db = tmp_path / "db"
    cann8 = write_kernel_details(tmp_path / "a" / "kernel_details.csv", [
        kd_row(duration=10.0, counters={"aicore_time(us)": 9.0, "aic_mac_ratio": 0.5})])
    parse(cann8, db)
    cann7 = write_kernel_details(tmp_path / "b" / "kernel_details.csv", [
        kd_row(duration=20.0, counters={"aicore_time(us)": 19.0, "aic_mac_fp16_ratio": 0.7})],
        header=CANN7_HEADER)
    parse(cann7, db)
    row = read_rows(db / "MatMulV2.csv")[0]
    assert row["Profiling Average Duration(us)"] == "20"
    assert row["Profiling Average aicore_time(us)"] == "19"
    assert row["Profiling Average aic_mac_ratio"] == ""  # not in the new profile: not kept
    assert row["Profiling Average aic_mac_fp16_ratio"] == "0.7"


def test_records_of_one_task_with_different_contexts_all_count(tmp_path) -> None:
    rows = [kd_row(duration=d, task=7, start="1736413971000070.000", **{"Context ID": c})
            for d, c in ((10.0, "0"), (12.0, "1"), (12.0, "1"))]  # the last is a re-export
    profile = write_kernel_details(tmp_path / "kernel_details.csv", rows)
    summary = parse(profile, tmp_path / "db")
    assert read_rows(tmp_path / "db" / "MatMulV2.csv")[0]["Profiling Count"] == "2"
    assert summary.aggregate.skipped[SKIP_DUPLICATE] == 1


def test_an_empty_input_shapes_cell_is_a_row_without_shapes(tmp_path) -> None:
    profile = write_kernel_details(tmp_path / "kernel_details.csv", [
        kd_row("MemSet", in_shapes="", in_dtypes="", in_formats="", out_shapes="",
               out_dtypes="", out_formats=""), kd_row()], literal_quotes=False)
    summary = parse(profile, tmp_path / "db")
    assert summary.aggregate.skipped[SKIP_NO_SHAPE] == 1
    assert not (tmp_path / "db" / "MemSet.csv").exists()


def test_older_spellings_are_written_as_current_profiler_output(tmp_path) -> None:
    """What the simulator matches: `FLOAT` not `DT_FLOAT`, `ND` not `FORMAT_ND`; the row
    is still the same row (signatures read both)."""
    kd = write_kernel_details(tmp_path / "kernel_details.csv", [
        kd_row("MatMulV2", d, in_shapes="8,128;64,128", in_dtypes="DT_FLOAT;DT_FLOAT",
               in_formats="FORMAT_ND;FORMAT_ND", out_shapes="8,64", out_dtypes="DT_FLOAT")
        for d in (1.0, 3.0)] + [
        kd_row("MatMulV2", 5.0, in_shapes="8,128;64,128", in_dtypes="FLOAT;FLOAT",
               in_formats="ND;ND", out_shapes="8,64", out_dtypes="FLOAT")])
    parse(kd, tmp_path / "db")
    [row] = read_rows(tmp_path / "db" / "MatMulV2.csv")
    assert (row["Input Data Types"], row["Input Formats"], row["Output Data Types"]) == (
        "FLOAT;FLOAT", "ND;ND", "FLOAT")
    assert_stats(row, [1.0, 3.0, 5.0])
