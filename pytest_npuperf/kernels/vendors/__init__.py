"""Vendor libraries as implementations of kernel types (kernels/implementation_options.py).

Plain data, importable without the libraries: `npuperf kernels` lists each beside the kernel
types it replays, as available or as absent with how to get it. A build function ("module:
function") imports its library only when a case runs it. Each takes (spec, inputs, case,
backend) and returns the call, tagged with what it ran (`implemented`) and, when it computes
fewer outputs than the kernel, which of them (`outputs`); a row it cannot run raises
`Unsupported`, and another implementation measures it.
"""

from __future__ import annotations

from ..implementation import Implementation

VLLM_INSTALL = "pip install vllm, a CUDA build"

VENDORS: tuple[Implementation, ...] = (
    Implementation(
        "vllm", "vLLM's CUDA kernels: torch.ops._C.rms_norm", ("cuda",), ("RmsNorm",),
        ("vllm",), VLLM_INSTALL, f"{__name__}.vllm_ops:rms_norm"),
    Implementation(
        "vllm", "vLLM's CUDA kernels: torch.ops._C.silu_and_mul", ("cuda",), ("SwiGlu",),
        ("vllm",), VLLM_INSTALL, f"{__name__}.vllm_ops:silu_and_mul"),
    Implementation(
        "vllm", "vLLM's CUDA kernels: torch.ops._C.dynamic_scaled_int8_quant", ("cuda",),
        ("DynamicQuant",), ("vllm",), VLLM_INSTALL, f"{__name__}.vllm_ops:dynamic_int8_quant"),
    Implementation(
        "vllm", "vLLM's CUDA kernels: torch.ops._C_cache_ops.reshape_and_cache_flash",
        ("cuda",), ("ReshapeAndCacheNdKernel",), ("vllm",), VLLM_INSTALL,
        f"{__name__}.vllm_ops:reshape_and_cache_flash"),
    Implementation(
        "liger", "Liger-Kernel's Triton RMS norm (liger_rms_norm)", ("cuda",), ("RmsNorm",),
        ("liger_kernel",), "pip install liger-kernel", f"{__name__}.liger:rms_norm"),
    Implementation(
        "flex", "torch's FlexAttention, compiled: a paged cache read in place through a block "
        "mask", ("cuda", "cpu"), ("FusedInferAttentionScore",), (), "",
        f"{__name__}.flex_paged:fused_infer_attention", compiles=True),
    Implementation(
        "flash-attn", "FlashAttention-2: flash_attn_varlen_func, flash_attn_with_kvcache (paged)",
        ("cuda",), ("FusedInferAttentionScore",), ("flash_attn",), "pip install flash-attn",
        f"{__name__}.flash_attention:fused_infer_attention"),
)
