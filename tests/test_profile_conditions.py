"""Same device, same conditions, same tensors (issue 28, item 3): a flat database profiled on
this device is compared with this device's replays; in-model values taken on an
oversubscribed or preempting host are marked, kept out of the comparison and never replace
trusted ones; thread counts that differ are said; inputs replay with the model's strides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pytest_npuperf.db.columns import (
    INPUT_STRIDES,
    PROFILING_AVERAGE_DURATION,
    PROFILING_DEVICE,
    PROFILING_THREADS,
    PROFILING_TRUST,
    PROFILING_UPDATED,
)
from pytest_npuperf.db.table import read_table
from pytest_npuperf.ingest.parse import parse_profiling
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.kernels.tensors import generator_for
from pytest_npuperf.profiling.host_watch import HostWatch
from pytest_npuperf.replay.write import write_results
from tests.conftest import write_csv
from tests.replay_project import cells, write_db
from tests.test_write_results import result_for
from tests.trace_data import cpu_trace

HERE = "CPU_TEST"
GEMM = dict(shapes="16,64;32,64", dtypes="DT_BF16;DT_BF16", formats="ND;ND", out="16,32")


def _gemm(**extra) -> dict:
    return cells(GEMM["shapes"], GEMM["dtypes"], GEMM["formats"], GEMM["out"], "DT_BF16",
                 **extra)


def _flat(tmp_path: Path, **profiled) -> Path:
    """A database parsed into a directory of the user's naming (no <DEVICE>/ above it)."""
    flat = tmp_path / "mine"
    flat.mkdir()
    write_db(tmp_path / "scratch", {"MatMulV2": [_gemm(**profiled)]}, extra_columns=tuple(
        k for k in profiled if k != PROFILING_AVERAGE_DURATION))
    source = next((tmp_path / "scratch").glob("*/vllm_ascend/*"))
    for f in source.iterdir():
        (flat / f.name).write_bytes(f.read_bytes())
    return flat


def _copy(tmp_path: Path) -> Path:
    return tmp_path / "out" / HERE / "vllm_ascend" / "mine"


def test_a_flat_database_profiled_here_is_compared_with_this_devices_replay(tmp_path):
    flat = _flat(tmp_path, **{PROFILING_AVERAGE_DURATION: "10", PROFILING_DEVICE: HERE,
                              PROFILING_TRUST: "ok"})
    target = _copy(tmp_path)
    outcome = write_results(flat, target, [result_for(flat, "MatMulV2.csv", 0)], native=False,
                       run_id="r", stamp="s")
    assert [(g.microbench_us, g.profiling_us) for g in outcome.gaps] == [(12.0, 10.0)]
    assert not any("measured on" in n for n in outcome.notes)
    row = read_table(target / "MatMulV2.csv").iloc[0]
    assert row[PROFILING_AVERAGE_DURATION] == "10" and row[PROFILING_DEVICE] == HERE


def test_a_profile_parsed_into_the_copy_later_is_not_overwritten_by_the_sources(tmp_path):
    flat = _flat(tmp_path, **{PROFILING_AVERAGE_DURATION: "10", PROFILING_DEVICE: HERE,
                              PROFILING_UPDATED: "2026-01-01T00:00:00"})
    target = _copy(tmp_path)
    write_results(flat, target, [result_for(flat, "MatMulV2.csv", 0)], native=False, run_id="r",
             stamp="s")
    table = read_table(target / "MatMulV2.csv")
    table.loc[0, PROFILING_AVERAGE_DURATION] = "20"
    table.loc[0, PROFILING_UPDATED] = "2026-06-01T00:00:00"
    write_csv(target / "MatMulV2.csv", list(table.columns), table.to_dict("records"))
    outcome = write_results(flat, target, [result_for(flat, "MatMulV2.csv", 0)], native=False,
                       run_id="r2", stamp="s2")
    assert [g.profiling_us for g in outcome.gaps] == [20.0]


def test_another_devices_profile_is_still_not_compared(tmp_path):
    flat = _flat(tmp_path, **{PROFILING_AVERAGE_DURATION: "10",
                              PROFILING_DEVICE: "CUDA_NVIDIA_H200"})
    outcome = write_results(flat, _copy(tmp_path), [result_for(flat, "MatMulV2.csv", 0)],
                       native=False, run_id="r", stamp="s")
    assert outcome.gaps == [] and any("measured on" in n for n in outcome.notes)
    assert read_table(_copy(tmp_path) / "MatMulV2.csv").iloc[0][PROFILING_AVERAGE_DURATION] == ""


def test_untrusted_in_model_times_are_left_out_of_the_gap_and_the_report_says_why(tmp_path):
    why = "untrusted: oversubscribed host: 4 runnable tasks on 2 cores"
    flat = _flat(tmp_path, **{PROFILING_AVERAGE_DURATION: "10", PROFILING_DEVICE: HERE,
                              PROFILING_TRUST: why})
    outcome = write_results(flat, _copy(tmp_path), [result_for(flat, "MatMulV2.csv", 0)],
                       native=False, run_id="r", stamp="s")
    assert outcome.gaps == []
    assert any(why in n and "not compared" in n for n in outcome.notes)


