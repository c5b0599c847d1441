"""Stand-ins for the NPU operators the kernel replays call, with their documented signatures,
so that a replay's NPU call is checked against what the API takes.

torch_npu functions are Python functions with the parameter names, order, defaults and
keyword-only markers of op-plugin's op_plugin/config/op_plugin_functions.yaml (npu_ring_mla:
op_plugin/ops/atb/RingMlaAtb.cpp); a call with another name, a positional keyword-only
argument or a missing required one raises TypeError. vllm-ascend's custom operators are
registered with torch.library under their real namespaces and schemas (vllm-ascend
csrc/torch_binding.cpp, and the signature of split_qkv_rmsnorm_rope_impl that
direct_register_custom_op turns into one), so torch itself checks the call; dispatch_ffn_combine
(a multi-rank op) is a Python stand-in with its binding's signature. Every call is recorded as
(name, {parameter: argument}) with the defaults applied.

Two ways in: the `npu` fixture (the NPU backend over test_devices' stand-in torch_npu, with
every operator below) and `npu_backend(calls)` (a backend over a torch_npu module of its own,
no monkeypatching).
"""

from __future__ import annotations

import inspect
import sys
import types

import pytest
import torch

from pytest_npuperf.devices.npu import NpuBackend
from tests.test_devices import HostTensorNpu, fake_torch_npu

INT_MAX = 2147483647
INT64_MAX = 9223372036854775807

ADD_RMS_NORM_BIAS_SCHEMA = ("(Tensor x1, Tensor x2, Tensor gamma, Tensor? beta=None, "
                            "float epsilon=1e-6) -> (Tensor, Tensor, Tensor)")
QKV_RMSNORM_ROPE_SCHEMA = ("(Tensor input, Tensor cos_sin_cache, Tensor positions, "
                           "Tensor q_weight, Tensor k_weight, SymInt q_hidden_size, "
                           "SymInt kv_hidden_size, SymInt head_dim, float eps, "
                           "Tensor? q_bias=None, Tensor? k_bias=None) -> (Tensor, Tensor, Tensor)")


def npu_interleave_rope(x, cos, sin):
    return torch.empty_like(x)


def _npu_reshape_and_cache(key, value, key_cache, value_cache, slot_indices):
    return None


def npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *,
                              k_rope_scale=None, c_kv_scale=None, k_rope_offset=None,
                              c_kv_offset=None, v=None, epsilon=1e-5, cache_mode="Norm",
                              is_output_kv=False):
    lead = kv.shape[:-1]
    return (k_cache, ckv_cache, kv.new_empty(*lead, k_cache.shape[-1]),
            kv.new_empty(*lead, ckv_cache.shape[-1]))


def npu_scatter_nd_update_(self, indices, updates):
    return self


def npu_slice(self, offsets, size):
    return self.new_empty(size)


VECTOR_OPS = (npu_interleave_rope, _npu_reshape_and_cache, npu_kv_rmsnorm_rope_cache,
              npu_scatter_nd_update_, npu_slice)


# -- attention, MoE and quantisation ----------------------------------------------------------
def npu_format_cast(tensor, fmt):
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
    return None


def npu_grouped_matmul(
        x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
        antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
        activation_quant_scale=None, activation_quant_offset=None, split_item=0,
        group_type=None, group_list_type=0, act_type=0, tuning_config=None,
        output_dtype=None, x_dtype=None, weight_dtype=None, scale_dtype=None,
        per_token_scale_dtype=None):
    return [None]


def npu_grouped_matmul_swiglu_quant(x, weight, group_list, weight_scale, x_scale, *,
                                    bias=None, offset=None):
    return None


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
                     output_dtype=None, x1_dtype=None, x2_dtype=None,
                     pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None,
                     y_scale=None):
    return None


def npu_quantize(self, scales, zero_points, dtype, axis=1, div_mode=True):
    return None


def npu_dynamic_quant(input, *, smooth_scales=None, group_index=None, dst_type=None,
                      quant_mode="pertoken", dst_type_max=0.0):
    return None


def npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None,
                              perm_x2=None, perm_y=None, batch_split_factor=1):
    return None


def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    return None


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
                            restore_shape=None):
    return None


def npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None,
                          actual_seq_lengths_key=None, block_table=None, layout_query="BSND",
                          layout_key="BSND", sparse_count=2048, sparse_mode=3,
                          pre_tokens=INT64_MAX, next_tokens=INT64_MAX, return_value=False):
    return None


def npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, *,
                               block_table=None, actual_seq_lengths_query=None,
                               actual_seq_lengths_kv=None, query_rope=None, key_rope=None,
                               sparse_block_size=1, layout_query="BSND", layout_kv="BSND",
                               sparse_mode=3, pre_tokens=INT64_MAX, next_tokens=INT64_MAX,
                               attention_mode=0, return_softmax_lse=False, sinks=None):
    return None


