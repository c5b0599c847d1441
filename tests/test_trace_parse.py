"""`npuperf parse` of profiler traces, `npuperf profile`, the demo model and the gap report that
they fill (issue 18): a model's in-model kernel times in, replay vs in-model out."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# A profile imports torch._inductor, whose test_operators registers a torch library: imported
# inside an in-process pytester run it would be dropped and registered again in the next.
import torch._inductor.test_operators  # noqa: F401

from pytest_npuperf.db.columns import (
    PROFILING_AVERAGE_DURATION,
    PROFILING_COUNT,
    PROFILING_MAX_DURATION,
    PROFILING_MIN_DURATION,
    PROFILING_TRUST,
    trusted_profile,
)
from pytest_npuperf.db.layout import PROFILES_DIR
from pytest_npuperf.harness.options import DEFAULT_DB
from pytest_npuperf.ingest.trace_rows import profile_metadata
from pytest_npuperf.replay.outcome import GapRow, WriteOutcome
from pytest_npuperf.report import model_gap
from pytest_npuperf.report.figures import replay_vs_model
from tests.conftest import kd_row, read_rows, tree_digest, write_csv, write_kernel_details
from tests.replay_project import BENCH, FAST, cells, measured_count, no_value_count, write_db
from tests.trace_data import cpu_trace, transformer_gpu_trace

VERSIONS = ["--vllm-version", "0.18.0", "--torch-version", "2.9.0", "--cann-version", "8.5"]


def _by_shape(path: Path) -> dict[str, dict[str, str]]:
    return {r["Input Shapes"]: r for r in read_rows(path)}


def test_gemm_rows_hold_the_sum_of_each_calls_kernels_in_the_gpus_own_database(
        tmp_path, npuperf):
    trace, expected = transformer_gpu_trace(tmp_path / "llama.json")
    code, out, err = npuperf("parse", "--profile", trace, "--database-root",
                             tmp_path / "data", *VERSIONS, "--quiet")
    assert code == 0, err
    db = tmp_path / "data" / "CUDA_NVIDIA_H200" / "vllm_ascend" / "vllm0.18.0_torch2.9.0_cann8.5"
    rows = _by_shape(db / "MatMulV2.csv")
    assert len(rows) == len(expected) == 4
    for (m, k, n), sums in expected.items():
        row = rows[f"{m},{k};{n},{k}"]  # the weight as stored, (N, K): the tables' convention
        assert row["Output Shapes"] == f"{m},{n}" and row["Input Data Types"] == "DT_BF16;DT_BF16"
        assert int(row[PROFILING_COUNT]) == len(sums)
        assert float(row[PROFILING_AVERAGE_DURATION]) == pytest.approx(statistics.mean(sums))
        assert float(row[PROFILING_MIN_DURATION]) == pytest.approx(min(sums))
        assert float(row[PROFILING_MAX_DURATION]) == pytest.approx(max(sums))
    assert "cuda NVIDIA H200 trace" in out
    # Attention is a kind: its call (and the kernels it ran) is one FusedInferAttentionScore row.
    fia = read_rows(db / "FusedInferAttentionScore.csv")
    assert [r["Input Shapes"] for r in fia] == ["1,32,16,128;1,8,16,128;1,8,16,128"]
    assert float(fia[0][PROFILING_AVERAGE_DURATION]) == pytest.approx(12.0)
    # What maps to nothing is named with its shapes.
    assert "aten::mul (16x14336, 16x14336) 1.1%" in out.split("maps to no kernel table: ")[1]


def test_a_cpu_trace_parses_and_what_maps_to_nothing_is_listed_with_its_share(tmp_path, npuperf):
    trace = cpu_trace(tmp_path / "cpu.json")
    db = tmp_path / "db" / "CPU_X" / "vllm_ascend" / "v1"
    code, out, err = npuperf("parse", "--profile", trace, "--db", db, "--quiet")
    assert code == 0, err
    names = {p.name for p in db.glob("*.csv")}
    assert names == {"MatMulV2.csv", "SoftmaxV2.csv", "BatchMatMulV2.csv", "GatherV2.csv",
                     "Add.csv"}
    assert _by_shape(db / "BatchMatMulV2.csv")["4,8,16;4,16,8"]["Output Shapes"] == "4,8,8"
    gather = read_rows(db / "GatherV2.csv")[0]
    assert (gather["Input Shapes"], gather["Output Shapes"]) == ("100,32;3;1", "3,32")
    assert "maps to no kernel table:" in out and "%" in out


def test_a_call_lands_in_the_table_of_its_call_space_that_holds_the_row(tmp_path, npuperf):
    """A trace says aten::mm, not which GEMM kernel ran: a signature the database holds in
    MatMulV3 (an alternate of MatMulV2 in op_mapping.yaml) is updated there."""
    db = write_db(tmp_path / "data", {
        "MatMulV2": [cells("16,4096;1024,4096", "DT_BF16;DT_BF16", "ND;ND", "16,1024",
                           "DT_BF16")],
        "MatMulV3": [cells("16,4096;14336,4096", "DT_BF16;DT_BF16", "ND;ND", "16,14336",
                           "DT_BF16")]})
    trace, expected = transformer_gpu_trace(tmp_path / "llama.json")
    code, _, err = npuperf("parse", "--profile", trace, "--db", db, "--quiet")
    assert code == 0, err
    v3 = read_rows(db / "MatMulV3.csv")
    assert len(v3) == 1 and int(v3[0][PROFILING_COUNT]) == len(expected[(16, 4096, 14336)])
    assert "16,4096;14336,4096" not in _by_shape(db / "MatMulV2.csv")


def test_a_trace_view_beside_its_kernel_table_is_left_out(tmp_path, npuperf):
    run = tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    write_kernel_details(run / "kernel_details.csv", [kd_row(duration=12.0)])
    (run / "trace_view.json").write_text("this would not even parse")
    code, out, err = npuperf("parse", "--profile", tmp_path, "--db",
                             tmp_path / "db", "--quiet")
    assert code == 0, err
    assert "trace_view.json: left out: the kernel table beside it holds the same kernels" in out


@pytest.mark.parametrize(("content", "problem"), [
    ('{"traceEvents": [{"ph": "X", "cat": "cpu_op"', "truncated"),
    ("<html>", "not a JSON trace"),
])
def test_a_bad_trace_is_one_line_and_nothing_is_written(tmp_path, npuperf, content, problem):
    db = write_db(tmp_path / "data", {"MatMulV2": []})
    before = tree_digest(db)
    bad = tmp_path / "bad_trace.json"
    bad.write_text(content)
    code, _, err = npuperf("parse", "--profile", bad, "--db", db)
    assert code == 1 and problem in err and len(err.strip().splitlines()) == 1
    assert tree_digest(db) == before


def test_traces_of_two_devices_are_not_mixed(tmp_path, npuperf):
    (tmp_path / "in").mkdir()
    transformer_gpu_trace(tmp_path / "in" / "a_trace.json")
    cpu_trace(tmp_path / "in" / "b_trace.json")
    code, _, err = npuperf("parse", "--profile", tmp_path / "in", "--database-root",
                           tmp_path / "data", *VERSIONS)
    assert code == 2 and "taken on 2 devices" in err


# -- npuperf profile ------------------------------------------------------------------------------
WORKLOAD = """
import sys
import torch
x, w = torch.randn(8, 64), torch.randn(32, 64)
for _ in range(int(sys.argv[1])):
    x @ w.t()
