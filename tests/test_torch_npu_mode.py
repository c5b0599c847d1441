"""--npuperf-profiler torch_npu (issue 10, items 1 and 5): one torch_npu profiler session
around the whole pytest session, checked call by call against stand-in modules with
torch_npu's real signatures, and its output attributed to the cases by the project's own
ingest code. Also the NPU pre-flight checks of the same session."""

from __future__ import annotations

import csv
import statistics

import pytest
import torch

from pytest_npuperf.devices import npu as npu_module
from tests.replay_project import BENCH, FAST, RMSNORM_ROWS, cells, write_db
from tests.test_devices import fake_torch_npu
from tests.torch_npu_standin import install, kernel_duration

NPU_FAST = [("npu" if a == "cpu" else a) for a in FAST]
ROWS = [*RMSNORM_ROWS, cells("8,128;128", "DT_BF16;DT_BF16", "ND;ND", "8,128;8,1",
                              "DT_BF16;DT_FLOAT", "ND;ND")]


@pytest.fixture
def npu_session(pytester, monkeypatch):
    """A project whose NPU is the stand-in torch_npu (tensors on the host)."""
    module = fake_torch_npu(monkeypatch, [])
    recorder = install(module)
    monkeypatch.setattr(npu_module.NpuBackend, "device",
                        property(lambda self: torch.device("cpu")))
    monkeypatch.delenv("NPUPERF_MSPROF_CHILD", raising=False)
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"RmsNorm": ROWS})
    return pytester, db, recorder


def test_one_profiler_session_around_all_cases_and_its_output_backfilled(npu_session):
    pytester, db, rec = npu_session
    out = pytester.path / "out"
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out", str(out),
                                *NPU_FAST, "--npuperf-profiler", "torch_npu")
    assert result.ret == 0, result.outlines
    names = [name for name, _ in rec.calls]
    # One session: configured and started once, before the first case's range, stopped once.
    assert names == ["_ExperimentalConfig", "tensorboard_trace_handler", "profile", "start",
                     "stop"]
    config, handler, profile = (args for _, args in rec.calls[:3])
    assert config == {"profiler_level": "Level1", "aic_metrics": "PipeUtilization",
                      "msprof_tx": True, "mstx": False, "data_simplification": False}
    assert handler["worker_name"] == "npuperf_dev0"
    assert handler["dir_name"].startswith(str(out / "torch_npu"))
    assert profile["activities"] == ["ProfilerActivity.CPU", "ProfilerActivity.NPU"]
    assert profile["record_shapes"] is True and profile["schedule"] is None
    assert len(rec.ranges) == 2 and all(r["stream"] == "stream0" for r in rec.ranges)
    with open(db / "RmsNorm.csv", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    for index, r in enumerate(rec.ranges):
        row = next(x for x in rows if r["message"].startswith(
            "RmsNorm-" + x["Input Shapes"].split(";")[0].replace(",", "x")))
        warmup = int(row["MicroBench Warmup"])
        timed = [kernel_duration(index, call) for call in range(warmup, r["calls"])]
        assert float(row["Average Duration(us)"]) == pytest.approx(statistics.median(timed))
        assert row["MicroBench Method"] == "torch_npu profiler"
        assert int(row["MicroBench Samples"]) == len(timed)
        assert float(row["MicroBench aicore_time(us)"]) == pytest.approx(
            statistics.fmean(1.0 + call for call in range(warmup, r["calls"])))
    # The raw output is removed after a clean run.
    assert not list((out / "torch_npu").rglob("kernel_details.csv"))


def test_strict_stack_refuses_a_database_of_another_stack_before_any_case(npu_session):
    pytester, db, rec = npu_session
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *NPU_FAST,
                                "--npuperf-profiler", "none", "--npuperf-strict-stack")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [x for x in result.errlines if x.startswith("ERROR")]
    assert line.startswith("ERROR: npuperf: --npuperf-strict-stack: ")
    assert f"database for torch 2.9.0, running {torch.__version__.split('+')[0]}" in line
    assert rec.ranges == []  # no case ran


def test_stack_and_custom_op_checks():
    from pytest_npuperf.replay.preflight import custom_op_problems, stack_mismatches

    running = {"vllm": "0.18.0", "torch": "2.9.0+cpu", "cann": "8.5"}
    assert stack_mismatches("vllm0.18.0_torch2.9.0_cann8.5", running) == []
    assert stack_mismatches("vllm0.18.0_torch2.9.0_cann8.3", running) == [
        "database for CANN 8.3, running 8.5"]
    assert stack_mismatches("vllm0.18.0_torch2.9.0_cann8.5", {**running, "vllm": None}) == [
        "vLLM-Ascend version unknown here (the database is for 0.18.0)"]
    assert custom_op_problems(["RmsNorm", "MatMulV2"], {}) == []
    problems = custom_op_problems(["AddRmsNormBias", "RmsNorm"], {})
    assert problems and all(p.startswith("AddRmsNormBias: ") for p in problems)


def test_torch_npu_profiler_off_the_npu_is_one_line_before_any_case(pytester, monkeypatch):
    monkeypatch.delenv("NPUPERF_MSPROF_CHILD", raising=False)
    pytester.makepyfile(**{"bench/test_kernels": BENCH})
    db = write_db(pytester.path / "db", {"RmsNorm": ROWS})
    result = pytester.runpytest("bench", "--npuperf-db", str(db), "--npuperf-out",
                                str(pytester.path / "out"), *FAST,
                                "--npuperf-profiler", "torch_npu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [x for x in result.errlines if x.startswith("ERROR")]
    assert line.startswith("ERROR: --npuperf-profiler torch_npu profiles NPU kernels; this "
                           "session measures on cpu (torch_npu is not installed here: install "
                           "it and source the CANN environment first")
