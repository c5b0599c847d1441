"""The model-level prediction (issue 28, item 4): each kernel call of the profiled step
costed at the database's value for its exact row, added up, beside the step's measured time;
per kernel type, misses and the unmapped share told apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_npuperf.db.columns import AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, RAW_DURATION
from pytest_npuperf.ingest.prediction import predict
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.replay.outcome import WriteOutcome
from pytest_npuperf.report import model_gap
from tests.replay_project import cells, write_db
from tests.trace_data import cpu_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return cpu_trace(tmp_path_factory.mktemp("trace") / "t.json")


def test_predicted_over_measured_adds_the_databases_values_of_the_steps_calls(tmp_path, trace):
    rows, summary = trace_rows(trace, TorchOperators())
    gemms = rows[rows["Type"] == "MatMulV2"]
    shapes = sorted(set(gemms["Input Shapes"]))
    # One GEMM shape replayed (its value is what a simulator reads), the other only profiled;
    # softmax, bmm and the rest have no row.
    first = gemms[gemms["Input Shapes"] == shapes[0]].iloc[0]
    second = gemms[gemms["Input Shapes"] == shapes[1]].iloc[0]

    def row(r, **values):
        return cells(r["Input Shapes"], r["Input Data Types"], r["Input Formats"],
                     r["Output Shapes"], r["Output Data Types"], **values)
    db = write_db(tmp_path, {"MatMulV2": [row(first, **{AVERAGE_DURATION: "7"}),
                                          row(second, **{PROFILING_AVERAGE_DURATION: "5"})]})
    prediction = predict(trace, db)
    calls = {s: int((gemms["Input Shapes"] == s).sum()) for s in shapes}
    expected = 7 * calls[shapes[0]] + 5 * calls[shapes[1]]
    assert prediction.predicted_us == pytest.approx(expected)
    assert prediction.measured_us == pytest.approx(summary.total_us)
    assert prediction.ratio == pytest.approx(expected / summary.total_us)
    mm = prediction.types["MatMulV2"]
    assert mm.sources == {"replay": calls[shapes[0]], "profiled": calls[shapes[1]]}
    assert mm.measured_us == pytest.approx(float(gemms[RAW_DURATION].sum()))
    missed = rows[rows["Type"] != "MatMulV2"]
    assert prediction.missed_us == pytest.approx(float(missed[RAW_DURATION].sum()))
    assert prediction.unmapped_us == pytest.approx(sum(summary.unmapped.values()))
    assert prediction.types["SoftmaxV2"].missed_calls == int((rows["Type"] == "SoftmaxV2").sum())
    text = "\n".join(prediction.lines())
    assert "predicted / measured" in text and "no row in the database" in text


def test_npuperf_predict_prints_it_and_json_too(tmp_path, trace, npuperf):
    db = write_db(tmp_path, {"MatMulV2": []})
    code, out, err = npuperf("predict", "--trace", trace, "--db", db)
    assert code == 0, err
    assert out.startswith(f"model prediction for {trace.name}")
    code, out, _ = npuperf("predict", "--trace", trace, "--db", db, "--json")
    document = json.loads(out)
    assert document["predicted_us"] == 0 and document["measured_us"] > 0
    code, _, err = npuperf("predict", "--trace", tmp_path / "none.json", "--db", db)
    assert code == 2 and err.startswith("npuperf predict: error:")


def test_the_sessions_reports_carry_the_prediction(tmp_path, trace):
    db = write_db(tmp_path, {"MatMulV2": []})
    outcome = WriteOutcome(source=db, target=db, native=True, dry_run=False, run_id="r",
                              stamp="s")
    outcome.predictions.append(predict(trace, db))
    assert any(line.startswith("model prediction for") for line in
               model_gap.terminal_lines(outcome))
    assert "Model prediction: `t.json`" in model_gap.markdown_section(outcome)
    assert "<h3>Model prediction</h3>" in model_gap.html_section(outcome)
