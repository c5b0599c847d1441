"""Kernel specs on the CPU: rows become correct calls; bad rows fail with their location."""

from __future__ import annotations

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import REGISTRY, replayable_types, slot_layout, spec_for

CPU = CpuBackend()
FIRST_KERNELS = {"MatMulV2", "MatMulV3", "MatMulCommon", "BatchMatMulV2", "RmsNorm", "SwiGlu",
                 "SoftmaxV2", "Add"}


def row(shapes, dtypes, formats, out_shapes, out_dtypes, out_formats=""):
    return {"Input Shapes": shapes, "Input Data Types": dtypes, "Input Formats": formats,
            "Output Shapes": out_shapes, "Output Data Types": out_dtypes,
            "Output Formats": out_formats}


def prepare(kernel_type, cells, **where):
    case = case_from_row(kernel_type, cells, **where)
    return case, spec_for(kernel_type).prepare(case, CPU)


def test_first_kernels_are_registered_with_layouts():
    assert set(replayable_types()) >= FIRST_KERNELS
    assert spec_for("MatMulV3") is spec_for("MatMulV2") is spec_for("MatMulCommon")
    inputs, outputs = slot_layout("RmsNorm")
    assert [s.name for s in inputs] == ["x", "gamma"]
    assert outputs[1].dtype == "DT_FLOAT"
    assert spec_for("NoSuchKernel") is None and slot_layout("NoSuchKernel") is None
    for spec in set(REGISTRY.values()):
        assert spec.npu_api


@pytest.mark.parametrize("weight, transposed", [("32,64", True), ("64,32", False)])
def test_matmul_follows_the_stored_orientation_of_the_weight(weight, transposed):
    _case, prepared = prepare("MatMulV2", row(f"8,64;{weight}", "DT_FLOAT;DT_FLOAT", "ND;ND",
                                             "8,32", "DT_FLOAT"))
    a, b = prepared.tensors["a"], prepared.tensors["b"]
    expected = a @ (b.t() if transposed else b)
    torch.testing.assert_close(prepared.call(), expected)
    assert prepared.flops == 2 * 8 * 32 * 64
    assert prepared.bytes == (8 * 64 + 32 * 64 + 8 * 32) * 4


def test_matmul_with_bias_and_a_fractal_nz_weight_on_cpu():
    # FRACTAL_NZ (2, 4, 16, 16) is the ND matrix (64, 32): built as ND off the NPU.
    _case, prepared = prepare("MatMulV3", row("8,64;2,4,16,16;32", "DT_FLOAT;DT_FLOAT;DT_FLOAT",
                                             "ND;FRACTAL_NZ;ND", "8,32", "DT_FLOAT"))
    assert tuple(prepared.tensors["b"].shape) == (64, 32)
    t = prepared.tensors
    torch.testing.assert_close(prepared.call(), torch.addmm(t["bias"], t["a"], t["b"]))


def test_matmul_rejects_shapes_that_are_not_a_product():
    with pytest.raises(CellError) as err:
        prepare("MatMulV2", row("8,64;32,48", "DT_BF16;DT_BF16", "ND;ND", "8,32", "DT_BF16"),
                file="db/MatMulV2.csv", row_number=12)
    message = str(err.value)
    assert "db/MatMulV2.csv" in message and "row 12" in message and "Input Shapes" in message


@pytest.mark.parametrize("b_shape, out", [("2,32,16", "2,8,16"), ("2,16,32", "2,8,16")])
def test_batch_matmul_orientations(b_shape, out):
    _case, prepared = prepare("BatchMatMulV2", row(f"2,8,32;{b_shape}", "DT_FLOAT;DT_FLOAT",
                                                  "ND;ND", out, "DT_FLOAT"))
    a, b = prepared.tensors["a"], prepared.tensors["b"]
    b = b if b_shape == "2,32,16" else b.transpose(-1, -2)
    torch.testing.assert_close(prepared.call(), torch.matmul(a, b))
    assert prepared.flops == 2 * 2 * 8 * 16 * 32