"""


@pytest.mark.slow
def test_profile_runs_a_script_warm_then_traced_and_parses_it(tmp_path):
    script = tmp_path / "model.py"
    script.write_text(WORKLOAD)
    db = tmp_path / "db" / "CPU_X" / "vllm_ascend" / "v1"
    done = subprocess.run([sys.executable, "-m", "pytest_npuperf.cli", "profile", "--device",
                           "cpu", "--steps", "2", "--out", str(tmp_path / "t.json"),
                           "--db", str(db), "--quiet", "--", sys.executable,
                           str(script), "3"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"trace written: {tmp_path / 't.json'}" in done.stdout
    [row] = read_rows(db / "MatMulV2.csv")
    assert row["Input Shapes"] == "8,64;32,64" and row[PROFILING_COUNT] == "6"  # 2 steps x 3


def test_profile_without_a_python_command_says_how(tmp_path, npuperf):
    code, _, err = npuperf("profile", "--", "model.py")
    assert code == 2 and "-- python SCRIPT" in err


# -- the gap report -------------------------------------------------------------------------------
def _outcome(gaps: list[GapRow], model_us: dict[str, float]) -> WriteOutcome:
    outcome = WriteOutcome(source=Path("s"), target=Path("t"), native=False, dry_run=False,
                              run_id="r", stamp="20260101_000000")
    outcome.gaps, outcome.model_us = gaps, model_us
    return outcome


def test_a_big_gap_on_little_time_ranks_below_a_small_gap_on_much():
    small_share = GapRow("Sort", "Sort.csv", 20.0, 10.0, "a", calls=1)  # 2x, 10 us of 10 ms
    big_share = GapRow("MatMulV2", "MatMulV2.csv", 110.0, 100.0, "b", calls=40)  # 1.1x, 4 ms
    outcome = _outcome([small_share, big_share], {"Sort": 10.0, "MatMulV2": 9990.0})
    assert outcome.by_impact() == [big_share, small_share]
    assert big_share.share(outcome.model_total_us) == pytest.approx(0.4)
    types = model_gap.type_gaps(outcome)
    assert [t.kernel_type for t in types] == ["MatMulV2", "Sort"]
    section = model_gap.markdown_section(outcome)
    assert "| MatMulV2 |    1 |        1.10x |" in section and "40.00 %" in section
    assert "<svg" in replay_vs_model(outcome)


def test_without_in_model_times_the_report_says_how_to_get_them():
    assert "npuperf profile --db" in model_gap.markdown_section(_outcome([], {}))
    assert model_gap.terminal_lines(_outcome([], {})) == []


# -- the device's copy keeps its own profiling -------------------------------------------------------
GEMM = cells("32,7168;128,7168", "DT_BF16;DT_BF16", "ND;ND", "32,128", "DT_BF16")


def test_same_device_profiling_survives_the_copy_and_another_devices_is_not_compared(pytester):
    """The source (an NPU database) holds profiling values of the NPU: never compared with the
    CPU's replay. The CPU's own copy holds the CPU's profiling: kept and compared."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    source = write_db(pytester.path / "db", {"MatMulV3": [{**GEMM, PROFILING_AVERAGE_DURATION:
                                                            "3.5"}]})
    out = pytester.path / "out"
    first = pytester.runpytest("bench", "--npuperf-db", str(source), "--npuperf-out", str(out),
                               *FAST)
    assert measured_count(first) == 1  # a busy host may leave it noisy: no value
    first.stdout.fnmatch_lines(["*no duration gap hotspots (0 row(s) compared)*",
                                "*measured on ATLAS_800_A3_752T_128G_DIE: they are not compared*"])
    [copy] = out.glob("CPU_*/vllm_ascend/*")
    rows = read_rows(copy / "MatMulV3.csv")
    assert rows[0][PROFILING_AVERAGE_DURATION] == ""  # the NPU's value did not come along
    rows[0][PROFILING_AVERAGE_DURATION], rows[0][PROFILING_COUNT] = "1000000", "4"
    write_csv(copy / "MatMulV3.csv", list(rows[0]), rows)
    for _ in range(3):  # a noisy case (a busy CI host) has no value to compare: run again
        again = pytester.runpytest("bench", "--npuperf-db", str(source), "--npuperf-out",
                                   str(out), *FAST)
        assert measured_count(again) == 1
        if not no_value_count(again):
            break
    again.stdout.fnmatch_lines(["*replay vs in-model: 1 row(s) of 1 kernel type(s)*"])
    assert read_rows(copy / "MatMulV3.csv")[0][PROFILING_AVERAGE_DURATION] == "1000000"


