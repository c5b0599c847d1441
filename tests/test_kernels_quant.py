"""Quantisation and quantised / transposed GEMM replays (QuantBatchMatmulV3, AscendQuantV2,
DynamicQuant, TransposeBatchMatMul): outputs against int64 / float64 numpy; the NPU calls
against the upstream schemas of each supported stack (tests/npu_standin.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.devices.npu import FRACTAL_NZ_FORMAT_ID
from pytest_npuperf.kernels.quant import QUANT_PARAM_FLAG, quant_param, quant_param_scale
from tests.kernel_rows import CPU, f64, prepare, row
from tests.npu_standin import STACKS, npu_backend, only_call, same_dtype

F32, BF16, I8, I32, I64 = "DT_FLOAT", "DT_BF16", "DT_INT8", "DT_INT32", "DT_INT64"


def ints(t: torch.Tensor) -> np.ndarray:
    return t.numpy().astype(np.int64)


def float_of_bits(t: torch.Tensor) -> np.ndarray:
    return t.numpy().astype(np.uint32).view(np.float32).astype(np.float64)


# -- QuantBatchMatmulV3 -----------------------------------------------------------------------
# x2 FRACTAL_NZ (N/32, K/16, 16, 32) is the ND (K, N) = (32, 64) weight.
QUANT_NZ = row([((8, 32), I8), ((2, 2, 16, 32), I8, "FRACTAL_NZ"), ((64,), F32), None, None,
                ((8,), F32)], [((8, 64), BF16)])


def test_quant_matmul_dequantises_int_sums_per_channel_and_token():
    _, prepared = prepare("QuantBatchMatmulV3", QUANT_NZ)
    t = prepared.tensors
    assert t["x2"].shape == (32, 64)
    want = (ints(t["x1"]) @ ints(t["x2"])) * f64(t["scale"]) * f64(t["pertoken_scale"])[:, None]
    got = prepared.call()
    assert got.dtype == torch.bfloat16 and got.shape == (8, 64)
    np.testing.assert_allclose(f64(got), want, rtol=1e-2, atol=1e-3)
    assert prepared.implementation == "eager: float32 GEMM (int8 emulated)"  # _int_mm: CUDA only
    assert prepared.flops == 2 * 8 * 32 * 64


def test_quant_matmul_with_int64_scale_int32_bias_and_a_stored_transposed_weight():
    cells = row([((8, 32), I8), ((64, 32), I8), ((64,), I64), None, ((64,), I32)],
                [((8, 64), F32)])
    _, prepared = prepare("QuantBatchMatmulV3", cells)
    t = prepared.tensors
    scale = float_of_bits(t["scale"])
    want = (ints(t["x1"]) @ ints(t["x2"]).T + ints(t["bias"])) * scale
    np.testing.assert_allclose(f64(prepared.call()), want, rtol=1e-5)


def test_quant_matmul_int8_output_adds_the_offset_and_saturates():
    cells = row([((4, 32), I8), ((64, 32), I8), ((64,), F32), ((64,), F32)], [((4, 64), I8)])
    _, prepared = prepare("QuantBatchMatmulV3", cells)
    t = prepared.tensors
    want = np.clip(np.rint((ints(t["x1"]) @ ints(t["x2"]).T) * f64(t["scale"])
                           + f64(t["offset"])), -128, 127)
    got = prepared.call()
    assert got.dtype == torch.int8 and np.abs(f64(got) - want).max() <= 1


def test_quant_matmul_rejects_what_it_cannot_replay():
    with pytest.raises(CellError, match="transposed x1"):
        prepare("QuantBatchMatmulV3", row([((32, 8), I8), ((64, 32), I8), ((64,), F32)],
                                          [((8, 64), BF16)]))
    with pytest.raises(CellError, match="do not form"):
        prepare("QuantBatchMatmulV3", row([((8, 32), I8), ((64, 16), I8), ((64,), F32)],
                                          [((8, 64), BF16)]))


@pytest.mark.parametrize("stack", STACKS)
def test_quant_matmul_npu_call(stack):
    calls: list = []
    prepare("QuantBatchMatmulV3", QUANT_NZ, npu_backend(calls, stack))[1].call()
    cast = only_call(calls, "npu_format_cast")
    assert (tuple(cast["self"].shape), cast["acl_format"]) == ((32, 64), FRACTAL_NZ_FORMAT_ID)
    args = only_call(calls, "npu_quant_matmul")
    assert args["x1"].dtype == torch.int8 and args["x2"].shape == (32, 64)
    assert args["scale"].dtype == torch.float32 and args["pertoken_scale"].shape == (8,)
    assert (args["offset"], args["bias"]) == (None, None)
    assert same_dtype(args["output_dtype"], torch.bfloat16)


def test_an_nz_weight_stored_transposed_is_built_k_by_n_then_cast_never_a_view():
    # x2 FRACTAL_NZ (1, 4, 16, 32) is the ND (N, K) = (64, 32): read transposed.
    cells = row([((8, 32), I8), ((1, 4, 16, 32), I8, "FRACTAL_NZ"), ((64,), F32)],
                [((8, 64), BF16)])
    calls: list = []
    _, prepared = prepare("QuantBatchMatmulV3", cells, npu_backend(calls))
    prepared.call()
    assert tuple(only_call(calls, "npu_format_cast")["self"].shape) == (32, 64)
    x2 = only_call(calls, "npu_quant_matmul")["x2"]
    assert x2.shape == (32, 64) and x2.is_contiguous()
    _, portable = prepare("QuantBatchMatmulV3", cells)
    t = portable.tensors
    want = (ints(t["x1"]) @ ints(t["x2"])) * f64(t["scale"])
    np.testing.assert_allclose(f64(portable.call()), want, rtol=1e-2, atol=1e-3)


def test_an_int64_scale_is_npu_trans_quant_param_with_the_offset_folded_in():
    cells = row([((4, 32), I8), ((64, 32), I8), ((64,), I64), ((64,), F32)], [((4, 64), I8)])
    for stack in STACKS:
        calls: list = []
        _, prepared = prepare("QuantBatchMatmulV3", cells, npu_backend(calls, stack))
        prepared.call()
        trans = only_call(calls, "npu_trans_quant_param")
        assert trans["scale"].dtype == torch.float32 and trans["scale"].shape == (64,)
        assert torch.equal(trans["offset"], prepared.tensors["offset"])
        # the kernel reads the float scale truncated to 19 bits: the portable path uses that
        assert torch.equal(trans["scale"], quant_param_scale(trans["scale"]))
        args = only_call(calls, "npu_quant_matmul")
        assert args["scale"] is not trans["scale"] and args["offset"] is None


def test_quant_param_off_the_npu_is_op_plugins_documented_formula():
    packed = quant_param(torch.tensor([1.0, 0.1]), CPU)
    assert packed.dtype == torch.int64
    # torch_npu-npu_trans_quant_param.md: (bits & 0xFFFFE000) | (1 << 46)
    assert packed.tolist() == [0x3F800000 | QUANT_PARAM_FLAG, (0x3DCCCCCD & 0xFFFFE000)
                               | QUANT_PARAM_FLAG]


# -- AscendQuantV2 ----------------------------------------------------------------------------
def test_ascend_quant_is_round_half_even_of_x_times_scale_plus_offset_saturated():
    _, prepared = prepare("AscendQuantV2", row([((4, 16), BF16), ((16,), BF16), ((16,), BF16)],
                                               [((4, 16), I8)]))
    t = prepared.tensors
    assert torch.isfinite(t["scale"].float()).all() and (t["scale"] > 0).all()
    want = np.clip(np.rint(f64(t["x"]) * f64(t["scale"]) + f64(t["offset"])), -128, 127)
    got = prepared.call()
    assert got.dtype == torch.int8
    np.testing.assert_array_equal(f64(got), want)
    # An empty offset slot (symmetric quantisation) and one scale for the whole tensor.
    _, prepared = prepare("AscendQuantV2", row([((4, 16), F32), ((1,), F32), None],
                                               [((4, 16), I8)]))
    t = prepared.tensors
    np.testing.assert_array_equal(
        f64(prepared.call()), np.clip(np.rint(f64(t["x"]) * f64(t["scale"])), -128, 127))


@pytest.mark.parametrize("stack", STACKS)
def test_ascend_quant_npu_call_is_npu_quantize_in_multiply_mode(stack):
    # torch_npu 2.9.0 declares `ScalarType dtype`, 2.10 `int dtype`: torch.qint8 binds to both
    calls: list = []
    prepare("AscendQuantV2", row([((4, 16), BF16), ((16,), BF16), None], [((4, 16), I8)]),
            npu_backend(calls, stack))[1].call()
    args = only_call(calls, "npu_quantize")
    assert args["self"].shape == (4, 16) and args["zero_points"] is None
    assert same_dtype(args["dtype"], torch.qint8)
    assert (args["axis"], args["div_mode"]) == (-1, False)


# -- DynamicQuant -----------------------------------------------------------------------------
def test_dynamic_quant_scales_each_row_by_its_absolute_maximum():
    _, prepared = prepare("DynamicQuant", row([((6, 32), BF16)], [((6, 32), I8), ((6,), F32)]))
    y, scale = prepared.call()
    x = f64(prepared.tensors["x"])
    want_scale = np.abs(x).max(axis=1) / 127
    np.testing.assert_allclose(f64(scale), want_scale, rtol=1e-6)
    np.testing.assert_array_equal(f64(y), np.rint(x / want_scale[:, None]))


def test_dynamic_quant_with_smooth_scales_per_group_of_rows():
    cells = row([((6, 32), F32), ((3, 32), F32), ((3,), I32)], [((6, 32), I8), ((6,), F32)])
    _, prepared = prepare("DynamicQuant", cells)
    t = prepared.tensors
    ends = t["group_index"].tolist()
    assert ends[-1] == 6 and ends == sorted(ends)
    group = np.searchsorted(ends, np.arange(6), side="right")
    x = f64(t["x"]) * f64(t["smooth_scales"])[group]
    want_scale = np.abs(x).max(axis=1) / 127
    y, scale = prepared.call()
    np.testing.assert_allclose(f64(scale), want_scale, rtol=1e-6)
    assert np.abs(f64(y) - np.rint(x / want_scale[:, None])).max() <= 1


def test_dynamic_quant_npu_call():
    calls: list = []
    cells = row([((6, 32), BF16), ((32,), BF16)], [((6, 32), I8), ((6,), F32)])
    prepare("DynamicQuant", cells, npu_backend(calls))[1].call()
    args = only_call(calls, "npu_dynamic_quant")
    assert args["input"].shape == (6, 32) and args["smooth_scales"].shape == (32,)
    assert args["group_index"] is None


# -- TransposeBatchMatMul ---------------------------------------------------------------------
@pytest.mark.parametrize("x1, out, mbk", [((4, 3, 16), (4, 3, 8), True),
                                          ((3, 5, 16), (5, 3, 8), False)])
def test_transpose_batch_matmul_puts_the_batch_in_the_middle(x1, out, mbk):
    _, prepared = prepare("TransposeBatchMatMul", row([(x1, F32), ((3, 16, 8), F32)],
                                                      [(out, F32)]))
    t = prepared.tensors
    a = f64(t["x1"]) if mbk else f64(t["x1"]).transpose(1, 0, 2)
    got = prepared.call()
    assert got.is_contiguous()
    np.testing.assert_allclose(f64(got), np.einsum("mbk,bkn->mbn", a, f64(t["x2"])), atol=1e-5)


def test_transpose_batch_matmul_with_a_scale_quantises_to_int8():
    cells = row([((4, 3, 16), F32), ((3, 16, 8), F32), None, ((24,), I64)], [((4, 1, 24), I8)])
    _, prepared = prepare("TransposeBatchMatMul", cells)
    t = prepared.tensors
    y = np.einsum("mbk,bkn->mbn", f64(t["x1"]), f64(t["x2"])).reshape(4, 1, 24)
    want = np.clip(np.rint(y * float_of_bits(t["scale"])), -128, 127)
    got = prepared.call()
    assert got.dtype == torch.int8 and np.abs(f64(got) - want).max() <= 1


def test_transpose_batch_matmul_npu_call():
    calls: list = []
    prepare("TransposeBatchMatMul", row([((4, 3, 16), BF16), ((3, 16, 8), BF16)],
                                        [((4, 3, 8), BF16)]), npu_backend(calls))[1].call()
    args = only_call(calls, "npu_transpose_batchmatmul")
    assert (args["perm_x1"], args["perm_x2"], args["perm_y"]) == ([1, 0, 2], [0, 1, 2],
                                                                   [1, 0, 2])
    assert (args["bias"], args["scale"], args["batch_split_factor"]) == (None, None, 1)