def npu_ring_mla(q_nope, q_rope, k_nope, k_rope, value, mask, seqlen, head_num, kv_head_num,
                 *, pre_out=None, prev_lse=None, qk_scale=1, kernel_type=None,
                 mask_type=None, input_layout=None, calc_type=None):
    return None


HEAVY_OPS = (npu_fused_infer_attention_score, npu_grouped_matmul,
             npu_grouped_matmul_swiglu_quant, npu_quant_matmul, npu_quantize, npu_dynamic_quant,
             npu_transpose_batchmatmul, npu_moe_token_permute, npu_moe_token_unpermute,
             npu_lightning_indexer, npu_sparse_flash_attention)
DOCUMENTED = VECTOR_OPS + HEAVY_OPS


class Calls(list):
    """(operator name, {parameter: argument}) of every call, in order."""

    def of(self, name: str) -> dict:
        found = [args for op, args in self if op == name]
        assert found, f"{name} was not called (calls: {[op for op, _ in self]})"
        return found[-1]


def _recording(fn, calls: Calls):
    signature = inspect.signature(fn)

    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)  # TypeError on an undocumented call
        bound.apply_defaults()
        calls.append((fn.__name__, dict(bound.arguments)))
        return fn(*args, **kwargs)
    call.__name__ = fn.__name__
    return call


@pytest.fixture
def npu(monkeypatch):
    """(backend, calls): the NPU backend over a stand-in torch_npu that knows these operators,
    with the custom-op environment taken as set (its own check is tested separately)."""
    calls = Calls()
    module = fake_torch_npu(monkeypatch, [])
    for fn in DOCUMENTED:
        monkeypatch.setattr(module, fn.__name__, _recording(fn, calls), raising=False)
    monkeypatch.setattr(module, "atb", _atb(calls), raising=False)
    from pytest_npuperf.kernels import spec

    monkeypatch.setattr(spec, "custom_op_environment", lambda env=None: [])
    return HostTensorNpu(0), calls


@pytest.fixture(scope="module")
def custom_ops():
    """vllm-ascend's custom operators, defined under their namespaces for this module's tests;
    the modules that register them on a real install stand in as empty modules."""
    calls = Calls()
    libraries = [torch.library.Library("_C_ascend", "FRAGMENT"),
                 torch.library.Library("vllm", "FRAGMENT")]
    libraries[0].define("npu_add_rms_norm_bias" + ADD_RMS_NORM_BIAS_SCHEMA)
    libraries[1].define("qkv_rmsnorm_rope" + QKV_RMSNORM_ROPE_SCHEMA)

    def add_rms_norm_bias(x1, x2, gamma, beta=None, epsilon=1e-6):
        calls.append(("npu_add_rms_norm_bias", {"x1": x1, "x2": x2, "gamma": gamma,
                                                "beta": beta, "epsilon": epsilon}))
        rstd = x1.new_empty(*x1.shape[:-1], 1, dtype=torch.float32)
        return torch.empty_like(x1), rstd, torch.empty_like(x1)

    def qkv_rmsnorm_rope(input, cos_sin_cache, positions, q_weight, k_weight, q_hidden_size,
                         kv_hidden_size, head_dim, eps, q_bias=None, k_bias=None):
        calls.append(("qkv_rmsnorm_rope", dict(
            input=input, cos_sin_cache=cos_sin_cache, positions=positions, q_weight=q_weight,
            k_weight=k_weight, q_hidden_size=q_hidden_size, kv_hidden_size=kv_hidden_size,
            head_dim=head_dim, eps=eps, q_bias=q_bias, k_bias=k_bias)))
        tokens = input.shape[0]
        return (input.new_empty(tokens, q_hidden_size), input.new_empty(tokens, kv_hidden_size),
                input.new_empty(tokens, kv_hidden_size))

    libraries[0].impl("npu_add_rms_norm_bias", add_rms_norm_bias, "CPU")
    libraries[1].impl("qkv_rmsnorm_rope", qkv_rmsnorm_rope, "CPU")
    stand_ins = ("vllm_ascend.vllm_ascend_C",
                 "vllm_ascend.ops.triton.linearnorm.split_qkv_rmsnorm_rope")
    saved = {name: sys.modules.get(name) for name in stand_ins}
    for name in stand_ins:
        sys.modules[name] = types.ModuleType(name)
    yield calls
    for name, module in saved.items():
        if module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = module
    for library in libraries:
        library._destroy()


def _atb(calls: list) -> types.SimpleNamespace:
    return types.SimpleNamespace(npu_ring_mla=_recording(npu_ring_mla, calls))


def make_torch_npu(calls: list) -> types.ModuleType:
    """A torch_npu module of its own with every operator above (and npu_format_cast),
    recording into `calls`."""
    module = types.ModuleType("torch_npu")
    for fn in (npu_format_cast, *DOCUMENTED):
        setattr(module, fn.__name__, _recording(fn, calls))
    module.atb = _atb(calls)
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
