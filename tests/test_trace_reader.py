"""Reading profiler traces (issue 18): Chrome trace JSON streamed event by event, and a trace's
operator calls with their in-model device time, checked against independent sums of the
trace's own events."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from pytest_npuperf.db.errors import ContractError, NpuperfError
from pytest_npuperf.ingest import chrome_trace
from pytest_npuperf.ingest.chrome_trace import read_events
from pytest_npuperf.ingest.trace import KIND_CPU, KIND_CUDA, KIND_NPU, NO_OPERATOR, read_trace
from pytest_npuperf.kernels.torch_ops import TorchOperators
from tests.real_samples import REALDATA, needs
from tests.trace_data import GPU, cpu_trace, npu_trace_with_shapes, transformer_gpu_trace

TRACE_VIEW = REALDATA / "trace_view" / "mstt_advisor_timeline_trace_view_TRIMMED.json"
OPERATORS = TorchOperators()


@pytest.fixture(scope="module")
def cpu_trace_path(tmp_path_factory) -> Path:
    return cpu_trace(tmp_path_factory.mktemp("trace") / "cpu.json")


def _all(path: Path) -> tuple[list[dict], dict]:
    meta: dict = {}
    return list(read_events(path, meta)), meta


# -- the JSON reader -----------------------------------------------------------------------------
def test_events_are_read_one_by_one_across_chunk_boundaries(cpu_trace_path, monkeypatch):
    whole = json.loads(cpu_trace_path.read_text())
    monkeypatch.setattr(chrome_trace, "CHUNK_CHARS", 97)  # every event split across reads
    events, meta = _all(cpu_trace_path)
    assert events == whole["traceEvents"]
    assert meta["schemaVersion"] == whole["schemaVersion"] and "traceName" in meta


def test_a_bare_array_of_events_is_a_trace_too(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('\ufeff[{"ph": "X", "ts": "12.5", "dur": 1}, {"ph": "M", "pid": 3}]')
    assert _all(path)[0] == [{"ph": "X", "ts": "12.5", "dur": 1}, {"ph": "M", "pid": 3}]


@pytest.mark.parametrize(("text", "problem"), [
    ('{"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts"', "truncated"),
    ('{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', "expected ',' or ']'"),
    ("not json at all", "not a JSON trace"),
    ("", "empty file"),
    ('{"schemaVersion": 1, "events": []}', "without traceEvents"),
    ('{"traceEvents": [1, 2]}', "not a trace event"),
    ('[{"name": "x"}]', "not a trace event"),
])
def test_what_is_not_a_trace_is_one_line_naming_the_place(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ContractError, match=problem) as caught:
        _all(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_binary_data_is_not_read_as_a_trace(tmp_path):
    path = tmp_path / "bin.json"
    path.write_bytes(b'{"traceEvents": [\xff\xfe\x00]}')
    with pytest.raises(ContractError, match="not UTF-8"):
        _all(path)


def test_a_huge_value_is_refused_not_read_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(chrome_trace, "MAX_VALUE_CHARS", 1000)
    monkeypatch.setattr(chrome_trace, "CHUNK_CHARS", 100)
    path = tmp_path / "big.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "' + "a" * 5000 + '"}]}')
    with pytest.raises(ContractError, match="longer than"):
        _all(path)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(NpuperfError, match="no such file"):
        _all(tmp_path / "none.json")


# -- operator calls of a CPU trace ----------------------------------------------------------------
def _independent_cpu_calls(path: Path) -> dict[str, list[tuple[list, float]]]:
    """Per mapped operator, (input dims, duration) of each call, from the raw events: a
    mapped call's time is its duration (none of these ops nests another mapped op)."""
    found = defaultdict(list)
    for event in json.loads(path.read_text())["traceEvents"]:
        if event.get("cat") == "cpu_op" and OPERATORS.is_mapped(event["name"]):
            found[event["name"]].append((event["args"]["Input Dims"], event["dur"]))
    return found


def test_a_cpu_trace_gives_each_mapped_call_its_own_time(cpu_trace_path):
    profile = read_trace(cpu_trace_path, OPERATORS.is_mapped)
    assert profile.device.kind == KIND_CPU
    expected = _independent_cpu_calls(cpu_trace_path)
    got = defaultdict(list)
    for call in profile.calls:
        got[call.name].append((call.dims, round(call.device_us, 6)))
    assert {k: sorted(map(str, v)) for k, v in got.items()} == \
        {k: sorted(str((d, round(us, 6))) for d, us in v) for k, v in expected.items()}
    assert set(expected) == {"aten::mm", "aten::addmm", "aten::_softmax", "aten::bmm",
                             "aten::embedding", "aten::add"}
    # Nothing lost: mapped and unmapped time add up to the top-level operators' time.
    top = _top_level_time(cpu_trace_path)
    assert profile.total_us == pytest.approx(top)
    assert profile.mapped_us + sum(profile.unmapped.values()) == pytest.approx(top, rel=1e-9)


