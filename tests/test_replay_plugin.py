"""The replay harness end to end: rows become cases, cases are measured, results are
backfilled at session finish, reports are written, faults stay contained."""

from __future__ import annotations

import html
import json
import os
import re

import pandas as pd
import pytest

# In-process pytester runs drop the modules first imported inside them when they end, and torch
# cannot be imported twice into one process: it is imported here, before any run replays a case.
import torch  # noqa: F401

from pytest_npuperf.db.lock import database_lock
from pytest_npuperf.db.signature import short_hash
from pytest_npuperf.db.table import read_table
from pytest_npuperf.db.upsert import row_signatures
from pytest_npuperf.harness.options import DEFAULT_DB
from tests.replay_project import (
    BENCH,
    DEVICE,
    FAST,
    MATMUL_ROWS,
    VERSION,
    cells,
    default_tables,
    run_json,
    tree_digest,
    write_db,
)

ID_RE = re.compile(r"^[A-Za-z0-9_]+-[0-9x]+-[A-Z0-9_]+-[0-9a-f]{8}$")


@pytest.fixture
def project(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", default_tables(), extra_columns=("Notes",))
    return pytester, db


def run(pytester, db, *args, out=None):
    out = out or pytester.path / "out"
    return pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out),
                              *FAST, *args)


def collected_ids(result) -> list[str]:
    return [m.group(1) for line in result.outlines
            if (m := re.search(r"test_kernel\[(.+?)\]", line))]


def cpu_db(out):
    dbs = list(out.glob(f"CPU_*/vllm_ascend/{VERSION}"))
    assert len(dbs) == 1, dbs
    return dbs[0]


# -- cases from rows ----------------------------------------------------------------------------
def test_every_row_is_a_case_with_readable_stable_ids(project):
    pytester, db = project
    first = run(pytester, db, "--collect-only", "-q")
    ids = collected_ids(first)
    assert not (pytester.path / "out").exists()  # collecting writes nothing
    assert len(ids) == 4
    assert all(ID_RE.match(i) for i in ids), ids
    assert any(i.startswith("MatMulV2-16x64x32-BF16-") for i in ids)
    assert any(i.startswith("RmsNorm-4x256-BF16-") for i in ids)
    assert collected_ids(run(pytester, db, "--collect-only", "-q")) == ids


def test_keyword_and_marker_selection(project):
    pytester, db = project
    ids = collected_ids(run(pytester, db, "--collect-only", "-q", "-k", "MatMul"))
    assert len(ids) == 2 and all(i.startswith("MatMulV2") for i in ids)
    ids = collected_ids(run(pytester, db, "--collect-only", "-q", "-k", "RmsNorm and BF16"))
    assert len(ids) == 1 and ids[0].startswith("RmsNorm")
    ids = collected_ids(run(pytester, db, "--collect-only", "-q", "-m", "RmsNorm"))
    assert len(ids) == 1
    ids = collected_ids(run(pytester, db, "--collect-only", "-q", "-k", "FLOAT"))
    assert len(ids) == 1 and "-FLOAT-" in ids[0]


def test_rows_without_a_replay_are_skipped_with_the_reason_and_kept(project):
    pytester, db = project
    result = run(pytester, db, "-rs")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(["*no replay for Unreplayable yet*"])
    copy = read_table(cpu_db(pytester.path / "out") / "Unreplayable.csv")
    assert len(copy) == 1 and copy["Input Shapes"].tolist() == ["8,16"]


