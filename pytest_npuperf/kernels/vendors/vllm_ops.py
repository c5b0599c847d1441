"""vLLM's CUDA kernels as implementations: what a vLLM server runs for these kernel types.

The operators are registered under `torch.ops._C` and `torch.ops._C_cache_ops` when
`vllm._C` is imported. Their schemas (vllm-project/vllm, csrc/torch_bindings.cpp):

- `rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()`
- `silu_and_mul(Tensor! result, Tensor input) -> ()`: silu(x[..., :d]) * x[..., d:]
- `dynamic_scaled_int8_quant(Tensor! result, Tensor input, Tensor! scale, Tensor!? azp) -> ()`
  (per-token symmetric with azp None, round to nearest even, scales (tokens, 1))
- `reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache,
  Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()` (caches
  (blocks, block_size, heads, dim), int64 slots)

The arguments are passed by position, after checking the installed schema takes as many: a
release whose operator changed says so (`Unsupported`) instead of binding wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..implementation import Unsupported
from ..norm import RMS_NORM_EPS
from ..spec import implemented


def _operator(namespace: str, name: str, arity: int) -> Callable:
    try:
        import vllm._C  # noqa: F401  (registers torch.ops._C and torch.ops._C_cache_ops)
    except ImportError as exc:
        raise Unsupported(f"vllm._C cannot be imported: {exc}") from None
    try:
        op = getattr(getattr(torch.ops, namespace), name)
        schema = op.default._schema
    except (AttributeError, RuntimeError):
        raise Unsupported(f"this vLLM has no torch.ops.{namespace}.{name}") from None
    if len(schema.arguments) != arity:
        raise Unsupported(f"torch.ops.{namespace}.{name} here is {schema}: {arity} "
                          f"arguments expected")
    return op


def rms_norm(spec, inputs, case, backend) -> Callable[[], object]:
    x, gamma = inputs["x"], inputs["gamma"]
    if gamma.dim() != 1:
        raise Unsupported(f"gamma {tuple(gamma.shape)} spans several dims; rms_norm takes "
                          f"one weight over the last")
    op = _operator("_C", "rms_norm", 4)
    out = torch.empty_like(x)

    def call():
        op(out, x, gamma, RMS_NORM_EPS)
        return out
    # y only: the NPU kernel also writes rstd, a serving engine does not need it.
    return implemented("torch.ops._C.rms_norm (y; no rstd)", call, outputs=(0,))


def silu_and_mul(spec, inputs, case, backend) -> Callable[[], object]:
    x = inputs["x"]
    op = _operator("_C", "silu_and_mul", 2)
    out = torch.empty(*x.shape[:-1], x.shape[-1] // 2, dtype=x.dtype, device=x.device)

    def call():
        op(out, x)
        return out
    return implemented("torch.ops._C.silu_and_mul", call)


def dynamic_int8_quant(spec, inputs, case, backend) -> Callable[[], object]:
    x = inputs["x"]
    if "smooth_scales" in inputs:
        raise Unsupported("smooth scales: dynamic_scaled_int8_quant takes none")
    op = _operator("_C", "dynamic_scaled_int8_quant", 4)
    rows = x.numel() // x.shape[-1]
    flat = x.reshape(rows, x.shape[-1])
    out = torch.empty(flat.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(rows, 1, dtype=torch.float32, device=x.device)

    def call():
        op(out, flat, scale, None)
        return out.view(x.shape), scale.view(x.shape[:-1])
    return implemented("torch.ops._C.dynamic_scaled_int8_quant", call)


def reshape_and_cache_flash(spec, inputs, case, backend) -> Callable[[], object]:
    op = _operator("_C_cache_ops", "reshape_and_cache_flash", 8)
    key, value = inputs["key"], inputs["value"]
    key_cache, value_cache = inputs["key_cache"], inputs["value_cache"]
    slots = inputs["slot_mapping"].to(torch.int64)  # the kernel reads int64 slots
    one = torch.ones((), dtype=torch.float32, device=key.device)  # no fp8 cache: unit scales

    def call():
        op(key, value, key_cache, value_cache, slots, "auto", one, one)
    return implemented("torch.ops._C_cache_ops.reshape_and_cache_flash", call)
