"""MoE replays (GroupedMatmul, GroupedMatmulSwigluQuant, MoeTokenPermute/Unpermute,
DispatchFFNCombine): outputs against float64 / int64 numpy loops over groups and tokens; the
NPU calls against the upstream schemas of each supported stack (tests/npu_standin.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.devices.npu import FRACTAL_NZ_FORMAT_ID
from pytest_npuperf.kernels.binding import BindError
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.kernels.spec import ReplaySkipped
from tests.kernel_rows import f64, prepare, row
from tests.npu_standin import EMBEDDED, NEWEST, npu_backend, only_call, same_dtype

F32, BF16, I8, I32, I64 = "DT_FLOAT", "DT_BF16", "DT_INT8", "DT_INT32", "DT_INT64"
NZ = "FRACTAL_NZ"


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scale = np.abs(x).max(axis=-1) / 127
    return np.clip(np.rint(x / scale[:, None]), -128, 127), scale


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


# -- GroupedMatmul ----------------------------------------------------------------------------
def gmm_row(x, weight, out, group_list=((3,), I64), **filled):
    names = ("bias", "scale", "offset", "antiquant_scale", "antiquant_offset")
    inputs = [x, weight, *(filled.get(n) for n in names), group_list,
              filled.get("per_token_scale")]
    return row(inputs, [out])


def groups(sizes):
    start = 0
    for g, n in enumerate(sizes):
        yield g, slice(start, start + n)
        start += n


@pytest.mark.parametrize("weight, transposed", [((3, 16, 8), False), ((3, 8, 16), True)])
def test_grouped_matmul_multiplies_each_row_group_by_its_expert(weight, transposed):
    _, prepared = prepare("GroupedMatmul", gmm_row(((10, 16), F32), (weight, F32),
                                                   ((10, 8), F32)))
    t = prepared.tensors
    sizes = t["group_list"].tolist()
    assert sum(sizes) == 10 and min(sizes) >= 0 and t["group_list"].dtype == torch.int64
    w = f64(t["weight"])
    w = w.transpose(0, 2, 1) if transposed else w
    want = np.zeros((10, 8))
    for g, rows in groups(sizes):
        want[rows] = f64(t["x"])[rows] @ w[g]
    np.testing.assert_allclose(f64(prepared.call()), want, atol=1e-5)
    assert prepared.implementation == "eager: loop of torch.mm"  # torch._grouped_mm: CUDA only
    assert prepared.flops == 2 * 10 * 16 * 8


def test_grouped_matmul_w8a8_with_a_fractal_nz_weight_dequantises_per_channel_and_token():
    # FRACTAL_NZ (E, N/32, K/16, 16, 32) is the ND weight (E, K, N) = (2, 32, 64).
    cells = gmm_row(((12, 32), I8), ((2, 2, 2, 16, 32), I8, NZ), ((12, 64), BF16),
                    group_list=((2,), I64), scale=((2, 64), F32),
                    per_token_scale=((12,), F32))
    _, prepared = prepare("GroupedMatmul", cells)
    t = prepared.tensors
    assert t["weight"].shape == (2, 32, 64)
    x, w = t["x"].numpy().astype(np.int64), t["weight"].numpy().astype(np.int64)
    want = np.zeros((12, 64))
    for g, rows in groups(t["group_list"].tolist()):
        want[rows] = (x[rows] @ w[g]) * f64(t["scale"])[g] * f64(t["per_token_scale"])[rows, None]
    got = prepared.call()
    assert got.dtype == torch.bfloat16
    np.testing.assert_allclose(f64(got), want, rtol=1e-2, atol=1e-2)
    assert "int8 emulated" in prepared.implementation


def test_grouped_matmul_antiquant_dequantises_the_int8_weight():
    cells = gmm_row(((6, 16), F32), ((2, 16, 8), I8), ((6, 8), F32), group_list=((2,), I64),
                    antiquant_scale=((2, 8), F32), antiquant_offset=((2, 8), F32))
    _, prepared = prepare("GroupedMatmul", cells)
    t = prepared.tensors
    w = (f64(t["weight"]) + f64(t["antiquant_offset"])[:, None]) * f64(t["antiquant_scale"])[:, None]
    want = np.zeros((6, 8))
    for g, rows in groups(t["group_list"].tolist()):
        want[rows] = f64(t["x"])[rows] @ w[g]
    np.testing.assert_allclose(f64(prepared.call()), want, atol=1e-5)


def test_grouped_matmul_rows_it_cannot_replay_say_why():
    with pytest.raises(CellError, match="offset"):
        prepare("GroupedMatmul", gmm_row(((6, 16), I8), ((3, 16, 8), I8), ((6, 8), BF16),
                                         scale=((3, 8), F32), offset=((3, 8), F32)))
    with pytest.raises(CellError, match="int8"):
        prepare("GroupedMatmul", gmm_row(((6, 16), I8), ((3, 16, 8), I8), ((6, 8), BF16)))
    with pytest.raises(CellError, match="group_list"):
        prepare("GroupedMatmul", gmm_row(((6, 16), F32), ((3, 16, 8), F32), ((6, 8), F32),
                                         group_list=((4,), I64)))


def test_grouped_matmul_npu_call(monkeypatch):
    calls: list = []
    cells = gmm_row(((12, 32), I8), ((2, 2, 2, 16, 32), I8, NZ), ((12, 64), BF16),
                    group_list=((2,), I64), scale=((2, 64), F32), per_token_scale=((12,), F32))
    prepare("GroupedMatmul", cells, npu_backend(calls))[1].call()
    assert only_call(calls, "npu_format_cast")["acl_format"] == FRACTAL_NZ_FORMAT_ID
    args = only_call(calls, "npu_grouped_matmul")
    assert [x.shape for x in args["x"]] == [(12, 32)] and len(args["weight"]) == 1
    assert args["scale"][0].shape == (2, 64) and args["per_token_scale"][0].shape == (12,)
    assert (args["split_item"], args["group_type"], args["group_list_type"]) == (2, 0, 1)
    assert same_dtype(args["output_dtype"], torch.bfloat16)
    assert args["group_list"].sum() == 12 and args["bias"] is None


# -- GroupedMatmulSwigluQuant -----------------------------------------------------------------
SWIGLU_QUANT = row([((10, 32), I8), ((2, 2, 2, 16, 32), I8, NZ), ((2, 64), F32), ((10,), F32),
                    None, ((2,), I64)], [((10, 32), I8), ((10,), F32)])


def test_grouped_matmul_swiglu_quant_matches_int64_gemm_swiglu_and_requantisation():
    _, prepared = prepare("GroupedMatmulSwigluQuant", SWIGLU_QUANT)
    y, y_scale = prepared.call()
    assert y.shape == (10, 32) and y.dtype == torch.int8 and y_scale.dtype == torch.float32
    t = prepared.tensors
    ends = t["group_list"].tolist()
    assert ends[-1] == 10 and ends == sorted(ends)  # cumulative
    x, w = t["x"].numpy().astype(np.int64), t["weight"].numpy().astype(np.int64)
    h = np.zeros((10, 64))
    for g, rows in groups(np.diff([0, *ends])):
        h[rows] = (x[rows] @ w[g]) * f64(t["weight_scale"])[g] * f64(t["x_scale"])[rows, None]
    want_y, want_scale = quantize_rows(silu(h[:, :32]) * h[:, 32:])
    np.testing.assert_allclose(f64(y_scale), want_scale, rtol=1e-5)
    assert np.abs(f64(y) - want_y).max() <= 1  # float32 vs float64 at rounding boundaries


def test_grouped_matmul_swiglu_quant_npu_call():
    calls: list = []
    prepare("GroupedMatmulSwigluQuant", SWIGLU_QUANT, npu_backend(calls))[1].call()
    args = only_call(calls, "npu_grouped_matmul_swiglu_quant")
    assert args["x"].dtype == torch.int8 and args["weight"].shape == (2, 32, 64)
    assert args["group_list"].tolist()[-1] == 10 and args["weight_scale"].shape == (2, 64)
    assert args["x_scale"].shape == (10,) and args["bias"] is None


# -- MoeTokenPermute / MoeTokenUnpermute ------------------------------------------------------
PERMUTE = row([((5, 8), F32), ((5, 2), I32)], [((10, 8), F32), ((10,), I32)])
UNPERMUTE = row([((10, 8), F32), ((10,), I32), ((5, 2), F32)], [((5, 8), F32)])


def test_permute_groups_tokens_by_expert_and_says_where_each_landed():
    _, prepared = prepare("MoeTokenPermute", PERMUTE)
    permuted, landed = prepared.call()
    t = prepared.tensors
    experts = t["indices"].numpy()
    assert experts.dtype == np.int32 and experts.min() >= 0 and experts.max() < 256
    assert all(len(set(r)) == 2 for r in experts.tolist())  # distinct experts per token
    order = np.argsort(experts.reshape(-1), kind="stable")
    np.testing.assert_array_equal(f64(permuted), f64(t["tokens"])[order // 2])
    assert landed.dtype == torch.int32
    np.testing.assert_array_equal(landed.numpy()[order], np.arange(10))


def test_unpermute_sums_each_tokens_expert_rows_weighted_by_its_probs():
    _, prepared = prepare("MoeTokenUnpermute", UNPERMUTE)
    t = prepared.tensors
    assert sorted(t["sorted_indices"].tolist()) == list(range(10))
    np.testing.assert_allclose(f64(t["probs"]).sum(axis=1), 1, rtol=1e-6)
    rows = f64(t["permuted_tokens"])[t["sorted_indices"].numpy()].reshape(5, 2, 8)
    want = (rows * f64(t["probs"])[..., None]).sum(axis=1)
    np.testing.assert_allclose(f64(prepared.call()), want, atol=1e-6)
    # Without probs (an empty slot) it only gathers.
    _, prepared = prepare("MoeTokenUnpermute", row([((6, 8), F32), ((6,), I32), None],
                                                   [((6, 8), F32)]))
    t = prepared.tensors
    np.testing.assert_array_equal(f64(prepared.call()),
                                  f64(t["permuted_tokens"])[t["sorted_indices"].numpy()])


def test_unpermute_undoes_permute():
    _, permute = prepare("MoeTokenPermute", PERMUTE)
    permuted, landed = permute.call()
    unpermute_case, unpermute = prepare("MoeTokenUnpermute", UNPERMUTE)
    probs = unpermute.tensors["probs"]
    back = spec_for("MoeTokenUnpermute").portable_call(
        {"permuted_tokens": permuted, "sorted_indices": landed, "probs": probs}, unpermute_case)()
    np.testing.assert_allclose(f64(back), f64(permute.tensors["tokens"]), atol=1e-6)


def test_permute_and_unpermute_npu_calls():
    calls: list = []
    backend = npu_backend(calls)
    prepare("MoeTokenPermute", PERMUTE, backend)[1].call()
    prepare("MoeTokenUnpermute", UNPERMUTE, backend)[1].call()
    args = only_call(calls, "npu_moe_token_permute")
    assert args["indices"].shape == (5, 2) and args["num_out_tokens"] is None
    args = only_call(calls, "npu_moe_token_unpermute")
    assert args["sorted_indices"].dtype == torch.int32 and args["probs"].shape == (5, 2)


# -- DispatchFFNCombine -----------------------------------------------------------------------
DISPATCH = row([((6, 64), F32), ((2, 64, 32), I8), ((2, 16, 64), I8), ((6, 3), I32),
                ((64,), I64), ((128,), I64), ((6, 3), F32), None],
               [((6, 64), F32), ((2,), I32)], **{"EP Size": "4"})


def test_dispatch_ffn_combine_is_the_w8a8_expert_ffn_of_each_token_combined_by_probs():
    _, prepared = prepare("DispatchFFNCombine", DISPATCH)
    out, counts = prepared.call()
    assert out.shape == (6, 64) and counts.dtype == torch.int32
    t = prepared.tensors
    experts = t["expert_idx"].numpy()
    assert experts.min() >= 0 and experts.max() < 2 * 4  # all EP ranks' experts are routed to
    local = experts % 2
    np.testing.assert_array_equal(counts.numpy(), np.bincount(local.reshape(-1), minlength=2))
    s1 = t["scale1"].numpy().astype(np.uint32).view(np.float32).astype(np.float64).reshape(2, 32)
    s2 = t["scale2"].numpy().astype(np.uint32).view(np.float32).astype(np.float64).reshape(2, 64)
    w1, w2 = t["weight1"].numpy().astype(np.int64), t["weight2"].numpy().astype(np.int64)
    xq, xs = quantize_rows(f64(t["x"]))
    want = np.zeros((6, 64))
    for token in range(6):
        for k in range(3):
            e = local[token, k]
            h = (xq[token].astype(np.int64) @ w1[e]) * s1[e] * xs[token]
            aq, a_scale = quantize_rows((silu(h[:16]) * h[16:])[None])
            want[token] += f64(t["probs"])[token, k] * (aq[0].astype(np.int64) @ w2[e]) * s2[e] \
                * a_scale[0]
    assert np.abs(f64(out) - want).max() <= 2e-2 * np.abs(want).max()
    assert "EP 4 emulated" in prepared.implementation


def test_dispatch_ffn_combine_on_an_npu_without_its_process_group_is_skipped():
    with pytest.raises(ReplaySkipped, match="EP Size 4 needs an initialised"):
        prepare("DispatchFFNCombine", DISPATCH, npu_backend([]))


def _dispatch_call(stack: str, cells=DISPATCH) -> tuple[dict, object]:
    calls: list = []
    _, prepared = prepare("DispatchFFNCombine", cells, npu_backend(calls, stack, "hccl_world_4"))
    prepared.call()
    return only_call(calls, "dispatch_ffn_combine"), prepared


@pytest.mark.parametrize("stack", [EMBEDDED, NEWEST])
def test_dispatch_ffn_combine_binds_to_each_stacks_schema(stack):
    args, prepared = _dispatch_call(stack)
    assert args["group"] == "hccl_world_4" and [w.shape for w in args["weight1"]] == [(2, 64, 32)]
    scale1 = args["scale1"][0]
    assert scale1.dtype == torch.int64 and scale1.shape == (2, 32)
    assert torch.equal(scale1.view(-1), prepared.tensors["scale1"])
    assert args["probs"].dtype == torch.float32 and args["out"].shape == (6, 64)
    assert args["expert_token_nums"].dtype == torch.int32
    if stack == EMBEDDED:  # v0.18.0: csrc/torch_binding.cpp:809-812, no bias/mask/limit
        assert "bias1" not in args and "x_active_mask" not in args
        assert args["max_output_size"] == 65536
        assert prepared.implementation.endswith("[vllm-ascend v0.18.0 schema]")
    else:  # from v0.20.2rc1: empty float32 bias lists, mask, swiglu_limit at its default
        assert [b.numel() for b in args["bias1"] + args["bias2"]] == [0, 0]
        assert args["bias1"][0].dtype == torch.float32 and args["swiglu_limit"] == 1e6
        assert args["max_output_size"] == 131072 and args["x_active_mask"] is None
        assert prepared.implementation.endswith("[vllm-ascend >= v0.20.2rc1 schema]")


def test_unquantised_dispatch_ffn_combine_passes_an_empty_int64_scale_each():
    # What a profile of vllm-ascend's call records: an empty INT64 tensor in each scale slot.
    cells = row([((6, 64), BF16), ((2, 64, 32), BF16), ((2, 16, 64), BF16), ((6, 3), I32),
                 ((0,), I64), ((0,), I64), ((6, 3), F32), None], [((6, 64), BF16), ((2,), I32)],
                **{"EP Size": "4"})
    for stack in (EMBEDDED, NEWEST):
        args, _ = _dispatch_call(stack, cells)
        assert [(t.dtype, t.numel()) for t in args["scale1"] + args["scale2"]] == \
            [(torch.int64, 0)] * 2


def test_a_schema_neither_call_binds_fails_the_case_before_anything_is_timed(monkeypatch):
    backend = npu_backend([], NEWEST, "hccl_world_4")
    # vllm-ascend v0.13.0's schema: no expert_token_nums, one return.
    v13 = ("dispatch_ffn_combine(Tensor x, Tensor[] weight1, Tensor[] weight2, Tensor "
           "expert_idx, Tensor[] scale1, Tensor[] scale2, Tensor probs, str group, int "
           "max_output_size, Tensor! out) -> Tensor")
    lib = torch.library.Library("npuperf_v13_C_ascend", "DEF")
    lib.define(v13)
    try:
        op = torch.ops.npuperf_v13_C_ascend.dispatch_ffn_combine
        monkeypatch.setattr(backend, "custom_operator", lambda ns, name: op)
        with pytest.raises(BindError, match=r"v0\.18\.0 schema: .*no parameter "
                                            r"'expert_token_nums'"):
            prepare("DispatchFFNCombine", DISPATCH, backend)
    finally:
        lib._destroy()


def test_dispatch_ffn_combine_checks_its_ep_size():
    bad = dict(DISPATCH, **{"EP Size": "x"})
    with pytest.raises(CellError, match="EP Size"):
        prepare("DispatchFFNCombine", bad)