def test_a_different_thread_count_is_said(tmp_path):
    flat = _flat(tmp_path, **{PROFILING_AVERAGE_DURATION: "10", PROFILING_DEVICE: HERE,
                              PROFILING_THREADS: "1"})
    outcome = write_results(flat, _copy(tmp_path), [result_for(flat, "MatMulV2.csv", 0, threads=2)],
                       native=False, run_id="r", stamp="s")
    assert len(outcome.gaps) == 1
    assert any("profiled with 1 thread(s) and replayed with 2" in n for n in outcome.notes)


# -- the profile side's trust marks ----------------------------------------------------------------
@pytest.fixture(scope="module")
def trace_text(tmp_path_factory) -> str:
    return cpu_trace(tmp_path_factory.mktemp("trace") / "t.json").read_text()


def _with_metadata(text: str, path: Path, **npuperf) -> Path:
    """The trace as `npuperf profile` writes it: what it recorded under `npuperf`."""
    document = json.loads(text)
    document["npuperf"] = {"device": HERE, "threads": 1, "host": "2 cores", **npuperf}
    path.write_text(json.dumps(document))
    return path


def test_parsed_rows_record_the_profiles_conditions_and_an_untrusted_one_is_marked(
        tmp_path, trace_text):
    trace = _with_metadata(trace_text, tmp_path / "t.json", trust="untrusted: preempting host")
    db = tmp_path / "db"
    summary = parse_profiling(trace, db, show_progress=False)
    row = read_table(db / "MatMulV2.csv").iloc[0]
    assert row[PROFILING_DEVICE] == HERE and row[PROFILING_THREADS] == "1"
    assert row[PROFILING_TRUST] == "untrusted: preempting host"
    assert any("untrusted" in line for line in summary.render().splitlines())


def test_an_untrusted_profile_never_replaces_trusted_in_model_values(tmp_path, trace_text):
    db = tmp_path / "db"
    parse_profiling(_with_metadata(trace_text, tmp_path / "quiet.json", trust="ok"), db,
                    show_progress=False)
    before = read_table(db / "MatMulV2.csv").iloc[0][PROFILING_AVERAGE_DURATION]
    busy = json.loads(trace_text)
    for event in busy["traceEvents"]:  # the same calls, slower
        if event.get("cat") == "cpu_op":
            event["dur"] = float(event["dur"]) * 3
    busy = _with_metadata(json.dumps(busy), tmp_path / "busy.json",
                          trust="untrusted: preempting host")
    summary = parse_profiling(busy, db, show_progress=False)
    row = read_table(db / "MatMulV2.csv").iloc[0]
    assert row[PROFILING_AVERAGE_DURATION] == before and row[PROFILING_TRUST] == "ok"
    assert any("keep their trusted in-model values" in n for n in summary.notes)


@pytest.mark.skipif(not Path("/proc/loadavg").is_file(), reason="reads Linux's /proc")
def test_a_profile_beside_competing_processes_is_not_trusted():
    """As many busy processes as cores, beside a profile of as many threads: the host is
    oversubscribed and takes the profile's CPU from it."""
    cores = len(os.sched_getaffinity(0))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.2)
        watch = HostWatch(threads=torch.get_num_threads()).start()
        deadline = time.perf_counter() + 0.5
        while time.perf_counter() < deadline:
            sum(range(10_000))
        verdict = watch.verdict()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert verdict.trust.startswith("untrusted: ")
    assert "oversubscribed host" in verdict.trust or "preempting host" in verdict.trust
    assert f"{cores} cores" in verdict.host_text()


# -- the same tensors ------------------------------------------------------------------------------
def test_inputs_replay_with_the_strides_the_model_passed():
    row = cells("1,4,16,8;1,4,16,8", "FLOAT;FLOAT", "ND;ND", "1,4,16,8", "FLOAT",
                **{INPUT_STRIDES: "512,8,32,1;"})
    case = case_from_row("Add", row)
    assert case.input_strides(0) == (512, 8, 32, 1) and case.input_strides(1) is None
    spec = spec_for("Add")

    class Cpu:
        device = torch.device("cpu")

        def to_format(self, tensor, fmt):
            return tensor
    tensors = spec.build_inputs(case, Cpu(), generator_for(case, torch.device("cpu")))
    a, b = tensors["a"], tensors["b"]
    assert a.shape == (1, 4, 16, 8) and a.stride() == (512, 8, 32, 1)  # a transposed view
    assert b.is_contiguous()


def test_strides_that_do_not_fit_the_shape_are_a_cell_error():
    from pytest_npuperf.db.errors import CellError

    row = cells("4,8", "FLOAT", "ND", "4,8", "FLOAT", **{INPUT_STRIDES: "1,4,9"})
    with pytest.raises(CellError, match="do not fit the shape"):
        case_from_row("Add", row)