# -- device isolation and backfill ---------------------------------------------------------------
def test_cpu_run_writes_its_own_database_and_leaves_the_source_byte_identical(project):
    pytester, db = project
    before = tree_digest(db)
    result = run(pytester, db)
    result.assert_outcomes(passed=3, skipped=1)
    assert tree_digest(db) == before
    out = pytester.path / "out"
    target = cpu_db(out)
    assert sorted(p.name for p in target.glob("*.csv")) == sorted(p.name for p in db.glob("*.csv"))
    matmul = read_table(target / "MatMulV2.csv")
    assert len(matmul) == 2
    # Measurement columns of the Ascend rows are not carried into the CPU database.
    assert matmul["Profiling Average Duration(us)"].tolist() == ["", ""]
    report = run_json(out)
    cases = {c["signature"]: c for c in report["cases"] if c["file"] == "MatMulV2.csv"}
    signatures, _ = row_signatures(matmul, "MatMulV2")
    for (_, row), sig in zip(matmul.iterrows(), signatures):
        case = cases[short_hash(sig)]
        stats = case["stats"]
        # The median by default.
        assert case["statistic"] == row["MicroBench Statistic"] == "median"
        assert case["value"] == stats["median"]
        assert case["status"] == "ok"
        assert float(row["Average Duration(us)"]) == pytest.approx(stats["median"], rel=1e-6)
        assert row["MicroBench Status"].startswith("ok")  # "ok (a note)" on a busy box
        assert float(row["MicroBench Median Duration(us)"]) == pytest.approx(stats["median"],
                                                                             rel=1e-6)
        assert float(row["MicroBench Mean Duration(us)"]) == pytest.approx(stats["mean"], rel=1e-6)
        assert int(row["MicroBench Samples"]) == stats["samples"] >= 3
        assert int(row["MicroBench Outliers"]) == stats["outliers"]
        assert float(row["MicroBench Precision"]) == pytest.approx(case["precision"], rel=1e-6)
        assert row["MicroBench Stop Reason"] == case["stop_reason"] in (
            "precision reached", "time budget", "max samples")
        assert row["MicroBench Method"] == "events"
        assert row["MicroBench Device"].startswith("CPU_")
        assert row["MicroBench Run Id"] == report["run_id"]
        assert f"threads {case['threads']}" in row["MicroBench Stack"]
    assert matmul.columns[-1] == "Notes"  # unknown columns keep their place
    # One duty cycle: the terminal prints the figures the run JSON holds. An in-process run
    # is not its process's first pytest run: its clock starts at its configure.
    totals = report["totals"]
    assert report["session"]["wall_from"] == "pytest configure"
    assert totals["duty_cycle"] == pytest.approx(
        totals["time_in_calls_s"] / totals["session_wall_s"])
    result.stdout.fnmatch_lines([
        f"duty cycle {totals['duty_cycle']:.2f}: {totals['time_in_calls_s']:.2f} s inside "
        f"measured calls of {totals['session_wall_s']:.2f} s wall time since pytest configure; "
        f"overhead {1e3 * totals['per_case_overhead_s']:.0f} ms per case",
        f"overhead {totals['overhead_s']:.2f} s ({1e3 * totals['per_case_overhead_s']:.1f} ms "
        f"per case): start-up *"])
    # One overhead: every second outside the timed calls, its parts adding up to it.
    parts = totals["overhead_parts_s"]
    assert totals["overhead_s"] == pytest.approx(
        totals["session_wall_s"] - totals["time_in_calls_s"])
    assert sum(parts.values()) == pytest.approx(totals["overhead_s"])
    assert {"start-up", "inputs", "warm-up calls", "references", "between cases",
            "database write", "history", "reports"} <= set(parts)
    assert all(parts[name] > 0 for name in ("start-up", "inputs", "database write"))
    assert parts["inputs"] + parts["warm-up calls"] <= sum(
        c["wall_s"] - c["time_in_calls_s"] for c in report["cases"])


