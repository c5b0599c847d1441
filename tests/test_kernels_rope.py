"""InterleaveRope and split_qkv_rmsnorm_rope_kernel: the portable math against element-wise
float64 formulas, and the NPU calls against the upstream schemas (tests/npu_standin.py)."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuperf.db.errors import CellError
from pytest_npuperf.kernels.case import case_from_row
from pytest_npuperf.kernels.registry import spec_for
from tests import npu_standin
from tests.test_kernels_specs import prepare, row

# Fixtures: the stand-in NPU operators (tests/npu_standin.py).
npu = npu_standin.npu

INTERLEAVE = row("3,4,1,8;3,1,1,8;3,1,1,8", "DT_FLOAT;DT_FLOAT;DT_FLOAT", "ND;ND;ND",
                 "3,4,1,8", "DT_FLOAT")
# Qwen3-like at toy size: 4 q heads, 2 kv heads of 8.
SPLIT_QKV = row("5,64;8", "DT_FLOAT;DT_FLOAT", "ND;ND", "5,32;5,16;5,16",
                "DT_FLOAT;DT_FLOAT;DT_FLOAT")


def interleaved_rope(x, cos, sin):
    """The documented formula, element by element: q = the even elements then the odd ones,
    y_i = q_i cos_i + (i < D/2 ? -q_(i+D/2) : q_(i-D/2)) sin_i."""
    d = len(x)
    q = [x[2 * i] for i in range(d // 2)] + [x[2 * i + 1] for i in range(d // 2)]
    rotated = [-q[i + d // 2] if i < d // 2 else q[i - d // 2] for i in range(d)]
    return [q[i] * cos[i] + rotated[i] * sin[i] for i in range(d)]


def test_interleave_rope_matches_the_documented_formula():
    _, prepared = prepare("InterleaveRope", INTERLEAVE)
    t = prepared.tensors
    y = prepared.call()
    assert y.shape == t["x"].shape and y.dtype == torch.float32
    # cos and sin are a rotary table: cos^2 + sin^2 = 1, each half repeating the angles.
    torch.testing.assert_close(t["cos"] ** 2 + t["sin"] ** 2, torch.ones_like(t["cos"]))
    torch.testing.assert_close(t["cos"][..., :4], t["cos"][..., 4:])
    x, cos, sin = t["x"].double(), t["cos"].double(), t["sin"].double()
    for b in range(3):
        for n in range(4):
            want = interleaved_rope(x[b, n, 0].tolist(), cos[b, 0, 0].tolist(),
                                    sin[b, 0, 0].tolist())
            torch.testing.assert_close(y[b, n, 0].double(), torch.tensor(want, dtype=torch.float64))


def test_interleave_rope_rejects_cos_that_does_not_broadcast():
    with pytest.raises(CellError, match="broadcast"):
        prepare("InterleaveRope", row("3,4,1,8;3,2,1,8;3,2,1,8", "DT_BF16;DT_BF16;DT_BF16",
                                      "ND;ND;ND", "3,4,1,8", "DT_BF16"))


def test_interleave_rope_calls_torch_npu_with_the_built_tensors(npu):
    backend, calls = npu
    case = case_from_row("InterleaveRope", INTERLEAVE)
    prepared = spec_for("InterleaveRope").prepare(case, backend)
    prepared.call()
    args = calls.of("npu_interleave_rope")
    assert [args[k] for k in ("x", "cos", "sin")] == [prepared.tensors[k] for k in
                                                      ("x", "cos", "sin")]
    assert tuple(args["cos"].shape) == (3, 1, 1, 8)


def split_qkv_reference(t, q_heads=4, kv_heads=2, d=8, eps=1e-6):
    """Token by token, head by head, in float64 Python arithmetic."""
    x, table = t["input"].double().tolist(), t["cos_sin_cache"].double().tolist()
    q_w, k_w = t["q_weight"].double().tolist(), t["k_weight"].double().tolist()
    qs, ks = [], []
    for token, pos in zip(x, t["positions"].tolist()):
        cos, sin = table[pos][: d // 2] * 2, table[pos][d // 2:] * 2
        out = []
        for head in range(q_heads + kv_heads):
            v = token[head * d:(head + 1) * d]
            rstd = 1 / math.sqrt(sum(e * e for e in v) / d + eps)
            w = q_w if head < q_heads else k_w
            n = [e * rstd * g for e, g in zip(v, w)]
            rot = [-n[i + d // 2] if i < d // 2 else n[i - d // 2] for i in range(d)]
            out += [n[i] * cos[i] + rot[i] * sin[i] for i in range(d)]
        qs.append(out[:q_heads * d])
        ks.append(out[q_heads * d:])
    return torch.tensor(qs, dtype=torch.float64), torch.tensor(ks, dtype=torch.float64)


def test_split_qkv_rmsnorm_rope_matches_a_per_head_loop():
    _, prepared = prepare("split_qkv_rmsnorm_rope_kernel", SPLIT_QKV)
    t = prepared.tensors
    assert int(t["positions"].min()) >= 0 and int(t["positions"].max()) < t["cos_sin_cache"].shape[0]
    q, k, v = prepared.call()
    want_q, want_k = split_qkv_reference(t)
    torch.testing.assert_close(q.double(), want_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k.double(), want_k, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, t["input"][:, 48:])


def test_split_qkv_needs_widths_that_split_into_heads():
    with pytest.raises(CellError, match="not q 32"):
        prepare("split_qkv_rmsnorm_rope_kernel", row("5,60;8", "DT_BF16;DT_BF16", "ND;ND",
                                                     "5,32;5,16;5,16", "DT_BF16;DT_BF16;DT_BF16"))


def test_split_qkv_calls_the_vllm_custom_op_with_its_keywords(npu):
    backend, calls = npu
    case = case_from_row("split_qkv_rmsnorm_rope_kernel", SPLIT_QKV)
    prepared = spec_for("split_qkv_rmsnorm_rope_kernel").prepare(case, backend)
    assert len(prepared.call()) == 3  # (q, k, v): the schema torch infers from the function
    args = calls.of("vllm::qkv_rmsnorm_rope")
    assert (args["q_hidden_size"], args["kv_hidden_size"], args["head_dim"]) == (32, 16, 8)
    assert args["input"] is prepared.tensors["input"] and args["q_bias"] is None
    assert args["positions"].dtype == torch.int64 and args["cos_sin_cache"].shape[-1] == 8