# -- the main job's gap report on a CPU --------------------------------------------------------------
@pytest.fixture
def embedded_project(pytester):
    """A bench suite given no database: it replays the embedded one inside the package."""
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    return pytester


@pytest.mark.slow
def test_the_main_job_on_a_cpu_ends_with_a_real_gap_report(embedded_project):
    pytester = embedded_project
    args = ["bench", "-k", "MatMulV3 and 32x", *FAST]
    before = tree_digest(DEFAULT_DB)
    result = pytester.runpytest(*args)
    assert tree_digest(DEFAULT_DB) == before
    result.assert_outcomes(passed=7)
    result.stdout.fnmatch_lines(["*model prediction for demo_model.json*"])
    result.stdout.fnmatch_lines(["*model profile: the demo model*profiled on this device*"])
    [copy] = (pytester.path / "npuperf-out").glob("CPU_*/vllm_ascend/*")
    trace = copy / PROFILES_DIR / "demo_model.json"
    assert json.loads(trace.read_text())["traceEvents"]
    profiled = [r for r in read_rows(copy / "MatMulV3.csv") if r[PROFILING_AVERAGE_DURATION]]
    assert sorted(r["Input Shapes"] for r in profiled) == [
        "32,128;7168,128", "32,7168;128,7168", "32,7168;256,7168"]
    report = next((pytester.path / "npuperf-out" / "reports").glob("replay_report_*.md"))
    assert "## Replay vs the Model" in report.read_text()
    trust = profile_metadata(trace).get("trust", "")
    if not trusted_profile(trust):
        # A busy host (CI beside other jobs): the in-model times are marked, kept out of the
        # comparison with the reason, and the next run profiles the model again.
        result.stdout.fnmatch_lines(["*not compared with the model: their in-model times are "
                                     "untrusted*"])
        assert profiled[0][PROFILING_TRUST].startswith("untrusted")
        # Nor is it kept for the device's next output directories.
        assert not list(Path(os.environ["NPUPERF_CACHE_DIR"]).rglob("demo_model.json"))
        assert "model profile: the demo model" in pytester.runpytest(*args).stdout.str()
        return
    # The three profiled rows are compared, each whose case ended ok (on a busy host the
    # noise rule may keep one out: then it is not compared, and the count says so).
    compared = _ok_profiled_cases(pytester)
    assert compared >= 1
    result.stdout.fnmatch_lines([f"*replay vs in-model: {compared} row(s) of *kernel type(s)*",
                                 f"*MatMulV3*{compared} row(s)*median*of model time*"])
    # Once per device: the next run compares again without profiling again.
    before = trace.stat().st_mtime_ns
    second = pytester.runpytest(*args)
    assert "model profile" not in second.stdout.str()
    second.stdout.fnmatch_lines([f"*replay vs in-model: {_ok_profiled_cases(pytester)} row(s)*"])
    assert trace.stat().st_mtime_ns == before
    # A new output directory finds the trace this device kept: parsed, not profiled again.
    other = pytester.path / "elsewhere"
    third = pytester.runpytest(*args, "--npuperf-out", str(other))
    third.stdout.fnmatch_lines(["*model profile: the demo model*kept for this device in *"])
    [again] = other.glob("CPU_*/vllm_ascend/*")
    assert (again / PROFILES_DIR / "demo_model.json").read_text() == trace.read_text()
    assert sorted(r["Input Shapes"] for r in read_rows(again / "MatMulV3.csv")
                  if r[PROFILING_AVERAGE_DURATION]) == sorted(r["Input Shapes"] for r in profiled)