def test_native_run_backfills_the_source_and_writes_reports_beside_it(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"MatMulV2": MATMUL_ROWS}, device="CPU_TESTBOX",
                  extra_columns=("Notes",))
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-device-name",
                                "CPU_TESTBOX", *FAST)
    result.assert_outcomes(passed=2)
    table = read_table(db / "MatMulV2.csv")
    assert all(float(v) > 0 for v in table["Average Duration(us)"])
    assert table["Profiling Average Duration(us)"].tolist() == ["0.001", ""]
    reports = sorted(p.name for p in (db / "reports").iterdir())
    assert any(re.fullmatch(r"replay_report_\d{8}_\d{6}\.md", n) for n in reports)
    assert any(re.fullmatch(r"duration_gap_\d{8}_\d{6}\.csv", n) for n in reports)
    assert any(re.fullmatch(r"run_\d{8}_\d{6}\.json", n) for n in reports)
    gap = pd.read_csv(next((db / "reports").glob("duration_gap_*.csv")))
    assert list(gap.columns) == ["Operator", "CSV Name", "MicroBench(us)", "Profiling(us)",
                                 "Abs Diff(us)", "MB/Profile", "Shape"]
    assert len(gap) == 1 and gap["Operator"][0] == "MatMulV2"  # replay >> 0.001 us profiled
    result.stdout.fnmatch_lines(["*npuperf*", "*duty cycle*", "*MatMulV2*"])


def test_dry_run_measures_and_writes_nothing(project):
    pytester, db = project
    before = tree_digest(pytester.path)
    result = run(pytester, db, "--npuperf-dry-run")
    result.assert_outcomes(passed=3, skipped=1)
    assert not (pytester.path / "out").exists()
    after = {k: v for k, v in tree_digest(pytester.path).items() if "__pycache__" not in k}
    assert after == {k: v for k, v in before.items() if "__pycache__" not in k}


def test_missing_only_skips_rows_that_have_a_duration(project):
    pytester, db = project
    run(pytester, db, "-k", "RmsNorm").assert_outcomes(passed=1)
    ids = collected_ids(run(pytester, db, "--collect-only", "-q", "--npuperf-update-mode",
                            "missing-only"))
    assert not any(i.startswith("RmsNorm") for i in ids)  # measured on this CPU already
    assert sum(i.startswith("MatMulV2") for i in ids) == 2  # 12.5 us is Ascend's, not ours


def test_options_are_read_from_ini(project):
    pytester, db = project
    pytester.makeini(f"[pytest]\nnpuperf_db = {db}\nnpuperf_update_mode = missing-only\n"
                     f"npuperf_out = {pytester.path / 'ini-out'}\n")
    result = pytester.runpytest("bench", *FAST, "-k", "MatMul")
    result.assert_outcomes(passed=2)
    assert cpu_db(pytester.path / "ini-out")


# -- faults ---------------------------------------------------------------------------------------
FAULTY_CONFTEST = '''
import time
import torch
from pytest_npuperf.kernels.registry import register
from pytest_npuperf.kernels.spec import KernelSpec, SlotLayout


class Boom(KernelSpec):
    kernel_type = "BoomKernel"
    inputs = (SlotLayout("x"),)
    outputs = (SlotLayout("y"),)
    npu_api = "none"

    def build_inputs(self, case, backend, generator):
        return {"x": self.tensor(case, 0, backend, generator)}

    def portable_call(self, tensors, case):
        def boom():
            raise RuntimeError("kernel exploded on purpose")
        return boom

    npu_call = portable_call


class Sleepy(Boom):
    kernel_type = "SleepyKernel"

    def portable_call(self, tensors, case):
        return lambda: time.sleep(5)


class Interrupting(Boom):
    kernel_type = "InterruptKernel"

    def portable_call(self, tensors, case):
        def stop():
            raise KeyboardInterrupt
        return stop


class Jittery(Boom):
    """Every other call is held up five times as long: two regimes, as on a busy machine."""
    kernel_type = "JitteryKernel"

    def portable_call(self, tensors, case):
        calls = iter(range(10**9))
        return lambda: time.sleep(0.0002 if next(calls) % 2 else 0.001)


for spec in (Boom, Sleepy, Interrupting, Jittery):
    register(spec)
'''


def faulty_project(pytester, kernel_type):
    pytester.makepyfile(**{"bench/test_kernels": BENCH, "bench/conftest": FAULTY_CONFTEST})
    tables = default_tables()
    tables[kernel_type] = [cells("4,8", "DT_FLOAT", "ND", "4,8", "DT_FLOAT")]
    return write_db(pytester.path / "db", tables)


