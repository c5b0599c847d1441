"""Profiler traces on hostile input (issue 29): events whose fields are no times or ids, ids
shared by two operator calls, devices linked into a profile directory, two devices in one
database, gzip-compressed traces, one huge event and megabytes of blanks. Each try failed
before: summed as it was, put on the wrong call, a hang, a traceback, or quadratic time."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from pytest_npuperf.db.errors import ContractError
from pytest_npuperf.ingest import chrome_trace
from pytest_npuperf.ingest.chrome_trace import read_events
from pytest_npuperf.ingest.trace import UNTOLD, read_trace
from pytest_npuperf.ingest.trace_rows import trace_rows
from pytest_npuperf.kernels.torch_ops import TorchOperators

from .conftest import kd_row, kernel_details_text, read_rows, tree_digest
from .replay_project import write_db
from .trace_data import KinetoTrace

OPERATORS = TorchOperators()
FLOAT = ["float", "float"]


def _one_gemm(*, extra_kernel: float | None = None) -> tuple[KinetoTrace, dict, dict]:
    """A GEMM call with a 10 us kernel (and, when asked, a second kernel of `extra_kernel` us
    launched by an unmapped operator beside it)."""
    trace = KinetoTrace()
    mm = trace.op("aten::mm", [[16, 64], [64, 32]], FLOAT)
    kernel = trace.launch(mm, 10.0)
    if extra_kernel is not None:
        other = trace.op("aten::cumsum", [[16, 32]], ["float"])
        trace.launch(other, extra_kernel)
    return trace, mm, kernel


def _rows(path: Path) -> tuple[list[dict], list[str]]:
    rows, summary = trace_rows(path, OPERATORS)
    return rows.to_dict("records"), summary.lines()


# -- fields that are no times or ids -----------------------------------------------------------------
BAD_FIELDS = [
    ("dur", -5.0, "negative 'dur'"),
    ("dur", float("nan"), "'dur' NaN or infinite"),
    ("dur", float("inf"), "'dur' NaN or infinite"),
    ("dur", 1e300, "'dur' longer than a week"),
    ("dur", "fast", "'dur' not a number"),
    ("dur", [1], "'dur' not a number"),
    ("dur", True, "'dur' not a number"),
    ("ts", None, "'ts' not a number"),
    ("ts", {"a": 1}, "'ts' not a number"),
    ("ts", 1e300, "'ts' beyond any clock"),
    ("args", [1, 2], "'args' not an object"),
    ("args", "x", "'args' not an object"),
    ("External id", 1.5, "'External id' not a whole number"),
    ("External id", -3, "'External id' not a whole number"),
    ("External id", 1 << 70, "'External id' not a whole number"),
    ("External id", "7x", "'External id' not a whole number"),
    ("correlation", [3], "'correlation' not a whole number"),
    ("pid", [0], "'pid' not a number or name"),
    ("tid", {"t": 1}, "'tid' not a number or name"),
]


@pytest.mark.parametrize("field, value, reason", [f for f in BAD_FIELDS
                                                  if f[0] not in ("pid", "tid")])  # not read
def test_a_kernel_with_a_bad_field_is_left_out_and_counted(tmp_path, field, value, reason):
    trace, _, _ = _one_gemm()
    bad = trace.launch(trace.events[0], 7.0)
    if field in ("External id", "correlation"):
        bad["args"][field] = value
    else:
        bad[field] = value
    [row], lines = _rows(trace.write(tmp_path / "t.json"))
    assert row["Duration(us)"] == 10.0  # neither 17, nor 5, nor NaN, nor a traceback
    assert "100.0% of its 0.010 ms of device time" in lines[0]
    assert lines[1] == f"  left out 1 event(s) with a bad field: 1 {reason}"


@pytest.mark.parametrize("field, value, reason", [f for f in BAD_FIELDS if f[0] != "correlation"])
def test_an_operator_with_a_bad_field_is_left_out_and_counted(tmp_path, field, value, reason):
    trace, _, _ = _one_gemm()
    other = trace.op("aten::mm", [[8, 64], [64, 32]], FLOAT)
    trace.launch(other, 4.0)
    if field == "External id":
        other["args"][field] = value
    else:
        other[field] = value
    profile = read_trace(trace.write(tmp_path / "t.json"), OPERATORS.is_mapped)
    assert [(c.dims, c.device_us) for c in profile.calls] == [([[16, 64], [64, 32]], 10.0)]
    assert profile.left_out == {reason: 1}


def test_a_negative_sibling_no_longer_makes_a_share_above_100_percent(tmp_path, npuperf):
    """A 10 us GEMM kernel and a -5 us one beside it: stored as 10 us (it was 5 us, the
    summary saying 200 %)."""
    trace, _, _ = _one_gemm(extra_kernel=-5.0)
    db = write_db(tmp_path / "data", {"MatMulV2": []})
    code, out, err = npuperf("parse", "--profile", trace.write(tmp_path / "t.json"), "--db", db)
    assert code == 0, err
    assert "100.0% of its 0.010 ms" in out and "1 negative 'dur'" in out
    assert read_rows(db / "MatMulV2.csv")[0]["Profiling Average Duration(us)"] == "10"


def test_a_trace_of_only_bad_events_is_one_line(tmp_path, npuperf):
    trace, mm, _ = _one_gemm()
    mm["ts"] = "yesterday"
    code, _, err = npuperf("parse", "--profile", trace.write(tmp_path / "t.json"), "--db",
                           tmp_path / "db")
    assert code == 1 and "no operator events" in err and len(err.strip().splitlines()) == 1


# -- ids shared by two operator calls ---------------------------------------------------------------
def _two_calls_one_id(*, runtime: bool) -> KinetoTrace:
    trace = KinetoTrace()
    first = trace.op("aten::mm", [[16, 64], [64, 32]], FLOAT)
    second = trace.op("aten::mm", [[8, 64], [64, 32]], FLOAT)
    second["args"]["External id"] = first["args"]["External id"]
    trace.launch(first, 10.0)
    trace.launch(second, 20.0)
    if not runtime:
        trace.events = [e for e in trace.events if e.get("cat") != "cuda_runtime"]
    return trace


def test_two_calls_sharing_an_external_id_each_get_their_kernels_by_correlation(tmp_path):
    rows, lines = _rows(_two_calls_one_id(runtime=True).write(tmp_path / "t.json"))
    assert {r["Input Shapes"]: r["Duration(us)"] for r in rows} == {"16,64;64,32": 10.0,
                                                                    "8,64;64,32": 20.0}
    assert "100.0% of its 0.030 ms" in lines[0]


def test_kernels_of_a_shared_id_nothing_else_tells_apart_are_said_not_given_to_one(tmp_path):
    """Before: both kernels (30 us) on the first call, the second call gone, "100 %"."""
    rows, lines = _rows(_two_calls_one_id(runtime=False).write(tmp_path / "t.json"))
    assert rows == []
    assert "0.0% of its 0.030 ms" in lines[0] and f"{UNTOLD} 100.0%" in lines[1]


def test_a_correlation_shared_by_launches_in_two_calls_is_not_guessed(tmp_path):
    trace = KinetoTrace()
    first = trace.op("aten::mm", [[16, 64], [64, 32]], FLOAT)
    second = trace.op("aten::mm", [[8, 64], [64, 32]], FLOAT)
    trace.launch(first, 10.0, external=False)
    trace.launch(second, 20.0, external=False)
    launches = [e for e in trace.events if e.get("cat") == "cuda_runtime"]
    launches[1]["args"]["correlation"] = launches[0]["args"]["correlation"]
    kernels = [e for e in trace.events if e.get("cat") == "kernel"]
    kernels[1]["args"]["correlation"] = kernels[0]["args"]["correlation"]
    profile = read_trace(trace.write(tmp_path / "t.json"), OPERATORS.is_mapped)
    assert profile.calls == [] and profile.unmapped[UNTOLD] == 30.0


def _npu_trace(path: Path, *, shared_flow: bool) -> Path:
    """torch_npu's trace_view layout: two host operators each launching one device task
    through an `async_npu` flow (the second flow reusing the first's id when asked)."""
    events = [{"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "Ascend Hardware"}}]
    for number, (start, task_ts, dur) in enumerate(((100.0, 500.0, 6.0),
                                                    (200.0, 600.0, 8.0))):
        flow = 1 if shared_flow else number + 1
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 2, "tid": 2,
             "ts": f"{start:.3f}", "dur": 50.0,
             "args": {"Input Dims": [[16 * (number + 1), 64], [64, 32]], "Input type": FLOAT}},
            {"ph": "s", "cat": "async_npu", "id": flow, "pid": 2, "tid": 2,
             "ts": f"{start + 10:.3f}", "name": "async_npu"},
            {"ph": "f", "cat": "async_npu", "id": flow, "pid": 9, "tid": 3,
             "ts": f"{task_ts:.3f}", "name": "async_npu", "bp": "e"},
            {"ph": "X", "name": "MatMulV2", "pid": 9, "tid": 3, "ts": f"{task_ts:.3f}",
             "dur": dur, "args": {}}]
    path.write_text(json.dumps(events))
    return path


def test_an_npu_flow_id_started_twice_does_not_pick_a_launcher(tmp_path):
    good = read_trace(_npu_trace(tmp_path / "a.json", shared_flow=False), OPERATORS.is_mapped)
    assert sorted(c.device_us for c in good.calls) == [6.0, 8.0]
    shared = read_trace(_npu_trace(tmp_path / "b.json", shared_flow=True), OPERATORS.is_mapped)
    assert shared.calls == [] and shared.unmapped[UNTOLD] == 14.0


# -- names ---------------------------------------------------------------------------------------------
def test_control_characters_and_huge_names_are_escaped_and_cut(tmp_path, npuperf):
    trace, _, _ = _one_gemm()
    name = "\x1b[31mred\x07" + "x" * (5 << 20)
    other = trace.op(name, [[4]], ["float"])
    trace.launch(other, 5.0)
    code, out, err = npuperf("parse", "--profile", trace.write(tmp_path / "t.json"), "--db",
                             tmp_path / "db", "--dry-run")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out and len(out) < 2000
    assert "\\x1b[31mred\\x07xxx" in out and "(5,242,889 characters)" in out


def test_a_one_line_error_escapes_control_characters(tmp_path, npuperf):
    bad = tmp_path / "bad\x1b[2J_trace.json"
    bad.write_text("<html>")
    code, _, err = npuperf("parse", "--profile", bad, "--db", tmp_path / "db")
    assert code == 1 and "\x1b" not in err and "bad\\x1b[2J_trace.json" in err


# -- what a profile directory holds -------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists("/dev/ptmx"), reason="needs /dev/ptmx (a device that "
                                                            "never has data)")