# The demo model's MatMulV3 calls among the selected rows, as case ids name them (M x K x N).
PROFILED_CASES = ("MatMulV3-32x128x7168-", "MatMulV3-32x7168x128-", "MatMulV3-32x7168x256-")


def _ok_profiled_cases(pytester) -> int:
    """Cases of the profiled rows that ended ok in the newest run (the gap compares those)."""
    run = sorted((pytester.path / "npuperf-out" / "reports").glob("run_*.json"))[-1]
    cases = json.loads(run.read_text())["cases"]
    assert sum(c["case_id"].startswith(PROFILED_CASES) for c in cases) == 3
    return sum(c["case_id"].startswith(PROFILED_CASES) and c["status"] == "ok" for c in cases)


def test_the_demo_profile_can_be_turned_off(embedded_project):
    result = embedded_project.runpytest("bench", "-k", "MatMulV3 and 32x7168x128", *FAST,
                                        "--npuperf-model-profile", "off")
    result.assert_outcomes(passed=1)
    assert "model profile" not in result.stdout.str()
    assert not list((embedded_project.path / "npuperf-out").rglob("demo_model.json"))


def test_the_trace_fixture_profiles_a_step_from_a_test(pytester):
    pytester.makepyfile(test_model="""
import torch

def test_decode(npuperf_trace, tmp_path):
    x, w = torch.randn(4, 32), torch.randn(16, 32)
    db = tmp_path / "db"
    path = npuperf_trace(lambda: x @ w.t(), "decode", steps=2, parse_into=db)
    assert path.name == "test_decode_decode.json" and path.parent.name == "traces"
    assert "4,32;16,32" in (db / "MatMulV2.csv").read_text()
""")
    pytester.runpytest("--npuperf-device", "cpu", "--npuperf-out",
                       str(pytester.path / "out"), "-p", "no:cacheprovider"
                       ).assert_outcomes(passed=1)
