"""Every dtype parse writes is spelled as real profiler output spells it, which is what the
simulator matches (docs/format.md §3): the whole family, from kernel tables (`DT_UINT8`, `UINT16`)
and from torch.profiler traces (`unsigned char`, `short unsigned int`, a 0-dim operand)."""

from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from pytest_npuperf.cli import main
from pytest_npuperf.db.consumer_check import kernel_table_warnings
from pytest_npuperf.db.shapes import DTYPE_BYTES, profiler_dtype, tensor_dtype
from pytest_npuperf.db.table import read_table
from tests.real_samples import ABSENT, REALDATA

# torch dtype -> the token a database row carries (the profiler's spelling).
WRITTEN = {
    torch.float32: "FLOAT", torch.float16: "FLOAT16", torch.bfloat16: "DT_BF16",
    torch.float64: "DOUBLE", torch.int8: "INT8", torch.int16: "INT16", torch.int32: "INT32",
    torch.int64: "INT64", torch.uint8: "UINT8", torch.uint16: "UINT16", torch.uint32: "UINT32",
    torch.uint64: "UINT64", torch.bool: "BOOL", torch.complex64: "COMPLEX64",
    torch.complex128: "COMPLEX128", torch.complex32: "DT_COMPLEX32",
    torch.float8_e4m3fn: "DT_FLOAT8_E4M3", torch.float8_e5m2: "DT_FLOAT8_E5M2",
    torch.float8_e4m3fnuz: "DT_FLOAT8_E4M3", torch.float8_e5m2fnuz: "DT_FLOAT8_E5M2",
    torch.float8_e8m0fnu: "DT_FLOAT8_E8M0",
}


def _profiled_type_names(tmp_path) -> dict[torch.dtype, str]:
    """What a torch.profiler trace writes as `Input type` for a tensor of each dtype."""
    tensors = {dtype: torch.empty(4, dtype=dtype) for dtype in WRITTEN}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for tensor in tensors.values():
            torch.ops.aten.alias(tensor)
    trace = tmp_path / "dtypes_trace.json"
    prof.export_chrome_trace(str(trace))
    events = sorted((e for e in json.loads(trace.read_text())["traceEvents"]
                     if e.get("name") == "aten::alias"), key=lambda e: e["ts"])
    assert len(events) == len(WRITTEN)
    return {dtype: e["args"]["Input type"][0] for dtype, e in zip(WRITTEN, events)}


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_every_torch_dtype_a_trace_names_is_written_in_the_profilers_spelling(tmp_path):
    names = _profiled_type_names(tmp_path)
    assert names[torch.uint16] == "short unsigned int"  # what the earlier table missed
    assert {dtype: tensor_dtype(name) for dtype, name in names.items()} == WRITTEN


@pytest.mark.parametrize(("token", "written"), [
    ("DT_UINT8", "UINT8"), ("DT_UINT16", "UINT16"), ("uint16", "UINT16"), ("DT_INT32", "INT32"),
    ("DT_QINT8", "QINT8"), ("DT_QUINT16", "QUINT16"), ("DT_HIFLOAT8", "DT_HIFLOAT8"),
    ("DT_FLOAT8_E4M3FN", "DT_FLOAT8_E4M3"), ("DT_INT4", "DT_INT4"), ("DT_UINT1", "DT_UINT1"),
    ("DT_FLOAT6_E2M3", "DT_FLOAT6_E2M3"), ("c10::complex<c10::Half>", "DT_COMPLEX32"),
    ("torch.cfloat", "COMPLEX64")])
def test_the_torch_npu_family_is_known_and_spelled_as_the_profiler_does(token, written):
    assert profiler_dtype(token) == written
    assert f"DT_{written.removeprefix('DT_')}" in DTYPE_BYTES


@pytest.mark.parametrize("name", ["Scalar", "ScalarList", "", "GenericList", "TensorList"])
def test_what_is_not_a_tensor_type_has_no_dtype(name):
    assert tensor_dtype(name) is None


def test_a_trace_of_unsigned_and_int32_tensors_parses_to_rows_the_simulator_can_read(tmp_path,
                                                                                     capsys):
    x8 = torch.randint(0, 200, (64, 64), dtype=torch.uint8)
    i32 = torch.randint(0, 60, (64,), dtype=torch.int32)
    table = torch.randn(100, 64)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(2):
            torch.add(x8, x8)
            torch.nn.functional.embedding(i32, table)
            torch.argmax(x8, dim=-1)
            torch.add(i32, 1)  # the number: a 0-dim INT64 slot of the Add kernel
    trace = tmp_path / "resnet_like_trace.json"
    prof.export_chrome_trace(str(trace))
    assert "unsigned char" in json.dumps(json.loads(trace.read_text()))
    db = tmp_path / "db"
    assert main(["parse", "--profile", str(trace), "--db", str(db), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "inputs not converted" not in out
    rows = {kind: read_table(db / f"{kind}.csv") for kind in ("Add", "GatherV2", "ArgMaxV2")}
    add = {tuple(r) for r in rows["Add"][["Input Shapes", "Input Data Types",
                                          "Output Data Types"]].values.tolist()}
    assert add == {("64,64;64,64", "UINT8;UINT8", "UINT8"), ("64;", "INT32;INT64", "INT32")}
    assert rows["GatherV2"]["Input Data Types"].tolist() == ["FLOAT;INT32;INT64"]
    assert rows["ArgMaxV2"]["Input Data Types"].tolist() == ["UINT8"]
    for kind, frame in rows.items():
        assert not [w for w in kernel_table_warnings(frame, kind) if "dtype" in w[2]], kind


def test_the_real_kernel_table_keeps_its_spellings(tmp_path, capsys):
    source = REALDATA / "kernel_details" / "mstt_advisor_compute_advice_2025_kernel_details.csv"
    if not source.is_file():
        pytest.skip(ABSENT)
    assert main(["parse", "--profile", str(source), "--db", str(tmp_path), "--quiet"]) == 0
    capsys.readouterr()
    fa = read_table(tmp_path / "FlashAttentionScore.csv")
    assert fa["Input Data Types"][0] == \
        "DT_BF16;DT_BF16;DT_BF16;DT_BF16;UINT8;DT_BF16;BOOL;INT64;INT64;INT64;INT64;INT64"
    assert not [w for w in kernel_table_warnings(fa, "FlashAttentionScore") if "dtype" in w[2]]
