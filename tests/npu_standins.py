"""Stand-ins for the NPU APIs the kernel replays call, with the documented signatures.

Each function has the Python signature of its schema in op-plugin
(op_plugin/config/op_plugin_functions.yaml; npu_ring_mla from op_plugin/ops/atb/RingMlaAtb.cpp)
or vllm-ascend (csrc/torch_binding.cpp for torch.ops._C_ascend.dispatch_ffn_combine), so a
call with an argument the API does not take, or without one it requires, raises TypeError.
Every call is recorded as (name, {parameter: value}).
"""

from __future__ import annotations

import sys
import types

import torch

from pytest_npuperf.devices.npu import NpuBackend

INT_MAX = 2147483647
INT64_MAX = 9223372036854775807


def make_torch_npu(calls: list) -> types.ModuleType:
    def record(name, arguments):
        calls.append((name, dict(arguments)))

    def npu_format_cast(tensor, fmt):
        record("npu_format_cast", locals())
        return tensor

    def npu_fused_infer_attention_score(
            query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None,
            actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
            dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None,
            antiquant_offset=None, key_antiquant_scale=None, key_antiquant_offset=None,
            value_antiquant_scale=None, value_antiquant_offset=None, block_table=None,
            query_padding_size=None, kv_padding_size=None, key_shared_prefix=None,
            value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None,
            key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
            pre_tokens=INT_MAX, next_tokens=INT_MAX, input_layout="BSH", num_key_value_heads=0,
            sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0, key_antiquant_mode=0,
            value_antiquant_mode=0, softmax_lse_flag=False):
        record("npu_fused_infer_attention_score", locals())

    def npu_grouped_matmul(
            x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
            antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
            activation_quant_scale=None, activation_quant_offset=None, split_item=0,
            group_type=None, group_list_type=0, act_type=0, tuning_config=None,
            output_dtype=None, x_dtype=None, weight_dtype=None, scale_dtype=None,
            per_token_scale_dtype=None):
        record("npu_grouped_matmul", locals())
        return [None]

    def npu_grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, *,
                                        bias=None, offset=None):
        record("npu_grouped_matmul_swiglu_quant", locals())

    def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                         output_dtype=None, x1_dtype=None, x2_dtype=None,
                         pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                         y_scale=None):
        record("npu_quant_matmul", locals())

    def npu_quantize(self, scales, zero_points, dtype, axis=1, div_mode=True):
        record("npu_quantize", locals())

    def npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None,
                          quant_mode="pertoken", dst_type_max=0.0):
        record("npu_dynamic_quant", locals())

    def npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None,
                                  perm_x2=None, perm_y=None, batch_split_factor=1):
        record("npu_transpose_batchmatmul", locals())

    def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
        record("npu_moe_token_permute", locals())

    def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                                restore_shape=None):
        record("npu_moe_token_unpermute", locals())

    def npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None,
                              actual_seq_lengths_key=None, block_table=None, layout_query="BSND",
                              layout_key="BSND", sparse_count=2048, sparse_mode=3,
                              pre_tokens=INT64_MAX, next_tokens=INT64_MAX, return_value=False):
        record("npu_lightning_indexer", locals())

    def npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *,
                                   block_table=None, actual_seq_lengths_query=None,
                                   actual_seq_lengths_kv=None, query_rope=None, key_rope=None,
                                   sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
                                   sparse_mode=3, pre_tokens=INT64_MAX, next_tokens=INT64_MAX,
                                   attention_mode=0, return_softmax_lse=False, sinks=None):
        record("npu_sparse_flash_attention", locals())

    def npu_ring_mla(q_nope, q_rope, k_nope, k_rope, value, mask, seqlen, head_num, kv_head_num,
                     *, pre_out=None, prev_lse=None, qk_scale=1, kernel_type=None,
                     mask_type=None, input_layout=None, calc_type=None):
        record("npu_ring_mla", locals())

    module = types.ModuleType("torch_npu")
    for function in (npu_format_cast, npu_fused_infer_attention_score, npu_grouped_matmul,
                     npu_grouped_matmul_swiglu_quant, npu_quant_matmul, npu_quantize,
                     npu_dynamic_quant, npu_transpose_batchmatmul, npu_moe_token_permute,
                     npu_moe_token_unpermute, npu_lightning_indexer, npu_sparse_flash_attention):
        setattr(module, function.__name__, function)
    module.atb = types.SimpleNamespace(npu_ring_mla=npu_ring_mla)
    return module


def install_ascend_ops(monkeypatch, calls: list) -> None:
    """vllm-ascend's operator library and `torch.ops._C_ascend` as stand-ins."""

    def dispatch_ffn_combine(x, weight1, weight2, expert_idx, scale1, scale2, bias1, bias2,
                             probs, group, max_output_size, out, expert_token_nums,
                             x_active_mask=None, swiglu_limit=1000000.0):
        calls.append(("dispatch_ffn_combine", dict(locals())))

    package = types.ModuleType("vllm_ascend")
    package.__path__ = []
    monkeypatch.setitem(sys.modules, "vllm_ascend", package)
    monkeypatch.setitem(sys.modules, "vllm_ascend.vllm_ascend_C",
                        types.ModuleType("vllm_ascend.vllm_ascend_C"))
    monkeypatch.setattr(torch.ops, "_C_ascend",
                        types.SimpleNamespace(dispatch_ffn_combine=dispatch_ffn_combine),
                        raising=False)


class HostNpu(NpuBackend):
    """The NPU backend's own logic (format casts) with a stand-in torch_npu and host tensors."""

    def __init__(self, torch_npu: types.ModuleType) -> None:
        self.torch_npu = torch_npu
        self.index = 0
        self.database_device_name = None

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")


def npu_backend(calls: list) -> HostNpu:
    return HostNpu(make_torch_npu(calls))


def only_call(calls: list, name: str) -> dict:
    """The arguments of the one call of `name`."""
    found = [arguments for called, arguments in calls if called == name]
    assert len(found) == 1, (name, [c for c, _ in calls])
    return found[0]