def test_rms_norm_matches_the_definition():
    _case, prepared = prepare("RmsNorm", row("4,64;64", "DT_FLOAT;DT_FLOAT", "ND;ND",
                                            "4,64;4,1", "DT_FLOAT;DT_FLOAT"))
    x, gamma = prepared.tensors["x"], prepared.tensors["gamma"]
    y, rstd = prepared.call()
    expected_rstd = 1 / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rstd, expected_rstd)
    torch.testing.assert_close(y, x * expected_rstd * gamma)


def test_rms_norm_checks_gamma_against_x():
    with pytest.raises(CellError, match="gamma"):
        prepare("RmsNorm", row("4,64;32", "DT_BF16;DT_BF16", "ND;ND", "4,64;4,1",
                               "DT_BF16;DT_FLOAT"))


def test_swiglu_and_softmax():
    _, prepared = prepare("SwiGlu", row("4,64", "DT_FLOAT", "ND", "4,32", "DT_FLOAT"))
    x = prepared.tensors["x"]
    torch.testing.assert_close(prepared.call(),
                               torch.nn.functional.silu(x[:, :32]) * x[:, 32:])
    with pytest.raises(CellError, match="even"):
        prepare("SwiGlu", row("4,63", "DT_FLOAT", "ND", "4,31", "DT_FLOAT"))
    _, prepared = prepare("SoftmaxV2", row("4,64", "DT_FLOAT", "ND", "4,64", "DT_FLOAT"))
    torch.testing.assert_close(prepared.call().sum(-1), torch.ones(4))


def test_add_broadcasts_and_takes_scalars_from_empty_slots_with_a_dtype():
    _, prepared = prepare("Add", row("512,2,64;512,2,64", "DT_BF16;DT_BF16", "NCL;NCL",
                                     "512,2,64", "DT_BF16"))
    assert tuple(prepared.call().shape) == (512, 2, 64)
    # A real profiler row: two FLOAT scalars written as empty slots.
    _, prepared = prepare("Add", row('";"', "FLOAT;FLOAT", "ND;ND", '""', "FLOAT"))
    assert prepared.call().dim() == 0
    with pytest.raises(CellError, match="do not broadcast"):
        prepare("Add", row("4,3;4,5", "DT_FLOAT;DT_FLOAT", "ND;ND", "4,5", "DT_FLOAT"))


def test_inputs_are_valid_and_repeatable():
    cells = row("64,256;128,256", "DT_BF16;DT_BF16", "ND;ND", "64,128", "DT_BF16")
    _, first = prepare("MatMulV2", cells, file="x.csv")
    _, second = prepare("MatMulV2", cells, file="x.csv")
    for name in ("a", "b"):
        tensor = first.tensors[name]
        assert torch.isfinite(tensor.float()).all()
        assert tensor.float().std() > 0.5  # random data, not zeros or uninitialised memory
        torch.testing.assert_close(tensor, second.tensors[name])


def test_unknown_dtype_and_malformed_cell_name_file_row_column():
    with pytest.raises(CellError) as err:
        prepare("RmsNorm", row("4,64;64", "DT_WEIRD;DT_BF16", "ND;ND", "4,64;4,1",
                               "DT_BF16;DT_FLOAT"), file="db/RmsNorm.csv", row_number=3)
    assert "DT_WEIRD" in str(err.value) and "row 3" in str(err.value)
    assert "Input Data Types" in str(err.value)
    with pytest.raises(CellError) as err:
        case_from_row("RmsNorm", row("4,6x4;64", "DT_BF16;DT_BF16", "ND;ND", "4,64;4,1",
                                     "DT_BF16;DT_FLOAT"), file="db/RmsNorm.csv", row_number=5)
    assert "row 5" in str(err.value) and "'Input Shapes'" in str(err.value)
    with pytest.raises(CellError, match="2 entries for 1 shape slot"):
        case_from_row("SwiGlu", row("4,64", "DT_BF16;DT_BF16", "ND", "4,32", "DT_BF16"))


def test_required_slot_empty_is_an_error():
    with pytest.raises(CellError, match="input slot 1"):
        prepare("RmsNorm", row("4,64;", "DT_BF16;DT_UNDEFINED", "ND;NULL", "4,64;4,1",
                               "DT_BF16;DT_FLOAT"))
