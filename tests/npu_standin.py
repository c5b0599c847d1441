"""Stand-ins for the NPU operators of the vector/memory kernels, with their documented
signatures, so that a replay's NPU call is checked against what the API takes.

torch_npu functions are Python functions with the parameter names, order and keyword-only
markers of op-plugin's op_plugin_functions.yaml (a call with another name or a positional
keyword-only argument raises TypeError); vllm-ascend's custom operators are registered with
torch.library under their real namespaces and schemas (vllm-ascend csrc/torch_binding.cpp,
and the signature of split_qkv_rmsnorm_rope_impl that direct_register_custom_op turns into
one), so torch itself checks the call. Every call is recorded with its bound arguments.
"""

from __future__ import annotations

import inspect
import sys
import types

import pytest
import torch

from tests.test_devices import HostTensorNpu, fake_torch_npu

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


DOCUMENTED = (npu_interleave_rope, _npu_reshape_and_cache, npu_kv_rmsnorm_rope_cache,
              npu_scatter_nd_update_, npu_slice)


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