def test_a_kernel_that_raises_fails_its_case_and_the_session_goes_on(pytester):
    db = faulty_project(pytester, "BoomKernel")
    result = run(pytester, db)
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*kernel exploded on purpose*"])
    table = read_table(cpu_db(pytester.path / "out") / "BoomKernel.csv")
    assert len(table) == 1
    assert table["MicroBench Status"][0].startswith("failed: RuntimeError: kernel exploded")
    assert table["Average Duration(us)"][0] == ""


def test_prune_keeps_rows_that_failed_and_rows_without_a_replay(pytester):
    """Issue 8: prune used to delete the row of a failed case, which promises to keep it."""
    db = faulty_project(pytester, "BoomKernel")
    result = run(pytester, db, "--npuperf-prune-empty-duration-rows")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    target = cpu_db(pytester.path / "out")
    boom = read_table(target / "BoomKernel.csv")
    assert len(boom) == 1 and boom["MicroBench Status"][0].startswith("failed")
    assert len(read_table(target / "Unreplayable.csv")) == 1  # no replay yet: kept
    assert len(read_table(target / "MatMulV2.csv")) == 2


def test_a_case_inconsistent_with_a_quiet_machine_is_noisy_and_stores_no_latency(pytester):
    db = faulty_project(pytester, "JitteryKernel")
    result = run(pytester, db, "-k", "Jittery", "--npuperf-min-samples", "20",
                 "--npuperf-max-samples", "40")
    result.assert_outcomes(passed=1)  # measured: the case passes, the number is flagged
    row = read_table(cpu_db(pytester.path / "out") / "JitteryKernel.csv").iloc[0]
    assert row["MicroBench Status"].startswith("noisy: median ")
    assert "interquartile range" in row["MicroBench Status"]
    assert row["Average Duration(us)"] == ""
    assert float(row["MicroBench Median Duration(us)"]) > 0
    assert int(row["MicroBench Samples"]) >= 20
    result.stdout.fnmatch_lines(["*1 noisy*", "warning: 1 case(s) noisy: samples inconsistent "
                                 "with a quiet machine, kept out of Average Duration(us)"])


