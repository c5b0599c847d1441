"""Vendor implementations bind to the libraries as they are (issue 21), checked here without
a GPU through stand-ins built from the libraries' own definitions:

- vLLM's operators, defined with the schemas of vllm-project/vllm csrc/torch_bindings.cpp
  (verbatim below) and the math the kernels document;
- FlashAttention-2's functions, with the signatures and return conventions of
  Dao-AILab/flash-attention flash_attn/flash_attn_interface.py;
- torch's own FlexAttention, compiled through a backend that traces without generating code.

Each implementation's output is verified against the float64 reference, as a best-of does."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from pytest_npuperf.devices import CpuBackend
from pytest_npuperf.kernels import implementation_options
from pytest_npuperf.kernels.implementation import Unsupported
from pytest_npuperf.kernels.registry import spec_for
from pytest_npuperf.kernels.vendors.vllm_ops import _operator
from pytest_npuperf.measure.verify import Verifier
from tests.kernel_rows import prepare
from tests.replay_project import cells
from tests.test_kernels_attention import F32, I32, I64, MASK, PREFILL, fia_row

# vllm-project/vllm csrc/torch_bindings.cpp (the schemas the vLLM implementation binds to).
VLLM_SCHEMAS = {
    "_C": ["rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
           "silu_and_mul(Tensor! result, Tensor input) -> ()",
           "dynamic_scaled_int8_quant(Tensor! result, Tensor input, Tensor! scale, "
           "Tensor!? azp) -> ()"],
    "_C_cache_ops": ["reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, "
                     "Tensor! value_cache, Tensor slot_mapping, str kv_cache_dtype, "
                     "Tensor k_scale, Tensor v_scale) -> ()"],
}


def _rms_norm(result, x, weight, epsilon):
    xf = x.float()
    result.copy_(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + epsilon) * weight.float())


def _silu_and_mul(result, x):
    d = x.shape[-1] // 2
    result.copy_(torch.nn.functional.silu(x[..., :d].float()) * x[..., d:].float())


def _dynamic_int8(result, x, scale, azp):
    scale.copy_(x.float().abs().amax(-1, keepdim=True) / 127)
    result.copy_(torch.round(x.float() / scale).clamp(-128, 127))


def _reshape_and_cache(key, value, key_cache, value_cache, slots, dtype, k_scale, v_scale):
    key_cache.view(-1, *key.shape[1:])[slots] = key
    value_cache.view(-1, *value.shape[1:])[slots] = value


@pytest.fixture(scope="module")
def vllm_standin():
    """torch.ops._C / _C_cache_ops with vLLM's schemas, and an importable `vllm._C`."""
    kernels = {"rms_norm": _rms_norm, "silu_and_mul": _silu_and_mul,
               "dynamic_scaled_int8_quant": _dynamic_int8,
               "reshape_and_cache_flash": _reshape_and_cache}
    libraries = []
    for namespace, schemas in VLLM_SCHEMAS.items():
        library = torch.library.Library(namespace, "FRAGMENT")
        for schema in schemas:
            library.define(schema)
            name = schema.split("(")[0]
            library.impl(name, kernels[name], "CPU")
        libraries.append(library)
    package, extension = types.ModuleType("vllm"), types.ModuleType("vllm._C")
    package.__path__ = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "vllm", package)
        patch.setitem(sys.modules, "vllm._C", extension)
        yield
    for library in libraries:
        library._destroy()


def _verified(kernel_type: str, row: dict, impl: str):
    case, eager = prepare(kernel_type, row)
    spec = spec_for(kernel_type)
    prepared = spec.implement(eager, impl, case, CpuBackend())
    assert prepared.impl == impl
    return prepared, Verifier(0, lambda: None).check(spec, case, prepared)