@pytest.mark.parametrize("name", ["x_trace.json", "kernel_details.csv"])
def test_a_link_to_a_device_without_data_is_named_not_waited_on(tmp_path, npuperf, name):
    """Reading /dev/ptmx waits forever: the parse hung."""
    trace, _, _ = _one_gemm()
    (tmp_path / "prof").mkdir()
    trace.write(tmp_path / "prof" / "a_trace.json")
    (tmp_path / "prof" / name).symlink_to("/dev/ptmx")
    code, _, err = npuperf("parse", "--profile", tmp_path / "prof", "--db", tmp_path / "db")
    assert code == 2 and f"{tmp_path / 'prof' / name}: not a regular file" in err
    assert not (tmp_path / "db").exists()


def test_traces_of_two_devices_are_refused_with_db_too(tmp_path, npuperf):
    """Before: averaged into one row of the database given."""
    db = write_db(tmp_path / "data", {"MatMulV2": []})
    before = tree_digest(db)
    (tmp_path / "in").mkdir()
    for name, gpu in (("a_trace.json", "NVIDIA H200"), ("b_trace.json", "NVIDIA H100")):
        trace = KinetoTrace(gpu)
        trace.launch(trace.op("aten::mm", [[16, 64], [64, 32]], FLOAT), 10.0)
        trace.write(tmp_path / "in" / name)
    code, _, err = npuperf("parse", "--profile", tmp_path / "in", "--db", db)
    assert code == 2 and "taken on 2 devices (CUDA_NVIDIA_H100, CUDA_NVIDIA_H200)" in err
    kd = tmp_path / "kernel_details.csv"
    kd.write_text(kernel_details_text([kd_row("MatMulV2", 3.0)]))
    code, _, err = npuperf("parse", "--profile", kd, tmp_path / "in" / "a_trace.json", "--db", db)
    assert code == 2 and "CUDA_NVIDIA_H200, npu (kernel tables)" in err
    cpu = KinetoTrace()  # operators, no device activity: a CPU trace
    cpu.op("aten::mm", [[16, 64], [64, 32]], FLOAT)
    code, _, err = npuperf("parse", "--profile", cpu.write(tmp_path / "c_trace.json"),
                           tmp_path / "in" / "a_trace.json", "--db", db)
    assert code == 2 and "taken on 2 devices" in err
    assert tree_digest(db) == before