def _top_level_time(path: Path) -> float:
    ops = sorted(((e["ts"], e["dur"]) for e in json.loads(path.read_text())["traceEvents"]
                  if e.get("cat") == "cpu_op"), key=lambda o: (o[0], -o[1]))
    total, end = 0.0, float("-inf")
    for start, dur in ops:
        if start >= end:  # not inside the operator before it
            total += dur
            end = start + dur
    return total


def test_a_trace_without_shapes_is_one_line_saying_record_shapes(tmp_path):
    path = cpu_trace(tmp_path / "noshapes.json", record_shapes=False)
    with pytest.raises(ContractError, match="record_shapes=True"):
        read_trace(path, OPERATORS.is_mapped)


def test_a_trace_of_another_profiler_is_refused(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "frame", "ts": 1, "dur": 2,
                                                 "pid": 1, "tid": 1, "cat": "rendering"}]}))
    with pytest.raises(ContractError, match="no operator events"):
        read_trace(path, OPERATORS.is_mapped)


# -- a CUDA trace: kernels to the operators that launched them ----------------------------------
def test_each_gemm_of_a_transformer_layer_gets_the_sum_of_its_kernels(tmp_path):
    path, expected = transformer_gpu_trace(tmp_path / "llama.json")
    profile = read_trace(path, OPERATORS.is_mapped)
    assert profile.device.kind == KIND_CUDA and profile.device.name == GPU
    gemms = defaultdict(list)
    for call in profile.calls:
        if call.name == "aten::mm":
            (m, k), (_, n) = call.dims
            gemms[(m, k, n)].append(call.device_us)
    assert {k: sorted(v) for k, v in gemms.items()} == {k: sorted(v) for k, v in expected.items()}
    # The o projection's split-K reduction names no External id: found by its correlation.
    assert sum(map(len, expected.values())) == 14
    events = json.loads(path.read_text())["traceEvents"]
    device = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy"))
    assert profile.total_us == pytest.approx(device)
    assert profile.mapped_us + sum(profile.unmapped.values()) == pytest.approx(device)
    assert profile.unmapped_operators()["aten::scaled_dot_product_attention"] == \
        pytest.approx(24.0)
    assert profile.unmapped_operators()["aten::copy_"] == pytest.approx(5.0)  # a memcpy where it belongs


def test_a_kernel_outside_any_operator_is_counted_not_dropped(tmp_path):
    from tests.trace_data import KinetoTrace

    trace = KinetoTrace()
    mm = trace.op("aten::mm", [[4, 8], [8, 2]], ["float", "float"])
    trace.launch(mm, 3.0)
    trace.events.append({"ph": "X", "cat": "kernel", "name": "nccl", "pid": 0, "tid": 9,
                         "ts": 5.0, "dur": 7.0, "args": {"correlation": 999}})
    profile = read_trace(trace.write(tmp_path / "t.json"), OPERATORS.is_mapped)
    assert profile.unmapped == {NO_OPERATOR: 7.0} and profile.mapped_us == 3.0


# -- torch_npu's trace_view.json ------------------------------------------------------------------
needs_realdata = needs(TRACE_VIEW)


@needs_realdata
def test_the_real_trace_view_sample_is_read_and_says_it_has_no_shapes():
    with pytest.raises(ContractError, match="none of its 25 operators carries input shapes"):
        read_trace(TRACE_VIEW, OPERATORS.is_mapped)


@needs_realdata
def test_npu_tasks_are_joined_to_their_operators_by_the_async_npu_flows(tmp_path):
    path, linked = npu_trace_with_shapes(TRACE_VIEW, tmp_path / "trace_view.json")
    profile = read_trace(path, OPERATORS.is_mapped)
    assert profile.device.kind == KIND_NPU and linked > 0
    assert profile.mapped_us == pytest.approx(linked)
    tasks = [e for e in json.loads(TRACE_VIEW.read_text())
             if e.get("ph") == "X" and e.get("cat") is None and e.get("pid") == 800]
    assert profile.total_us == pytest.approx(sum(float(t["dur"]) for t in tasks))
    # Host API calls and the overlap analysis are not device time.
    assert profile.total_us < sum(float(e.get("dur", 0)) for e in json.loads(
        TRACE_VIEW.read_text()) if e.get("ph") == "X" and e.get("cat") is None)