@pytest.mark.parametrize(("kernel_type", "row", "outputs"), [
    ("RmsNorm", cells("4,256;256", "DT_BF16;DT_BF16", "ND;ND", "4,256;4,1",
                      "DT_BF16;DT_FLOAT", "ND;ND"), 1),  # y only: no rstd
    ("SwiGlu", cells("4,64", "DT_BF16", "ND", "4,32", "DT_BF16"), 1),
    ("DynamicQuant", cells("6,128", "DT_BF16", "ND", "6,128;6", "DT_INT8;DT_FLOAT",
                           "ND;ND"), 2),
    ("ReshapeAndCacheNdKernel",
     cells("5,2,16;5,2,16;4,8,2,16;4,8,2,16;5", "DT_BF16;DT_BF16;DT_BF16;DT_BF16;DT_INT32",
           "ND;ND;ND;ND;ND", "", ""), 2),
])
def test_vllm_kernels_bind_by_their_schemas_and_compute_the_kernel(vllm_standin, kernel_type,
                                                                   row, outputs):
    prepared, verified = _verified(kernel_type, row, "vllm")
    assert prepared.implementation.startswith("vllm: torch.ops._C")
    assert verified.startswith(f"verified: {outputs} output(s) within tolerance")


def test_a_vllm_whose_operator_changed_is_unsupported_not_misbound(vllm_standin):
    library = torch.library.Library("npuperf_changed", "DEF")
    library.define("rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon, "
                   "bool extra) -> ()")
    try:
        with pytest.raises(Unsupported, match=r"torch.ops.npuperf_changed.rms_norm here is "
                                              r".*5.*: 4 arguments expected|4 arguments"):
            _operator("npuperf_changed", "rms_norm", 4)
        with pytest.raises(Unsupported, match="this vLLM has no torch.ops._C.gone"):
            _operator("_C", "gone", 2)
    finally:
        library._destroy()