# -- gzip ----------------------------------------------------------------------------------------
def test_a_gzip_trace_is_read_as_torch_writes_it(tmp_path, npuperf):
    """torch's tensorboard handler writes `<worker>.<time>.pt.trace.json.gz`: it was refused
    as "NUL byte ... not CSV" (a file) or not found (in a directory)."""
    trace, _, _ = _one_gemm()
    plain = trace.write(tmp_path / "plain.json")
    (tmp_path / "tb").mkdir()
    packed = tmp_path / "tb" / "host_1234.1700000000000.pt.trace.json.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    for profile in (packed, tmp_path / "tb"):
        code, out, err = npuperf("parse", "--profile", profile, "--db", tmp_path / "db",
                                 "--dry-run")
        assert code == 0, err
        assert f"{packed}: cuda NVIDIA H200 trace, 1 mapped call(s)" in out
    assert list(read_events(packed, {})) == list(read_events(plain, {}))


def test_a_cut_or_false_gzip_trace_is_one_line(tmp_path, npuperf):
    trace, _, _ = _one_gemm()
    data = gzip.compress(json.dumps({"traceEvents": trace.events}).encode())
    for name, content in (("cut.pt.trace.json.gz", data[:len(data) // 2]),
                          ("false.pt.trace.json.gz", data[:10] + b"\0" * 40)):
        path = tmp_path / name
        path.write_bytes(content)
        code, _, err = npuperf("parse", "--profile", path, "--db", tmp_path / "db")
        assert code == 1 and f"{path}: a damaged or cut gzip file" in err, err
        assert len(err.strip().splitlines()) == 1


# -- streaming -----------------------------------------------------------------------------------
class _CountingDecoder(json.JSONDecoder):
    scanned = 0

    def raw_decode(self, s, idx=0):
        _CountingDecoder.scanned += len(s) - idx
        return super().raw_decode(s, idx)


def test_one_huge_event_is_decoded_in_linear_work(tmp_path, monkeypatch):
    """Decoded again after every chunk, one event of 60 MB took more than 65 s: the work
    (characters handed to the decoder) now stays within a few times the event's size."""
    monkeypatch.setattr(chrome_trace, "CHUNK_CHARS", 1 << 10)
    monkeypatch.setattr(chrome_trace.json, "JSONDecoder", _CountingDecoder)
    _CountingDecoder.scanned = 0
    event = {"ph": "X", "cat": "cpu_op", "name": "x", "ts": 1, "dur": 1,
             "args": {"Input Dims": [[1, 2]] * 30_000}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": [event, event]}))
    assert list(read_events(path, {})) == [event, event]
    size = path.stat().st_size
    assert _CountingDecoder.scanned < 4 * size, (_CountingDecoder.scanned, size)


def test_megabytes_of_blanks_across_chunks_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome_trace, "CHUNK_CHARS", 1000)
    event = {"ph": "X", "ts": 1}
    path = tmp_path / "t.json"
    path.write_text(" \n" * (1 << 20) + '{"traceEvents": [' + json.dumps(event) + "\t\r\n" * 50_000
                    + "," + json.dumps(event) + " " * 3333 + "]" + "\n" * 10_000 + "}  ")
    assert list(read_events(path, {})) == [event, event]


def test_a_value_past_the_limit_is_refused_even_when_read_in_doubling_windows(tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(chrome_trace, "MAX_VALUE_CHARS", 10_000)
    monkeypatch.setattr(chrome_trace, "CHUNK_CHARS", 1000)
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": [{"ph": "X", "args": ' + json.dumps([1] * 20_000) + "}]}")
    with pytest.raises(ContractError, match="one value is longer than"):
        list(read_events(path, {}))
