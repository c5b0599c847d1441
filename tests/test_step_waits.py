"""The host's share of an in-model time (issue 28, the gap): what the profile's threads waited
for a CPU inside each traced step is recorded with the trace, and the model-level prediction
tells it apart from the model's own time.

The replay drops the samples the host preempted; the in-model times hold every wait. On a
busy host the two differ by the wait, whatever the kernels do: wall - wait is the thread's
CPU time, which is the independent reference checked here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pytest_npuperf.db.columns import AVERAGE_DURATION, PROFILING_AVERAGE_DURATION, RAW_DURATION
from pytest_npuperf.devices.preemption import RunQueueDelay
from pytest_npuperf.ingest.prediction import predict
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.module_kinds import STEP_RANGE, STEP_WAITS
from pytest_npuperf.kernels.torch_ops import TorchOperators
from pytest_npuperf.profiling.host_watch import HostWatch
from pytest_npuperf.profiling.workload import profile_callable
from tests.replay_project import cells, write_db
from tests.trace_data import KinetoTrace

needs_schedstat = pytest.mark.skipif(not RunQueueDelay.available(),
                                     reason="Linux's per-thread run-queue delay (schedstat)")


def _step():
    x, w = torch.randn(16, 64), torch.randn(32, 64)
    for _ in range(20):
        torch.softmax(x @ w.t(), dim=-1)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("profile") / "steps.json"
    return profile_callable(_step, out, kind="cpu", warmup=1, steps=3, kinds=None).path


def _meta(path: Path) -> dict:
    return json.loads(path.read_text())["npuperf"]


def _with_waits(source: Path, target: Path, waits) -> Path:
    document = json.loads(source.read_text())
    document["npuperf"][STEP_WAITS] = waits
    target.write_text(json.dumps(document))
    return target


@needs_schedstat
def test_each_traced_step_records_its_wall_and_wait_beside_its_range(profiled):
    waits = _meta(profiled)[STEP_WAITS]
    events = json.loads(profiled.read_text())["traceEvents"]
    ranges = sorted((e for e in events if str(e.get("name", "")).startswith(STEP_RANGE)
                     and e.get("ph") == "X"), key=lambda e: e["ts"])
    assert len(waits) == len(ranges) == 3
    for (wall, waited, threads), step in zip(waits, ranges):
        assert threads >= 1 and 0 <= waited <= wall
        # The wall is taken inside the step's range: never longer than it.
        assert wall <= float(step["dur"]) + 1.0


@needs_schedstat
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_a_step_beside_a_busy_process_on_its_core_records_the_time_taken_from_it():
    """Both on one core: the scheduler takes about half the step's wall from it, and wall -
    waited is the thread's CPU time (independent: time.thread_time)."""
    saved = os.sched_getaffinity(0)
    core = min(saved)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(busy.pid, {core})
        os.sched_setaffinity(0, {core})
        time.sleep(0.05)
        watch = HostWatch(threads=1).start()
        watch.step_begin()
        cpu = time.thread_time()
        deadline = time.perf_counter() + 0.3
        while time.perf_counter() < deadline:
            sum(range(2_000))
        cpu = (time.thread_time() - cpu) * 1e6
        watch.step_end()
        watch.verdict()
    finally:
        os.sched_setaffinity(0, saved)
        busy.kill()
        busy.wait()
    [step] = watch.steps
    assert step.waited_us > 0.2 * step.wall_us
    # Within a few scheduler ticks (4 ms at 250 Hz) on a host that may be busy besides.
    assert step.wall_us - step.waited_us == pytest.approx(cpu, abs=max(0.05 * step.wall_us,
                                                                        8000))


def test_the_prediction_tells_the_wait_apart_from_the_models_time(tmp_path, profiled):
    rows, summary = trace_rows(profiled, TorchOperators())
    total = summary.total_us
    waits = [[total / 3, total * 0.1, 1], [total / 3, total * 0.05, 1], [total / 3, 0.0, 1]]
    trace = _with_waits(profiled, tmp_path / "busy.json", waits)
    gemm = rows[rows["Type"] == "MatMulV2"].iloc[0]
    softmax = rows[rows["Type"] == "SoftmaxV2"].iloc[0]

    def row(r, **values):
        return cells(r["Input Shapes"], r["Input Data Types"], r["Input Formats"],
                     r["Output Shapes"], r["Output Data Types"], **values)
    # The GEMM replayed; the softmax only profiled (its value may hold its own profile's
    # wait: it is left out of the figure without the wait).
    db = write_db(tmp_path, {"MatMulV2": [row(gemm, **{AVERAGE_DURATION: "3"})],
                             "SoftmaxV2": [row(softmax, **{PROFILING_AVERAGE_DURATION: "2"})]})
    prediction = predict(trace, db)
    assert prediction.waited_us == pytest.approx(total * 0.15)
    assert prediction.measured_us == pytest.approx(total)
    calls = rows[(rows["Type"] == "MatMulV2") & (rows["Input Shapes"] == gemm["Input Shapes"])]
    measured = float(calls[RAW_DURATION].sum())
    softmaxes = int((rows["Type"] == "SoftmaxV2").sum())
    assert prediction.predicted_us == pytest.approx(3 * len(calls) + 2 * softmaxes)
    assert prediction.on_cpu_ratio == pytest.approx(3 * len(calls) / (measured * 0.85))
    text = "\n".join(prediction.lines())
    assert "waited for a CPU" in text and f"{prediction.on_cpu_ratio:.3f}" in text
    assert "waited 15.0% of the measured time" in prediction.markdown()
    assert prediction.as_dict()["waited_us"] == pytest.approx(total * 0.15)
    assert any("waited" in line for line in trace_rows(trace, TorchOperators())[1].lines())


@pytest.mark.parametrize("waits", [[[10.0, "x", 1]], [[10.0, float("nan"), 1]],
                                   [[10.0, -5.0, 1]], "many", [[10.0]]])
def test_a_hand_edited_wait_says_nothing_rather_than_a_wrong_figure(tmp_path, profiled, waits):
    trace = _with_waits(profiled, tmp_path / "edited.json", waits)
    assert trace_rows(trace, TorchOperators())[1].waited_us == 0.0


def test_a_device_traces_kernels_do_not_wait_for_the_hosts_cpu(tmp_path):
    """A GPU trace's device time is not the host's: a recorded wait is not subtracted."""
    kineto = KinetoTrace()
    step = kineto.op(f"{STEP_RANGE}0", [], [], dur=500.0, start=1_000_000.0)
    step["cat"] = "user_annotation"
    op = kineto.op("aten::mm", [[16, 64], [64, 32]], ["float", "float"], dur=50.0,
                   start=1_000_010.0)
    kineto.launch(op, 40.0)
    kineto.meta["npuperf"] = {STEP_WAITS: [[500.0, 250.0, 1]]}
    _, summary = trace_rows(kineto.write(tmp_path / "gpu.json"), TorchOperators())
    assert summary.device.kind == "cuda" and summary.steps == 1 and summary.total_us == 40.0
    assert summary.waited_us == 0.0