# -- FlashAttention-2 -----------------------------------------------------------------------------
def _attend(q, k, v, scale, causal):
    """q (Sq, H, D), k/v (Sk, Hk, D) -> out (Sq, H, D), lse (H, Sq): bottom-right causal."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) * scale
    if causal:
        sq, sk = q.shape[0], k.shape[0]
        allowed = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)
        scores = scores.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    out = torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float())
    return out.to(q.dtype), lse


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           dropout_p=0.0, softmax_scale=None, causal=False,
                           window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    outs, lses = [], []
    for i in range(len(cu_seqlens_q) - 1):
        a, b = int(cu_seqlens_q[i]), int(cu_seqlens_q[i + 1])
        c, d = int(cu_seqlens_k[i]), int(cu_seqlens_k[i + 1])
        out, lse = _attend(q[a:b], k[c:d], v[c:d], softmax_scale, causal)
        outs.append(out)
        lses.append(lse)
    out = torch.cat(outs)
    return (out, torch.cat(lses, -1), None) if return_attn_probs else out


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                    window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                    return_attn_probs=False):
    pairs = [_attend(q[b], k[b], v[b], softmax_scale, causal) for b in range(q.shape[0])]
    out = torch.stack([o for o, _ in pairs])
    return (out, torch.stack([s for _, s in pairs]), None) if return_attn_probs else out


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens=None, cache_batch_idx=None,
                            cache_leftpad=None, block_table=None, softmax_scale=None,
                            causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    pairs = []
    for b in range(q.shape[0]):
        n = int(cache_seqlens[b])
        pages = block_table[b, :-(-n // k_cache.shape[1])].long()
        keys = k_cache[pages].reshape(-1, *k_cache.shape[2:])[:n]
        values = v_cache[pages].reshape(-1, *v_cache.shape[2:])[:n]
        pairs.append(_attend(q[b], keys, values, softmax_scale, causal))
    out = torch.stack([o for o, _ in pairs])
    return (out, torch.stack([s for _, s in pairs])) if return_softmax_lse else out


@pytest.fixture
def flash_attn_standin(monkeypatch):
    module = types.ModuleType("flash_attn")
    module.flash_attn_varlen_func = flash_attn_varlen_func
    module.flash_attn_func = flash_attn_func
    module.flash_attn_with_kvcache = flash_attn_with_kvcache
    monkeypatch.setitem(sys.modules, "flash_attn", module)


PAGED_256 = fia_row(
    {0: ((2, 4, 16), F32), 1: ((4, 256, 32), F32), 2: ((4, 256, 32), F32), 4: MASK,
     5: ((2,), I64), 6: ((2,), I64), 14: ((2, 2), I32)},
    [((2, 4, 16), F32), ((2, 4, 1), F32)],
    input_layout="TND", num_heads="4", num_key_value_heads="2", sparse_mode="3",
    block_size="256", actual_seq_lengths_values="1,2", actual_seq_lengths_kv_values="300,77")


def _bf16(row: dict) -> dict:
    return {**row, "Input Data Types": row["Input Data Types"].replace("DT_FLOAT", "DT_BF16"),
            "Output Data Types": row["Output Data Types"].replace("DT_FLOAT", "DT_BF16", 1)}


def test_flash_attn_prefill_of_unequal_sequences_with_its_lse(flash_attn_standin):
    prepared, verified = _verified("FusedInferAttentionScore", _bf16(PREFILL), "flash-attn")
    assert prepared.implementation == "flash-attn: flash_attn_varlen_func + its softmax LSE"
    assert verified.startswith("verified: 2 output(s)")


def test_flash_attn_reads_a_paged_cache_in_place_in_pages_of_256(flash_attn_standin):
    prepared, verified = _verified("FusedInferAttentionScore", _bf16(PAGED_256), "flash-attn")
    assert prepared.implementation.startswith("flash-attn: flash_attn_with_kvcache (paged)")
    assert verified.startswith("verified: 2 output(s)")
    small_pages = _bf16(fia_row(
        {0: ((3, 4, 16), F32), 1: ((8, 4, 32), F32), 2: ((8, 4, 32), F32), 4: MASK,
         5: ((3,), I64), 6: ((3,), I64), 14: ((3, 3), I32)}, [((3, 4, 16), F32)],
        input_layout="TND", num_heads="4", num_key_value_heads="2", sparse_mode="3",
        block_size="4", actual_seq_lengths_values="1,2,3",
        actual_seq_lengths_kv_values="5,12,7"))
    case, eager = prepare("FusedInferAttentionScore", small_pages)
    with pytest.raises(Unsupported, match="pages are multiples of 256"):
        spec_for("FusedInferAttentionScore").implement(eager, "flash-attn", case, CpuBackend())


# -- FlexAttention over the paged cache -----------------------------------------------------------
def test_flex_attention_reads_the_pages_its_block_table_names(monkeypatch):
    monkeypatch.setattr(implementation_options, "COMPILE_BACKEND", "aot_eager")
    no_lse = fia_row(
        {0: ((3, 4, 16), F32), 1: ((8, 4, 32), F32), 2: ((8, 4, 32), F32), 4: MASK,
         5: ((3,), I64), 6: ((3,), I64), 14: ((3, 3), I32)}, [((3, 4, 16), F32)],
        input_layout="TND", num_heads="4", num_key_value_heads="2", sparse_mode="3",
        block_size="4", actual_seq_lengths_values="1,2,3", actual_seq_lengths_kv_values="5,12,7")
    prepared, verified = _verified("FusedInferAttentionScore", no_lse, "flex")
    assert prepared.implementation.startswith("flex: FlexAttention (compiled) over the paged "
                                              "cache in place")
    assert verified.startswith("verified: 1 output(s)")  # the attention output; no LSE
    # Dense rows are read in place by the scaled-dot-product kernels already.
    case, eager = prepare("FusedInferAttentionScore", PREFILL)
    with pytest.raises(Unsupported, match="not a paged cache"):
        spec_for("FusedInferAttentionScore").implement(eager, "flex", case, CpuBackend())
