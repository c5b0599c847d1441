"""Profiled kernels -> cases (issue 10, items 2 and 5): real-format msprof output in every
documented layout and marker form, several PROF directories and devices, markers that
overlap, are missing or are cut at msprof's 156 bytes, and the no-marker fallback."""

from __future__ import annotations

import csv
import gc
import shutil
import statistics

import pytest

from pytest_npuperf.devices.mstx import mstx_message
from pytest_npuperf.ingest.msprof_tx import read_marker_file
from pytest_npuperf.ingest.op_summary import find_sources, read_kernels
from pytest_npuperf.measure.policy import METHOD_MSPROF, METHOD_MSPROF_ORDER
from pytest_npuperf.measure.result import STATUS_OK, STATUS_UNATTRIBUTED, CaseResult
from pytest_npuperf.profiling.profiled import attribute_results, gc_paused
from tests.msprof_standin import COUNTERS
from tests.profile_data import (
    OLD_OP_SUMMARY_HEADER,
    Kernel,
    Range,
    calls,
    prof_dir,
    summaries,
    write_markers,
    write_op_summary,
)

MM_SHAPES = ("16,64;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16", "ND")
T0 = 1_780_676_244_000_000.0  # us, the real sample's era


def case(case_id: str, kernel_type: str = "MatMulV2", *, calls: int | None = 4, warmup: int = 1,
         pid: int = 100, device: int = 0, launches: tuple[str, ...] | None = None,
         signature: str = "") -> CaseResult:
    profile = {"marker": mstx_message(case_id), "pid": pid, "device": device, "calls": calls,
               "warmup": warmup, "launches": list(launches) if launches else None}
    return CaseResult(case_id=case_id, nodeid=f"bench::t[{case_id}]", kernel_type=kernel_type,
                      file=f"{kernel_type}.csv", signature=signature, row=1, status=STATUS_OK,
                      method="events", profile=profile, bound_us=None)


def durations(kernels: list[Kernel]) -> list[float]:
    return [k.duration for k in kernels]


