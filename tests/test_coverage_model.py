"""`npuperf coverage --trace`: a model's kernel calls classed as the simulator would answer
them from the database: exact row, interpolable inside its bucket, outside the measured
points (it would fall back to its analytic model), or no table; with the share of the model's
time in each class and the worst calls."""

from __future__ import annotations

import json

import pytest

from pytest_npuperf.coverage.model import EXACT, INTERPOLABLE, NO_TABLE, OUTSIDE, model_coverage
from pytest_npuperf.coverage.points import read_points

from .conftest import kd_row, write_kernel_details
from .coverage_data import database, gemm_row
from .trace_data import cpu_trace


def _call(m: int, duration: float, *, dtype: str = "DT_BF16", n: int = 64, k: int = 128):
    return kd_row("MatMulV2", duration, in_shapes=f"{m},{k};{n},{k}",
                  in_dtypes=f"{dtype};{dtype}", out_shapes=f"{m},{n}", out_dtypes=dtype)


@pytest.fixture
def measured(tmp_path):
    """MatMulV2 measured at M = 1, 2, 4, 8 (K 128, N 64, bf16); RmsNorm has a table with no
    measured row."""
    return database(tmp_path, {
        "MatMulV2": [gemm_row(m, 64, 128, 10.0 + m) for m in (1, 2, 4, 8)],
        "RmsNorm": [{"Input Shapes": "4,128;128", "Input Data Types": "DT_BF16;DT_BF16",
                     "Input Formats": "ND;ND", "Output Shapes": "4,128;4,1",
                     "Output Data Types": "DT_BF16;FLOAT", "Output Formats": "ND;ND"}]})


def _profile(tmp_path):
    rows = [_call(2, 12.0), _call(2, 12.0), _call(2, 12.0),  # exact, 3 calls, 36 us
            _call(3, 13.0),  # between 2 and 4: interpolable
            _call(16, 30.0), _call(16, 30.0),  # beyond 8: outside, 60 us
            _call(4, 20.0, dtype="FLOAT16"),  # no fp16 bucket: outside
            kd_row("RmsNorm", 7.0, in_shapes="4,128;128", in_dtypes="DT_BF16;DT_BF16",
                   out_shapes="4,128;4,1", out_dtypes="DT_BF16;FLOAT"),  # table unmeasured
            kd_row("SoftmaxV2", 5.0, in_shapes="4,128", in_dtypes="DT_BF16", in_formats="ND",
                   out_shapes="4,128", out_dtypes="DT_BF16")]  # no table
    return write_kernel_details(tmp_path / "prof" / "kernel_details.csv", rows)


def test_each_call_is_classed_with_its_share_of_the_time(measured, tmp_path):
    coverage = model_coverage(read_points(measured), [_profile(tmp_path)])
    by_shape = {(g.kernel_type, g.shapes, g.identity["Input Data Types"]): g
                for g in coverage.groups}
    assert by_shape[("MatMulV2", "2,128;64,128", "DT_BF16;DT_BF16")].klass == EXACT
    three = by_shape[("MatMulV2", "3,128;64,128", "DT_BF16;DT_BF16")]
    assert three.klass == INTERPOLABLE and three.estimate.value == pytest.approx(13.0)
    sixteen = by_shape[("MatMulV2", "16,128;64,128", "DT_BF16;DT_BF16")]
    assert sixteen.klass == OUTSIDE and "beyond the measured points" in sixteen.reason
    fp16 = by_shape[("MatMulV2", "4,128;64,128", "FLOAT16;FLOAT16")]
    assert fp16.klass == OUTSIDE and "no measured row of its bucket" in fp16.reason
    assert by_shape[("RmsNorm", "4,128;128", "DT_BF16;DT_BF16")].klass == NO_TABLE
    softmax = next(g for g in coverage.groups if g.kernel_type == "SoftmaxV2")
    assert softmax.klass == NO_TABLE and softmax.reason == "no SoftmaxV2.csv"
    time = coverage.time_by_class()
    assert time == pytest.approx({EXACT: 36.0, INTERPOLABLE: 13.0, OUTSIDE: 80.0,
                                  NO_TABLE: 12.0})
    assert coverage.calls_by_class() == {EXACT: 3, INTERPOLABLE: 1, OUTSIDE: 3, NO_TABLE: 2}
    assert sum(coverage.shares().values()) == pytest.approx(1.0)
    worst = coverage.worst()
    assert [g.time_us for g in worst] == sorted((g.time_us for g in worst), reverse=True)
    assert worst[0].shapes == "16,128;64,128" and EXACT not in {g.klass for g in worst}


def test_coverage_of_a_model_on_the_command_line(measured, tmp_path, npuperf):
    out_json = tmp_path / "model.json"
    code, out, err = npuperf("coverage", measured, "--trace", _profile(tmp_path), "--json",
                             out_json, "--no-loo", "--quiet")
    assert code == 0, err  # no standard: nothing to fail
    assert "exact 25.5 % (3 calls); interpolable 9.2 % (1 calls); outside 56.7 % (3 calls); " \
           "no table 8.5 % (2 calls)" in out
    assert "outside: MatMulV2 16,128;64,128 x2, 42.6 % of the time" in out
    doc = json.loads(out_json.read_text())
    assert doc["model"]["calls"] == {"exact": 3, "interpolable": 1, "outside": 3, "no table": 2}


def test_a_torch_profiler_trace_is_read_like_parse_reads_it(tmp_path):
    """A real torch.profiler trace of a few model ops: its aten::mm call is exact against a
    row of its shape; operators the database maps to no table are reported with their time."""
    trace = cpu_trace(tmp_path / "model_trace.json")
    directory = database(tmp_path, {"MatMulV2": [
        gemm_row(16, 32, 64, 4.0, dtype="FLOAT"), gemm_row(8, 32, 64, 3.0, dtype="FLOAT")]})
    coverage = model_coverage(read_points(directory), [trace])
    mm = [g for g in coverage.groups if g.kernel_type == "MatMulV2"
          and g.shapes == "16,64;32,64"]
    assert mm and mm[0].klass == EXACT and mm[0].calls == 3
    assert coverage.unmapped and coverage.total_us > coverage.mapped_us > 0
    assert {g.klass for g in coverage.groups} <= {EXACT, INTERPOLABLE, OUTSIDE, NO_TABLE}