def test_a_case_past_the_timeout_fails_and_the_session_goes_on(pytester):
    db = faulty_project(pytester, "SleepyKernel")
    result = run(pytester, db, "--npuperf-case-timeout", "0.5")
    result.assert_outcomes(passed=3, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*timeout*"])
    table = read_table(cpu_db(pytester.path / "out") / "SleepyKernel.csv")
    assert table["MicroBench Status"][0].startswith("timeout")


def test_an_interrupted_session_leaves_every_database_as_it_was(pytester):
    db = faulty_project(pytester, "InterruptKernel")
    before = tree_digest(db)
    # In-process, with the interrupt kept inside the inner run (not raised into this session).
    result = pytester.runpytest_inprocess("bench", "--npuperf-db", str(db), "--npuperf-out",
                                          str(pytester.path / "out"), *FAST,
                                          no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert tree_digest(db) == before
    assert not list((pytester.path / "out").glob("CPU_*/vllm_ascend/*/*.csv"))


def test_a_malformed_cell_errors_its_case_naming_file_row_and_column(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    rows = [*MATMUL_ROWS, cells("16,6x4;32,64", "DT_BF16;DT_BF16", "ND;ND", "16,32", "DT_BF16")]
    db = write_db(pytester.path / "db", {"MatMulV2": rows})
    result = run(pytester, db)
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*MatMulV2.csv, row 3, column 'Input Shapes'*6x4*"])
    table = read_table(cpu_db(pytester.path / "out") / "MatMulV2.csv")
    assert len(table) == 3 and table["Input Shapes"][2] == "16,6x4;32,64"
    assert table["MicroBench Status"][2].startswith("error: ")
    assert "row 3, column 'Input Shapes'" in table["MicroBench Status"][2]


def test_a_read_only_database_is_an_error_before_any_case_runs(project):
    pytester, db = project
    blocker = pytester.path / "not-a-dir"
    blocker.write_text("a file where the output directory should be")
    result = run(pytester, db, out=blocker / "out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot write" in "\n".join(result.errlines + result.outlines)
    assert not any("PASSED" in line for line in result.outlines)


@pytest.mark.slow
def test_a_read_only_database_is_an_error_before_any_case_runs_under_xdist(project):
    pytester, db = project
    blocker = pytester.path / "not-a-dir"
    blocker.write_text("a file where the output directory should be")
    result = pytester.runpytest_inprocess("bench", "--npuperf-db", str(db), "--npuperf-out",
                                          str(blocker / "out"), *FAST, "-n", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "cannot write" in "\n".join(result.errlines + result.outlines)
    assert not any("PASSED" in line or "passed" in line for line in result.outlines)


def test_a_second_writer_is_refused(project):
    pytester, db = project
    target_parent = pytester.path / "out"
    run(pytester, db, "-k", "RmsNorm").assert_outcomes(passed=1)
    with database_lock(cpu_db(target_parent), "another session"):
        result = run(pytester, db, "-k", "RmsNorm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "being written by" in "\n".join(result.errlines + result.outlines)


# -- methods and integrations --------------------------------------------------------------------
def test_profiler_method_records_device_time_per_call(project):
    pytester, db = project
    result = run(pytester, db, "-k", "MatMul", "--npuperf-method", "profiler")
    result.assert_outcomes(passed=2)
    report = run_json(pytester.path / "out")
    cases = [c for c in report["cases"] if c["status"] in ("ok", "noisy")]
    assert len(cases) == 2 and all(c["method"] == "profiler" for c in cases)
    assert all(c["stats"]["samples"] >= 3 and c["stats"]["min"] > 0 for c in cases)
    table = read_table(cpu_db(pytester.path / "out") / "MatMulV2.csv")
    assert set(table["MicroBench Method"]) == {"profiler"}


@pytest.mark.slow
@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["serial", "xdist"])
def test_pytest_benchmark_json_covers_the_cases(project, xdist):
    """Written by the process that receives every result (the xdist controller too), with
    no 'Benchmark fixture was not used' warning."""
    pytester, db = project
    target = pytester.path / "bench.json"
    result = run(pytester, db, "-k", "MatMul", f"--benchmark-json={target}", *xdist)
    result.assert_outcomes(passed=2)
    output = result.stdout.str() + result.stderr.str()
    assert "not used" not in output and "PytestBenchmarkWarning" not in output
    assert "automatically disabled" not in output
    data = json.loads(target.read_text())
    names = [b["name"] for b in data["benchmarks"]]
    assert len(names) == 2 and all("MatMulV2" in n for n in names)
    report = {c["case_id"]: c for c in run_json(pytester.path / "out")["cases"]}
    for bench in data["benchmarks"]:
        case = report[bench["param"]]
        assert bench["stats"]["rounds"] == case["stats"]["samples"]
        assert bench["stats"]["median"] == pytest.approx(case["stats"]["median"] / 1e6, rel=1e-6)
        assert bench["extra_info"]["npuperf_method"] == "events"
        assert bench["group"] == "MatMulV2" and bench["fullname"].endswith(f"[{bench['param']}]")


def test_pytest_html_rows_show_statistics_and_a_plot(project):
    pytester, db = project
    page = pytester.path / "report.html"
    run(pytester, db, "-k", "MatMul", f"--html={page}", "--self-contained-html")
    text = html.unescape(page.read_text())  # rows and extras travel in an escaped JSON blob
    assert "Median (us)" in text and "<svg" in text
    assert "duty cycle" in text.lower()


@pytest.mark.slow
def test_xdist_workers_give_the_serial_result(project):
    pytester, db = project
    serial_out, parallel_out = pytester.path / "serial", pytester.path / "parallel"
    common = ["bench", "--npuperf-db", str(db), *FAST]
    # Both in-process: xdist's workers are processes of their own either way.
    pytester.runpytest_inprocess(*common, "--npuperf-out", str(serial_out)).assert_outcomes(
        passed=3, skipped=1)
    pytester.runpytest_inprocess(*common, "--npuperf-out", str(parallel_out), "-n", "2",
                                 ).assert_outcomes(passed=3, skipped=1)
    for name in ("MatMulV2.csv", "RmsNorm.csv", "Unreplayable.csv"):
        serial = read_table(cpu_db(serial_out) / name)
        parallel = read_table(cpu_db(parallel_out) / name)
        assert list(serial.columns) == list(parallel.columns)
        same = [c for c in serial.columns if not c.startswith("MicroBench")
                and c != "Average Duration(us)"]
        assert serial[same].equals(parallel[same])
        # Every row measured alike; whether this busy box let a case look quiet is its own
        # business (a noisy case keeps its statistics, not a stored latency).
        assert [_outcome(s) for s in serial["MicroBench Status"]] == \
            [_outcome(s) for s in parallel["MicroBench Status"]]
        assert (serial["MicroBench Median Duration(us)"] != "").tolist() == \
            (parallel["MicroBench Median Duration(us)"] != "").tolist()
    parallel_run = run_json(parallel_out)
    assert parallel_run["session"]["workers"] == 2
    # The two workers split this host's cores (on 2 cores, one intra-op thread each); a serial
    # run has them all.
    cores = len(os.sched_getaffinity(0))
    assert {c["threads"] for c in parallel_run["cases"] if c["stats"]} == {max(1, cores // 2)}
    assert {c["threads"] for c in run_json(serial_out)["cases"] if c["stats"]} == {cores}


def _outcome(status: str) -> str:
    """measured (ok or noisy), or the status of a case that was not measured."""
    word = status.split(":")[0].split(" (")[0]
    return "measured" if word in ("ok", "noisy") else word


@pytest.mark.slow
def test_grid_points_become_cases_and_no_database_is_written(pytester):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    out = pytester.path / "out"
    result = pytester.runpytest("bench", "--npuperf-grid", "embedded_db", "-k", "SwiGlu",
                                "--npuperf-out", str(out), *FAST)
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 4 and "failed" not in outcomes
    ids = collected_ids(pytester.runpytest("bench", "--npuperf-grid", "embedded_db",
                                           "--collect-only", "-q", "-m", "SwiGlu", *FAST))
    assert all(ID_RE.match(i) and i.startswith("SwiGlu-") for i in ids)
    assert not list(out.glob("CPU_*"))  # grid points go into no database
    report = run_json(out)
    by_status = report["totals"]["by_status"]
    assert by_status["ok"] + by_status["noisy"] == outcomes["passed"]
    result.stdout.fnmatch_lines(["*no database written*"])


@pytest.mark.parametrize("option", ["--npuperf-grid", "--npuperf-db"])
def test_a_missing_grid_config_or_database_stops_collection_with_a_clear_error(pytester,
                                                                              option):
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    result = pytester.runpytest("bench", option, str(pytester.path / "nope"), *FAST)
    # Issue 8: a usage error is one line (it used to be a collection traceback).
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.strip()]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {option}: "), errors
    assert "nope" in errors[0] and "Traceback" not in result.stdout.str()
    assert "passed" not in result.stdout.str()


NPU_STANDIN_CONFTEST = '''
import pytest_npuperf.harness.context as session
from pytest_npuperf.devices import CpuBackend


class NpuStandIn(CpuBackend):
    """Reports itself as an NPU; computes on the host (the real backend needs CANN)."""
    kind = "npu"

    def device_name(self):
        return "SOC_NAME"


_select = session.select_backend


def pytest_configure(config):
    session.select_backend = lambda kind, index, name: NpuStandIn(index or 0, name)


def pytest_unconfigure(config):  # the run is in-process: leave the module as it was
    session.select_backend = _select
'''


def test_on_an_npu_the_ascend_database_is_its_own_and_is_updated_in_place(project):
    pytester, db = project
    pytester.makeconftest(NPU_STANDIN_CONFTEST.replace("SOC_NAME", "Ascend910_9382"))
    result = run(pytester, db, "-k", "MatMul")
    result.assert_outcomes(passed=2)
    table = read_table(db / "MatMulV2.csv")
    assert all(float(v) > 0 for v in table["Average Duration(us)"])
    assert set(table["MicroBench Device"]) == {DEVICE}
    assert table["Profiling Average Duration(us)"][0] == "0.001"  # its own profile stays
    assert list((db / "reports").glob("run_*.json"))
    # Nothing in the output directory but the run history (default <out>/history.sqlite) and
    # the host's measured peaks (the stand-in computes on the host's CPU).
    assert sorted(p.name for p in (pytester.path / "out").iterdir()) == ["history.sqlite",
                                                                         "peaks"]


@pytest.mark.slow
def test_the_embedded_default_database_replays_on_this_cpu_and_stays_unchanged(pytester):
    embedded = DEFAULT_DB
    before = tree_digest(embedded)
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    out = pytester.path / "out"
    result = pytester.runpytest("bench", "--npuperf-db", str(embedded), "--npuperf-out",
                                str(out), *FAST, "--npuperf-warmup", "0",
                                "--npuperf-min-samples", "1", "--npuperf-max-samples", "1")
    outcomes = result.parseoutcomes()
    assert "failed" not in outcomes and "error" not in outcomes, result.stdout.str()[-3000:]
    assert outcomes["passed"] >= 100
    assert tree_digest(embedded) == before
    copy = cpu_db(out)
    assert sorted(p.name for p in copy.glob("*.csv")) == sorted(p.name for p in embedded.glob("*.csv"))


@pytest.mark.parametrize("named", [False, True], ids=["default", "named"])
def test_the_embedded_database_is_package_data_even_on_its_own_npu(pytester, named):
    """The embedded database lives inside the package, which its own device reads like any
    other device, whether it was named or not: an installed package's files stay as pip
    wrote them."""
    before = tree_digest(DEFAULT_DB)
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    pytester.makeconftest(NPU_STANDIN_CONFTEST.replace("SOC_NAME", "Ascend910_9382"))
    out = pytester.path / "out"
    named_db = ["--npuperf-db", str(DEFAULT_DB)] if named else []
    result = pytester.runpytest("bench", "-k", "MatMulV3 and 32x7168x128", *named_db,
                                "--npuperf-out", str(out), *FAST)
    result.assert_outcomes(passed=1)
    assert tree_digest(DEFAULT_DB) == before
    copy = out / DEVICE / "vllm_ascend" / VERSION
    assert (read_table(copy / "MatMulV3.csv")["Average Duration(us)"] != "").sum() == 1
    result.stdout.fnmatch_lines(["*the embedded database is package data, left as installed; "
                                 f"results written to {copy}*"])


def test_an_npu_of_another_family_does_not_take_the_database_for_its_own(project):
    pytester, db = project  # an A3 database
    pytester.makeconftest(NPU_STANDIN_CONFTEST.replace("SOC_NAME", "Ascend910B2"))
    before = tree_digest(db)
    run(pytester, db, "-k", "MatMul").assert_outcomes(passed=2)
    assert tree_digest(db) == before
    assert list((pytester.path / "out").glob(f"NPU_Ascend910B2/vllm_ascend/{VERSION}/*.csv"))


def test_a_session_that_runs_no_case_writes_nothing(project):
    pytester, db = project
    result = run(pytester, db, "-k", "NoSuchKernel")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert not (pytester.path / "out").exists()


def test_a_failed_write_fails_the_session_and_says_so(project):
    pytester, db = project
    pytester.makeconftest(f"""
from pathlib import Path

def pytest_runtest_teardown(item):
    # The database being written changes under the session: the write must refuse it.
    for target in Path({str(pytester.path / "out")!r}).glob("CPU_*/vllm_ascend/*"):
        (target / "RmsNorm.csv").write_text(
            "version https://git-lfs.github.com/spec/v1\\noid sha256:00\\nsize 1\\n")
""")
    result = run(pytester, db, "-k", "RmsNorm")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*database write failed*Git LFS pointer*"])
    assert [p.name for p in (pytester.path / "out").glob("CPU_*/vllm_ascend/*/*.csv")] == [
        "RmsNorm.csv"]  # the pointer planted above, nothing written beside it