# -- the real CANN 8.3 sample --------------------------------------------------------------------
def test_real_cann83_op_summary_gives_a_case_its_kernel_statistics_and_counters(realdata,
                                                                                 tmp_path):
    sample = next((realdata / "op_summary").glob("*_op_summary_*.csv"))
    prof = prof_dir(tmp_path)
    output = prof / "mindstudio_profiler_output"
    output.mkdir()
    shutil.copy(sample, output / "op_summary_20260605161737.csv")
    with open(sample, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    starts = [float(r["Task Start Time(us)"]) for r in rows]
    write_markers(output / "msprof_tx_20260605161737.csv",
                  [Range("main_kernel-case-0000aaaa", starts[0] - 50, starts[-1] + 50)])
    result = case("main_kernel-case-0000aaaa", "main_kernel", calls=3, warmup=1)
    outcome = attribute_results([result], tmp_path)
    assert outcome.attributed == 1 and outcome.by_markers
    timed = [float(r["Task Duration(us)"]) for r in rows[1:]]  # the first call was the warmup
    assert result.status == STATUS_OK and result.method == METHOD_MSPROF
    assert result.stats.samples == 2
    assert result.stats.median == pytest.approx(statistics.median(timed))
    assert result.stats.mean == pytest.approx(statistics.fmean(timed))
    assert result.stats.std == pytest.approx(statistics.stdev(timed))
    assert set(result.counters) == set(COUNTERS)  # all 25, from the real columns
    for name in COUNTERS:
        assert result.counters[name] == pytest.approx(
            statistics.fmean(float(r[name]) for r in rows[1:])), name
    assert result.measured_kernel_type == "main_kernel"


# -- layouts and marker forms ------------------------------------------------------------------
def test_older_cann_per_device_summaries_with_model_name_and_ns_markers(tmp_path):
    """CANN <= 7: PROF_*/device_<id>/summary/op_summary_*.csv with Model Name / Infer ID and
    no Device_id column; markers in host/summary/msprof_tx.csv in ns."""
    prof = prof_dir(tmp_path)
    kernels = calls("RmsNorm", T0 + 100, 5, device=3)
    write_op_summary(prof / "device_3" / "summary" / "op_summary_3_1_1.csv", kernels,
                     OLD_OP_SUMMARY_HEADER)
    write_markers(prof / "host" / "summary" / "msprof_tx.csv",
                  [Range("RmsNorm-4x256-BF16-12345678", T0 + 50, T0 + 200, pid=7)], "cann6")
    table = read_kernels(find_sources(tmp_path))
    assert table.device.tolist() == [3] * 5  # from the directory name
    result = case("RmsNorm-4x256-BF16-12345678", "RmsNorm", calls=5, warmup=2, pid=7, device=3)
    attribute_results([result], tmp_path)
    assert result.status == STATUS_OK
    assert result.stats.median == pytest.approx(statistics.median(durations(kernels)[2:]))


@pytest.mark.parametrize("form", ["cann6", "cann8", "new"])
def test_every_documented_marker_form_reads_into_us_on_one_clock(tmp_path, form):
    path = write_markers(tmp_path / "msprof_tx.csv", [
        Range("a", T0 + 10, T0 + 20, pid=5, device=1, on_device=False),
        Range("b", T0 + 30, T0 + 40, pid=5, device=1, on_device=form == "new")], form)
    table = read_marker_file(path)
    assert table.message == ["a", "b"]
    assert table.start.tolist() == pytest.approx([T0 + 10, T0 + 30])
    assert table.end.tolist() == pytest.approx([T0 + 20, T0 + 40])  # device times when given
    assert table.pid.tolist() == [5, 5]
    if form == "new":
        assert table.device.tolist() == [-1, 1]  # host range, then a device-side one
        assert table.device_times.tolist() == [False, True]
    elif form == "cann8":
        assert table.device.tolist() == [1, 1]
    else:
        assert table.device.tolist() == [-1, -1]


def test_instant_marks_are_not_ranges_and_bad_numbers_are_one_line_errors(tmp_path):
    path = tmp_path / "msprof_tx.csv"
    path.write_text("Device_id,pid,tid,category,event_type,payload_type,payload_value,"
                    "Start_time(us),End_time(us),message_type,message\n"
                    "0,1,1,N/A,marker,N/A,N/A,5.0,5.0,N/A,step\n"
                    "0,1,1,N/A,start/end,N/A,N/A,6.0,9.0,N/A,case\n")
    assert read_marker_file(path).message == ["case"]
    path.write_text(path.read_text().replace("6.0,9.0", "6.0,soon"))
    from pytest_npuperf.db.errors import ContractError

    with pytest.raises(ContractError, match=r"row 2: End_time\(us\) 'soon' is not a number"):
        read_marker_file(path)


@pytest.mark.parametrize("end, expected", [
    (" 9.5\t", 9.5), ("9.5", 9.5), ("N/A", None), ("nan", None), ("1_000", "'1_000'")])
def test_marker_numbers_read_as_the_cell_says_or_fail_on_its_row(tmp_path, end, expected):
    """Plain columns take the quick path; padding, N/A (no such time: the row is no range)
    and texts a float() would take but the profiler never writes are decided as before."""
    from pytest_npuperf.db.errors import ContractError

    path = tmp_path / "msprof_tx.csv"
    path.write_text("Device_id,pid,tid,category,event_type,payload_type,payload_value,"
                    "Start_time(us),End_time(us),message_type,message\n"
                    "0,1,1,N/A,start/end,N/A,N/A,1.0,2.0,N/A,first\n"
                    f"0,1,1,N/A,start/end,N/A,N/A,6.0,{end},N/A,case\n")
    if isinstance(expected, str):
        with pytest.raises(ContractError, match=f"row 2: End_time\\(us\\) {expected} is not"):
            read_marker_file(path)
        return
    table = read_marker_file(path)
    assert table.message == (["first", "case"] if expected else ["first"])
    assert table.end.tolist() == ([2.0, expected] if expected else [2.0])


def test_newest_export_of_a_prof_directory_is_read_once(tmp_path):
    prof = prof_dir(tmp_path)
    summaries(prof, calls("Add", T0, 2), [Range("x", T0 - 1, T0 + 100)], stamp="20260101000000")
    summaries(prof, calls("Add", T0, 3), [Range("x", T0 - 1, T0 + 100)], stamp="20260202000000")
    sources = find_sources(tmp_path)
    assert len(read_kernels(sources)) == 3 and len(sources[0].ignored) == 2


# -- several PROF directories, devices, processes ------------------------------------------------
def test_concurrent_cases_on_two_devices_in_two_prof_directories(tmp_path):
    """Two xdist workers measured at the same wall time on devices 0 and 1; each PROF
    directory holds one process's data. Kernels go by device, markers by pid."""
    a = calls("MatMulV2", T0 + 10, 4, device=0, base=5.0)
    b = calls("MatMulV2", T0 + 12, 4, device=1, base=50.0)
    summaries(prof_dir(tmp_path / "w0", "PROF_1"), a, [Range("case-a", T0, T0 + 100, pid=11)])
    summaries(prof_dir(tmp_path / "w1", "PROF_2"), b, [Range("case-b", T0, T0 + 100, pid=22)],
              form="new")
    ra = case("case-a", pid=11, device=0)
    rb = case("case-b", pid=22, device=1)
    outcome = attribute_results([ra, rb], tmp_path)
    assert len(outcome.sources) == 2 and outcome.attributed == 2
    assert ra.stats.median == pytest.approx(statistics.median(durations(a)[1:]))
    assert rb.stats.median == pytest.approx(statistics.median(durations(b)[1:]))


def test_overlapping_missing_and_mismatched_markers_each_get_their_reason(tmp_path):
    kernels = (calls("MatMulV2", T0 + 10, 4) + calls("MatMulV2", T0 + 150, 4)
               + calls("MatMulV2", T0 + 410, 3) + calls("Cast", T0 + 610, 2)
               + calls("MatMulV2", T0 + 810, 4))
    summaries(prof_dir(tmp_path), kernels, [
        Range("overlap-1", T0, T0 + 200), Range("overlap-2", T0 + 140, T0 + 300),
        Range("short", T0 + 400, T0 + 500), Range("wrong-type", T0 + 600, T0 + 700),
        Range("fine", T0 + 800, T0 + 900)])
    results = [case(n) for n in ("overlap-1", "overlap-2", "short", "wrong-type", "fine",
                                 "missing")]
    outcome = attribute_results(results, tmp_path)
    reasons = {r.case_id: r.error for r in results}
    assert "overlaps another case's marker" in reasons["overlap-1"]
    assert "overlaps another case's marker" in reasons["overlap-2"]
    assert reasons["short"].startswith("count mismatch: 3 MatMulV2 kernel(s) inside its marker, "
                                       "4 call(s) made (1 warmup + 3 timed)")
    assert reasons["wrong-type"] == "no MatMulV2 or MatMulV3 or MatMulCommon kernel inside " \
                                    "its marker (saw Cast x2)"
    assert reasons["missing"] == "no mstx marker for this case in the profile"
    assert [r.status for r in results].count(STATUS_UNATTRIBUTED) == 5
    fine = results[4]
    assert fine.status == STATUS_OK and fine.stats.samples == 3
    assert outcome.attributed == 1 and outcome.unattributed == 5
    # An unattributed case keeps its own (events) timing and says which method that was.
    assert results[0].method == "events"


def test_two_family_members_in_one_marker_are_named_with_their_counts(tmp_path):
    kernels = (calls("MatMulV2", T0 + 10, 2) + calls("MatMulV3", T0 + 30, 2)
               + calls("MatMulV2", T0 + 210, 4))
    summaries(prof_dir(tmp_path), kernels, [Range("mixed", T0, T0 + 100),
                                            Range("single", T0 + 200, T0 + 300)])
    mixed, single = case("mixed"), case("single")
    attribute_results([mixed, single], tmp_path)
    assert mixed.status == STATUS_UNATTRIBUTED
    assert mixed.error == "several of its kernel types ran: MatMulV2 x2, MatMulV3 x2"
    assert single.status == STATUS_OK and single.measured_kernel_type == "MatMulV2"


def test_kernels_exported_out_of_launch_order_are_taken_by_start_time(tmp_path):
    """The order the table lists launches in does not matter: a case's warmup calls are its
    earliest, its samples kept in launch order."""
    first, second = calls("RmsNorm", T0 + 10, 4, base=1.0), calls("RmsNorm", T0 + 210, 4, base=11.0)
    shuffled = [second[2], first[3], first[0], second[0], first[2], second[3], first[1],
                second[1]]
    summaries(prof_dir(tmp_path), shuffled, [Range("a", T0, T0 + 100),
                                             Range("b", T0 + 200, T0 + 300)])
    a, b = case("a", "RmsNorm"), case("b", "RmsNorm")
    attribute_results([a, b], tmp_path)
    assert a.samples == durations(first)[1:] and b.samples == durations(second)[1:]
    assert (a.stats.min, b.stats.max) == (2.0, 14.0)


def test_markers_cut_at_156_bytes_still_find_their_cases_in_run_order(tmp_path):
    prefix = "FusedInferAttentionScore-" + "x".join(["1024"] * 40)
    first, second = f"{prefix}-BF16-aaaaaaaa", f"{prefix}-BF16-bbbbbbbb"
    assert mstx_message(first) == mstx_message(second)  # the cut hides what differs
    assert len(mstx_message(first).encode()) == 156
    k1 = calls("FusedInferAttentionScore", T0 + 10, 3, base=7.0)
    k2 = calls("FusedInferAttentionScore", T0 + 210, 3, base=70.0)
    # msprof may keep one byte less (a terminating NUL in its 156-byte field).
    summaries(prof_dir(tmp_path), k1 + k2, [
        Range(mstx_message(first), T0, T0 + 100),
        Range(mstx_message(second)[:155], T0 + 200, T0 + 300)])
    r1 = case(first, "FusedInferAttentionScore", calls=3)
    r2 = case(second, "FusedInferAttentionScore", calls=3)
    attribute_results([r1, r2], tmp_path)
    assert r1.stats.median == pytest.approx(statistics.median(durations(k1)[1:]))
    assert r2.stats.median == pytest.approx(statistics.median(durations(k2)[1:]))


def test_other_kernels_of_a_call_are_reported_never_added(tmp_path):
    main = calls("RmsNorm", T0 + 10, 5, step=20.0)
    casts = calls("Cast", T0 + 15, 5, step=20.0, base=100.0)
    summaries(prof_dir(tmp_path), main + casts, [Range("rms", T0, T0 + 200)])
    result = case("rms", "RmsNorm", calls=5, warmup=2)
    attribute_results([result], tmp_path)
    assert result.extra_kernels == {"Cast": 5}
    assert result.stats.max == pytest.approx(max(durations(main)))  # no cast in the samples
    assert result.stats.samples == 3


def test_matmul_row_learns_which_family_member_the_device_ran(tmp_path):
    summaries(prof_dir(tmp_path), calls("MatMulV3", T0 + 10, 4), [Range("mm", T0, T0 + 100)])
    result = case("mm", "MatMulV2")
    attribute_results([result], tmp_path)
    assert result.measured_kernel_type == "MatMulV3" and result.status == STATUS_OK


def test_the_old_vllm_ascend_indexer_kernel_is_its_rows_kernel(tmp_path):
    """vllm-ascend's `_C_ascend.npu_lightning_indexer` up to v0.20.2rc1 (the replay's
    fallback) launches LightningIndexerVllm: the LightningIndexer case gets its durations, its
    row stays a LightningIndexer row."""
    from pytest_npuperf.profiling.profiled import launches_of

    assert launches_of("LightningIndexer") == ("LightningIndexer", "LightningIndexerVllm")
    kernels = calls("LightningIndexerVllm", T0 + 10, 4)
    summaries(prof_dir(tmp_path), kernels, [Range("li", T0, T0 + 100)])
    result = case("li", "LightningIndexer")
    attribute_results([result], tmp_path)
    assert result.status == STATUS_OK and result.measured_kernel_type == "LightningIndexerVllm"
    assert result.stats.samples == 3 and result.file == "LightningIndexer.csv"


# -- without markers --------------------------------------------------------------------------
def test_without_markers_cases_take_their_kernels_by_order_type_and_shapes(tmp_path):
    """Old CANN without marker output: per device, in run order, each case takes the next
    `calls` kernels of its types whose shapes give its row's signature."""
    from pytest_npuperf.db.signature import short_hash, signature, signature_text

    other = ("8,128;64,128", "DT_FLOAT;DT_FLOAT", "ND;ND", "8,64", "DT_FLOAT", "ND")
    digest = {s: short_hash(signature_text(signature("MatMulV2", *s[:5]))) for s in
              (MM_SHAPES, other)}
    first = calls("MatMulV2", T0 + 10, 4, shapes=MM_SHAPES, base=5.0)
    noise = calls("Cast", T0 + 55, 2)
    second = calls("MatMulV3", T0 + 110, 3, shapes=other, base=40.0)
    summaries(prof_dir(tmp_path), first + noise + second, None)
    r1 = case("mm-a", signature=digest[MM_SHAPES])
    r2 = case("mm-b", calls=3, signature=digest[other])
    outcome = attribute_results([r1, r2], tmp_path)
    assert not outcome.by_markers
    assert r1.method == r2.method == METHOD_MSPROF_ORDER
    assert r1.stats.median == pytest.approx(statistics.median(durations(first)[1:]))
    assert r2.stats.median == pytest.approx(statistics.median(durations(second)[1:]))
    assert r2.measured_kernel_type == "MatMulV3"
    assert any("matched to cases by launch order" in n for n in outcome.notes)


def test_a_level0_or_foreign_directory_is_a_one_line_error(tmp_path):
    from pytest_npuperf.db.errors import NpuperfError

    (tmp_path / "empty").mkdir()
    with pytest.raises(NpuperfError, match="no profiler output found"):
        find_sources(tmp_path / "empty")
    bad = tmp_path / "x" / "op_summary_20260101000000.csv"
    bad.parent.mkdir()
    bad.write_text("Device_id,OP Type,Task Start Time(us),Task Duration(us)\n0,Add,1.0,oops\n")
    with pytest.raises(NpuperfError, match=r"row 1, column 'Task Duration\(us\)'"):
        read_kernels(find_sources(tmp_path / "x"))


def test_counts_in_a_large_profile_are_exact(tmp_path):
    """Many cases, vectorised: each case's statistics equal the single-case functions'."""
    kernels, ranges, results = [], [], []
    for i in range(60):
        begin = T0 + i * 1000
        mine = calls("Add", begin + 10, 6, base=1.0 + i, step=7.0)
        for j, k in enumerate(mine):
            k.duration = 1.0 + i + (j * 37 % 11) / 10
        kernels += mine
        ranges.append(Range(f"add-{i}", begin, begin + 100))
        results.append(case(f"add-{i}", "Add", calls=6, warmup=1))
    summaries(prof_dir(tmp_path), kernels, ranges)
    attribute_results(results, tmp_path)
    from pytest_npuperf.measure.stats import relative_precision, summarize

    for i, result in enumerate(results):
        timed = [k.duration for k in kernels[i * 6 + 1:(i + 1) * 6]]
        expected = summarize(timed).to_dict()
        assert result.stats.to_dict() == pytest.approx(expected, rel=1e-12)
        assert result.precision == pytest.approx(relative_precision(timed, "median"))




def test_a_launch_exported_twice_is_counted_once(tmp_path):
    kernels = calls("Add", T0 + 10, 4)
    twin = Kernel("Add", kernels[2].start, kernels[2].duration, task=kernels[2].task or 2)
    kernels[2].task = twin.task
    summaries(prof_dir(tmp_path), [*kernels, twin], [Range("add", T0, T0 + 100)])
    result = case("add", "Add", calls=4, warmup=1)
    attribute_results([result], tmp_path)
    assert result.status == STATUS_OK and result.stats.samples == 3


def test_results_built_before_the_process_leaves_are_kept_out_of_the_collectors_way():
    """gc_paused: no collection while a large run's results are built; leaving, they are
    frozen (gc.freeze) so the next collection does not traverse them all at once; otherwise
    the collector takes them back as it was."""
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    try:
        with gc_paused():
            assert not gc.isenabled()
            built = [{"case": i} for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() == frozen
        with gc_paused(leaving=True):
            built = [{"case": i} for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() >= frozen + len(built)
    finally:
        gc.unfreeze()
